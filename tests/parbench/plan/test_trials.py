"""Trials in interleaved rounds, intervals paired by round, verdicts, and the A/A noise floor."""

import json

import numpy as np
import pandas as pd
import pytest

from parbench.cli import main
from parbench.drive.runner import run_sweep
from parbench.machine.devices import parse_devices
from parbench.plan import Sweep
from parbench.plan.config import Config
from parbench.plan.trials import Trial, schedule, trial_of, with_trial
from parbench.reporting.answers import answers
from parbench.results import stats
from parbench.results.comparisons import add_comparisons
from parbench.results.folder import RunFolder, load_records
from parbench.results.record import Record
from tests.support import CPU2, TINY_FLAGS, ok_record


def _configs(workload):
    return [Config("single", workload, 8, CPU2, warmup=1, steps=2),
            Config("ddp", workload, 8, CPU2, warmup=1, steps=2),
            Config("pipeline", workload, 7, CPU2, warmup=1, steps=2,
                   options={"split_size": 3}),  # unequal micro-batches: fine for `pipeline`
            Config("data-parallel", workload, 8, CPU2)]  # CUDA only: skipped, never measured


def test_rounds_measure_each_configuration_once_in_a_seeded_shuffled_order(tiny_workload):
    configs = _configs(tiny_workload)
    slots = schedule(configs, repeats=3, seed=7)
    assert slots == schedule(configs, repeats=3, seed=7)  # reproducible from its seed
    assert [s.round for s in slots] == [0] * 4 + [1] * 4 + [2] * 4  # rounds do not mix
    for round_ in range(3):
        here = [(s.index, s.twin) for s in slots if s.round == round_]
        # Every configuration that runs once, the baseline twice (its A/A twin), none skipped.
        assert sorted(here) == [(0, False), (0, True), (1, False), (2, False)]
    orders = {tuple((s.index, s.twin) for s in slots if s.round == r) for r in range(3)}
    assert len(orders) > 1  # shuffled, not the same order each round
    assert schedule(configs, repeats=1, seed=0) == [s for s in schedule(configs, 1, 0)
                                                    if not s.twin]  # one round: no twin
    done = {(configs[1].key(), 0, False), (configs[0].key(), 2, True)}
    left = Sweep(tuple(configs), repeats=3, shuffle_seed=7).schedule(done)  # a resumed run's
    assert len(left) == len(slots) - 2
    assert all((configs[s.index].key(), s.round, s.twin) not in done for s in left)


