"""The reports' verdicts beside the interval that decides them: the speedup's interval
corrected for the verdicts made against the same baseline, recomputed from the records."""

import numpy as np
import pandas as pd
import pytest

from parbench.plan.trials import Trial
from parbench.reporting.answers import answers, deciding_intervals, results_table
from parbench.results import stats
from parbench.results.comparisons import add_comparisons
from tests.support import ok_record

ROUNDS = 4


def _record(strategy, throughputs, devices="cpu,cpu", **fields):
    """An ok record with one ok trial per round at these throughputs."""
    trials = [Trial(r, "ok", None, {"throughput_ips": t, "step_time_median_s": 8 / t})
              for r, t in enumerate(throughputs)]
    return ok_record(strategy, devices=devices, throughput_ips=stats.centre(throughputs),
                     peak_memory_max_mib=100.0, memory_imbalance=1.0,
                     trials=[t.to_dict() for t in trials],
                     intervals={"throughput_ips": list(stats.interval(throughputs))},
                     interval_method=stats.METHOD, **fields)


def _run(seed: int):
    """Made-up paired rounds: single, drifting from round to round, and 12 configurations
    against it, some no different, some a little faster, some much faster or slower."""
    rng = np.random.default_rng(seed)
    baseline = 100.0 * np.exp(rng.normal(0.0, 0.2, ROUNDS))  # drift cancels when paired
    effects = [0.0] * 6 + [0.04, 0.05, 0.06, 0.4, 0.5, -0.5]
    records = [_record("single", list(baseline), devices="cpu")]
    for k, effect in enumerate(effects):
        ratios = np.exp(effect + rng.normal(0.0, 0.02, ROUNDS))
        records.append(_record("ddp", list(baseline * ratios), world_size=2,
                               strategy_options={"bucket_cap_mb": k + 1}))
    add_comparisons(records)
    return records


@pytest.mark.parametrize("seed", range(6))
def test_every_verdict_has_a_deciding_interval_on_its_side_of_one(seed):
    records = _run(seed)
    frame = pd.DataFrame([r.to_dict() for r in records])
    decided = deciding_intervals(frame)
    assert set(decided) == set(range(1, len(records)))  # every one but the baseline
    for index, record in enumerate(records[1:], start=1):
        low, high = decided[index].bounds
        if record.verdict == "within noise":
            assert low <= 1 <= high
        elif record.verdict == "faster":
            assert 1 < low
        else:
            assert record.verdict == "slower" and high < 1
        # The speedup's own 95% interval lies inside: a verdict can be within noise where
        # that one excludes 1, never the other way round.
        own_low, own_high = record.intervals["speedup_vs_baseline"]
        assert low <= own_low and own_high <= high
        assert decided[index].verdicts == 12


def _contradicted():
    """A run in which some verdict's own 95% interval excludes 1 but it is within noise."""
    for seed in range(50):
        records = _run(seed)
        if any(r.verdict == "within noise"
               and stats.verdict(r.intervals["speedup_vs_baseline"]) == "faster"
               for r in records[1:]):
            return records
    raise AssertionError("no made-up run has such a verdict")


def test_the_table_marks_a_verdict_its_95_percent_interval_contradicts_and_shows_why():
    records = _contradicted()
    frame = pd.DataFrame([r.to_dict() for r in records])
    text = results_table(frame)
    rows = text.splitlines()[1:len(records) + 1]
    marked = [index for index, row in enumerate(rows) if row.endswith("within noise*")]
    expected = [index for index, r in enumerate(records) if r.verdict == "within noise"
                and stats.verdict(r.intervals["speedup_vs_baseline"]) == "faster"]
    assert marked == expected
    assert sum(row.endswith(("faster", "slower", "within noise")) for row in rows) == \
        len(records) - 1 - len(marked)
    notes = [line for line in text.splitlines() if line.startswith("  * ")]
    assert len(notes) == len(marked)
    decided = deciding_intervals(frame)
    for index, note in zip(marked, notes, strict=True):
        low, high = decided[index].bounds
        assert f"bucket_cap_mb={index}" in note and "95% interval" in note
        assert f"one of 12 verdicts against single ({decided[index].judged} faster" in note
        assert note.endswith(f"at {decided[index].confidence:.1%}, is [{low:.3g}, {high:.3g}]")
    assert stats.DECIDING_METHOD in text


def test_the_fastest_names_the_paired_ratio_that_decides_it():
    single = _record("single", [100.0, 80.0, 120.0], devices="cpu")
    close = _record("ddp", [150.0, 118.0, 184.0])
    tied = _record("fsdp", [146.0, 122.0, 176.0])
    beyond = _record("pipeline", [120.0, 94.4, 147.2])  # ddp / 1.25
    add_comparisons([single, close, tied, beyond])
    frame = pd.DataFrame([r.to_dict() for r in (single, close, tied)])
    [_, line] = answers(frame)
    ratios = [a / b for a, b in zip([150.0, 118.0, 184.0], [146.0, 122.0, 176.0], strict=True)]
    low, high = stats.interval(ratios)
    assert low < 1 < high  # the throughputs' ratio, paired by round, holds 1
    assert "fastest within noise: ddp at" in line
    assert "each throughput's 95% interval" in line
    assert f"{stats.centre(ratios):.3g} [{low:.3g}, {high:.3g}] over fsdp" in line
    frame = pd.DataFrame([r.to_dict() for r in (single, close, beyond)])
    [_, line] = answers(frame)
    assert "beyond the noise of every other" in line
    assert "whose 95% interval excludes 1, 1.25 [1.25, 1.25] over pipeline" in line