def _record(strategy, throughputs, devices="cpu", twins=(), **fields):
    """An ok record with one ok trial per round at these throughputs (None: a failed one)."""
    def measured(t):
        return {"throughput_ips": t, "step_time_median_s": 8 / t if t else None}

    trials = [Trial(r, "ok" if t else "error", None if t else "boom", measured(t))
              for r, t in enumerate(throughputs)]
    trials += [Trial(r, "ok", None, measured(t), twin=True) for r, t in enumerate(twins)]
    ok = [t for t in throughputs if t]
    return ok_record(strategy, devices=devices, throughput_ips=sorted(ok)[len(ok) // 2],
                     strategy_options=fields.pop("options", {}), peak_memory_max_mib=100.0,
                     memory_imbalance=1.0, emulated=True, trials=[t.to_dict() for t in trials],
                     intervals={"throughput_ips": list(stats.interval(ok))}, **fields)


def test_speedups_are_paired_by_round_so_drift_between_rounds_cancels():
    # The machine slows by half from round to round; ddp is 1.5x single in every round.
    single = _record("single", [100.0, 50.0, 25.0])
    ddp = _record("ddp", [150.0, 75.0, 37.5], devices="cpu,cpu")
    add_comparisons([single, ddp])
    assert ddp.speedup_vs_baseline == pytest.approx(1.5)
    assert ddp.intervals["speedup_vs_baseline"] == pytest.approx([1.5, 1.5])
    assert ddp.device_efficiency == pytest.approx(0.75)
    assert ddp.verdict == "faster"
    assert single.verdict is None  # the baseline is not compared with itself
    # Unpaired, the same trials could not tell them apart: their intervals overlap.
    unpaired = stats.interval([100.0, 50.0, 25.0]), stats.interval([150.0, 75.0, 37.5])
    assert unpaired[0][1] > unpaired[1][0]


def test_a_difference_inside_the_noise_is_within_noise_and_crowns_no_winner():
    single = _record("single", [100.0, 104.0, 98.0])
    ddp = _record("ddp", [103.0, 99.0, 101.0], devices="cpu,cpu")
    pipeline = _record("pipeline", [40.0, 41.0, 39.0], devices="cpu,cpu", stages=2)
    add_comparisons([single, ddp, pipeline])
    assert ddp.verdict == "within noise"
    assert pipeline.verdict == "slower"
    frame = pd.DataFrame([r.to_dict() for r in (single, ddp, pipeline)])
    # One device: single alone. Two: ddp is beyond pipeline's noise.
    assert "fastest ddp at 101 [" in answers(frame)[1]
    two_close = pd.DataFrame([r.to_dict() for r in (ddp, replace_strategy(single, "fsdp"))])
    [line] = answers(two_close)
    assert line.count("within noise") == 1 and "fastest within noise: ddp" in line
    assert "fsdp" in line


def replace_strategy(record, strategy):
    return Record.from_dict({**record.to_dict(), "strategy": strategy, "devices": "cpu,cpu"})


def test_an_efficiency_above_one_is_a_finding_only_beyond_the_noise():
    single = _record("single", [100.0, 100.0, 100.0])
    beyond = _record("ddp", [230.0, 240.0, 235.0], devices="cpu,cpu")
    inside = _record("fsdp", [180.0, 260.0, 205.0], devices="cpu,cpu")
    add_comparisons([single, beyond, inside])
    frame = pd.DataFrame([r.to_dict() for r in (single, beyond)])
    assert "ABOVE the ideal beyond noise" in answers(frame)[1]
    frame = pd.DataFrame([r.to_dict() for r in (single, inside)])
    assert "above the ideal within noise" in answers(frame)[1]


def test_a_failed_trial_is_recorded_and_the_others_still_count(tiny_workload):
    config = Config("single", tiny_workload, 8, CPU2)
    ok = Record(status="ok", strategy="single", throughput_ips=100.0, step_time_median_s=0.08,
                step_times_s=[0.08], config_key=config.key())
    failed = Record(status="error", strategy="single", reason="LaunchError: rank died",
                    config_key=config.key())
    record = with_trial(None, ok, trial_of(ok, 0), repeats=3, seed=0)
    record = with_trial(record, failed, trial_of(failed, 1), repeats=3, seed=0)
    second = Record(status="ok", strategy="single", throughput_ips=120.0,
                    step_time_median_s=0.066, step_times_s=[0.066], config_key=config.key())
    record = with_trial(record, second, trial_of(second, 2), repeats=3, seed=0)
    assert [t["status"] for t in record.trials] == ["ok", "error", "ok"]
    assert record.status == "ok" and record.reason.startswith("1 of 3 trials failed")
    mean = (100.0 * 120.0) ** 0.5  # the geometric mean of the ok trials: the interval's centre
    assert record.throughput_ips == pytest.approx(mean)
    assert record.intervals["throughput_ips"][0] < mean < record.intervals["throughput_ips"][1]
    assert record.step_times_s == [0.08, 0.066]  # every ok trial's steps
    assert record.repeats == 3 and record.interval_method == stats.METHOD


def test_one_ranks_overhead_is_split_at_its_mean_share_over_trials(tiny_workload):
    key = Config("ddp", tiny_workload, 8, CPU2, options={"world_size": 1}).key()
    record = None
    for round_, (step, compute) in enumerate([(0.10, 0.08), (0.125, 0.075)]):
        measured = Record(status="ok", strategy="ddp", throughput_ips=8 / step,
                          step_time_median_s=step, step_times_s=[step], config_key=key,
                          compute_time_s=compute, wrapper_overhead_time_s=step - compute,
                          wrapper_overhead_fraction=(step - compute) / step)
        record = with_trial(record, measured, trial_of(measured, round_), repeats=2, seed=0)
    assert record.wrapper_overhead_fraction == pytest.approx(0.3)  # (0.2 + 0.4) / 2
    assert record.wrapper_overhead_time_s == pytest.approx(0.3 * record.step_time_median_s)
    assert record.compute_time_s == pytest.approx(0.7 * record.step_time_median_s)
    assert record.exposed_comm_time_s is None  # no byte crossed a link


def _measured(status, throughput=None, reason=None):
    return Record(status=status, reason=reason, strategy="single", throughput_ips=throughput,
                  step_time_median_s=8 / throughput if throughput else None,
                  step_times_s=[8 / throughput] if throughput else [],
                  achieved_tflops=throughput / 1000 if throughput else None)


def test_a_records_status_is_what_its_trials_say():
    # A trial measured again on resume: the record says its new outcome.
    error = _measured("error", reason="boom")
    record = with_trial(None, error, trial_of(error, 0), 2, 0)
    oom = _measured("oom", reason="out of memory")
    record = with_trial(record, oom, trial_of(oom, 0), 2, 0)
    assert (record.status, record.reason) == ("oom", "out of memory")
    # The A/A twin ok, then the configuration's own trial failing: not ok, and no twin's
    # throughput standing for it.
    twin = _measured("ok", 100.0)
    record = with_trial(None, twin, trial_of(twin, 0, twin=True), 2, 0)
    failed = _measured("error", reason="boom")
    record = with_trial(record, failed, trial_of(failed, 0), 2, 0)
    assert record.status == "error" and record.throughput_ips is None
    # A failed trial measured again and ok: no failure left in the reason.
    first = _measured("ok", 100.0)
    record = with_trial(None, first, trial_of(first, 0), 2, 0)
    record = with_trial(record, failed, trial_of(failed, 1), 2, 0)
    assert record.reason.startswith("1 of 2 trials failed")
    again = _measured("ok", 120.0)
    record = with_trial(record, again, trial_of(again, 1), 2, 0)
    assert record.status == "ok" and record.reason is None
    # Rates that follow from the throughput are rescaled to the mean.
    assert record.achieved_tflops == pytest.approx(record.throughput_ips / 1000)


def test_only_the_baseline_that_speedups_use_has_an_a_a_twin(tiny_workload):
    other = Config("single", tiny_workload, 8, parse_devices("cpu"), warmup=1, steps=2)
    configs = _configs(tiny_workload)[:2] + [other]
    twins = {s.index for s in schedule(configs, repeats=2, seed=0) if s.twin}
    assert twins == {0}


def test_repeats_below_one_are_refused(capsys):
    assert main(["run", "--repeats", "0", "--devices", "cpu"]) == 2
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err


def test_a_sweep_with_repeats_keeps_every_trial_and_resumes_mid_round(tiny_workload,
                                                                       tmp_path):
    configs = _configs(tiny_workload)[:2]
    folder = RunFolder.create(tmp_path)
    slots = schedule(configs, repeats=2, seed=0)
    first_round = [s for s in slots if s.round == 0]
    # As if interrupted after round 0: resume measures round 1 only.
    records = run_sweep(Sweep(tuple(configs)), folder, {})  # round 0 of each, no twin
    measured = []
    records = run_sweep(Sweep(tuple(configs), repeats=2), folder, {}, previous=records,
                        on_start=lambda slot, config: measured.append(slot))
    assert measured == [s for s in slots if s not in first_round or s.twin]
    single, ddp = records
    assert [(t["round"], t["twin"]) for t in single.trials] == [(0, False), (0, True),
                                                                 (1, False), (1, True)]
    assert [t["round"] for t in ddp.trials] == [0, 1]
    assert all(t["status"] == "ok" and len(t["step_times_s"]) == 2 for t in ddp.trials)
    assert set(ddp.intervals) >= {"throughput_ips", "speedup_vs_baseline"}
    assert single.aa_ratio is not None and single.aa_verdict is not None
    stored = json.loads((folder.path / "records.json").read_text())
    assert stored[1]["trials"] == ddp.trials


@pytest.mark.timeout(300)
def test_the_baseline_against_itself_has_its_noise_floor_in_every_run(capsys, tmp_path):
    """A measured run: the baseline twice in each of 3 rounds, its A/A ratio and a verdict on
    it (which one is chance: the synthetic tests below check the verdicts themselves)."""
    status = main(["run", "--strategy", "single", "--devices", "cpu", *TINY_FLAGS,
                   "--batch-size", "8", "--steps", "5", "--warmup", "1", "--repeats", "3",
                   "--progress", "off", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0
    [record] = load_records(next(tmp_path.iterdir())).to_dict("records")
    assert len(record["trials"]) == 6 and sum(t["twin"] for t in record["trials"]) == 3
    # Which verdict is chance (the verdicts themselves: the synthetic tests below); that it is
    # the one the record's own twins give is not: the geometric mean of each round's ratio of
    # the baseline to its twin, and "differs" only where its interval leaves out 1.
    trials = {(t["round"], t["twin"]): t["throughput_ips"] for t in record["trials"]}
    ratios = [trials[(r, False)] / trials[(r, True)] for r in range(3)]
    assert record["aa_ratio"] == pytest.approx(float(np.exp(np.mean(np.log(ratios)))))
    low, high = record["intervals"]["aa_ratio"]
    assert low <= record["aa_ratio"] <= high
    assert record["aa_verdict"] == ("within noise" if low <= 1 <= high else "differs")
    assert "noise floor: single on cpu against itself (A/A, twice in each round)" in out


@pytest.mark.parametrize("twins, verdict", [
    ([101.0, 97.0, 103.0], "within noise"),  # the same configuration, measured again
    ([80.0, 79.0, 81.5], "differs"),  # the second measurement always 20% slower: a bias
])
def test_the_a_a_verdict_says_whether_the_twins_differ(twins, verdict):
    single = _record("single", [100.0, 99.0, 102.0], twins=twins)
    add_comparisons([single])
    assert single.aa_verdict == verdict
    assert single.verdict is None  # the baseline's own verdict is its A/A's


def _null_run(rng, configurations: int = 12, rounds: int = 3) -> list[Record]:
    """A quick comparison in which nothing differs: every configuration's throughput in a
    round is 100 img/s times its own lognormal noise (10%)."""
    def throughputs():
        return list(100.0 * np.exp(rng.normal(0.0, 0.1, rounds)))

    return [_record("single", throughputs()), *(
        _record("ddp", throughputs(), devices="cpu,cpu", options={"world_size": k})
        for k in range(1, configurations))]


def test_verdicts_over_a_comparison_keep_the_family_wise_error_under_five_percent():
    """11 strategies against single, none different, 400 times: a false "faster" or "slower"
    anywhere in a run happens in at most 5% of runs (corrected); judged one at a time by their
    95% intervals, in over a quarter."""
    rng = np.random.default_rng(0)
    corrected = uncorrected = 0
    runs = 400
    for _ in range(runs):
        records = _null_run(rng)
        add_comparisons(records)
        corrected += any(r.verdict not in (None, "within noise") for r in records)
        uncorrected += any(stats.verdict(r.intervals.get("speedup_vs_baseline")) in
                           ("faster", "slower") for r in records[1:])
    assert corrected / runs <= 0.08  # 5% and the simulation's own spread (about 1%)
    assert uncorrected / runs > 0.25


def test_a_winner_among_many_needs_more_than_its_own_interval():
    """ddp's ratios exclude 1 on their own (p about 0.02); among 11 comparisons where the
    others differ by nothing the correction asks more, so it is within noise there, and faster
    where it is the only comparison. Named the fastest, it must beat each other on its own."""
    single = _record("single", [100.0, 100.0, 100.0])
    ddp = _record("ddp", [104.0, 108.0, 106.5], devices="cpu,cpu")
    others = [_record("fsdp", [100.0 + k, 99.0, 101.0 - k / 2], devices="cpu,cpu",
                      options={"world_size": k}) for k in range(1, 11)]
    add_comparisons([single, ddp])
    low, _ = ddp.intervals["speedup_vs_baseline"]
    assert low > 1 and ddp.verdict == "faster"
    add_comparisons([single, ddp, *others])
    assert ddp.intervals["speedup_vs_baseline"][0] == pytest.approx(low)  # same interval
    assert ddp.verdict == "within noise"
    frame = pd.DataFrame([r.to_dict() for r in (single, ddp, *others)])
    # ddp on 2 devices against the 10 others
    assert "10 pairs compared, each by its own t-test at the 5% level" in answers(frame)[1]


def test_many_real_differences_keep_their_verdicts():
    """Where every configuration differs (the pipelines against single), the correction
    takes little: each beyond its own noise stays faster."""
    single = _record("single", [100.0, 90.0, 110.0])
    faster = [_record("pipeline", [150.0 + k, 133.0, 168.0 - k], devices="cpu,cpu", stages=2,
                      split_size=k) for k in range(1, 12)]
    add_comparisons([single, *faster])
    assert {r.verdict for r in faster} == {"faster"}


def test_the_adjustment_is_benjamini_hochberg():
    assert stats.adjusted({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx(
        {"a": 0.03, "b": 0.04, "c": 0.04})  # 3/1 x 0.01; 3/2 x 0.03 and 3/3 x 0.04, monotone
    assert stats.verdicts({"alone": [1.5, 1.5, 1.5], "one trial": [2.0]}) == {
        "alone": "faster", "one trial": None}


def test_a_run_stopped_before_its_first_record_resumes(tiny_workload, tmp_path, capsys):
    folder = RunFolder.create(tmp_path)
    args = ["run", "--strategy", "single", "--devices", "cpu", *TINY_FLAGS, "--batch-size", "4",
            "--steps", "1", "--warmup", "0", "--progress", "off"]
    from parbench.cli import parser
    from parbench.commands.run import spec_of
    folder.write_command(spec_of(parser().parse_args(args)).to_json())
    assert main(["run", "--resume", str(folder.path)]) == 0
    assert "0 of 1 configurations already measured" in capsys.readouterr().err
    assert list(load_records(folder.path)["status"]) == ["ok"]
