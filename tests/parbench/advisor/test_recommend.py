"""`parbench recommend`: a predicted table ranked (its numbers kept, what does not fit dropped,
a reason for each row), the verdict on a pick from measured rounds, bad input in one line
before anything is profiled, and one small measured confirmation."""

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from parbench.advisor.models.links import named_link
from parbench.advisor.profiling import record_profiles
from parbench.advisor.recommend import recommend
from parbench.advisor.recommend.recommend import (
    COUNTED,
    candidates,
    confirm_verdict,
    dropped_summary,
    fitting,
    option_flags,
    rank_layouts,
    ranked,
    recommend_layouts,
    reference,
)
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.cli import main
from tests.support import TINY_FLAGS

COLUMNS = ("strategy", "devices", "split_size", "partition", "step_time_s",
           "bubble_or_exposed_comm", "peak_memory_max_mib", "micro_batch_effect")
CUT = "stem..layer3.1 | layer4.0..head"
# A predicted sweep of batch 8 on 2 devices as predict_sweep returns it (no options column).
ROWS = [
    ("fsdp", 2, None, None, 0.040, 0.01, 110.0, 0.8),
    ("ddp", 2, None, None, 0.044, 0.01, 180.0, 0.8),
    ("pipeline-zbv", 2, 4, CUT, 0.050, 0.30, 70.0, 0.8),
    ("single", 1, None, None, 0.056, None, 137.0, 1.0),
    ("model-parallel", 2, None, CUT, 0.057, None, 100.0, 1.0),
    ("single", 1, 4, None, 0.080, None, 136.0, 0.8),
]


def _table(rows=ROWS) -> pd.DataFrame:
    table = pd.DataFrame([dict(zip(COLUMNS, row, strict=True)) for row in rows])
    table["kind"] = "predicted"
    table["throughput_ips"] = 8 / table["step_time_s"]
    table["reserved_memory_max_mib"] = table["peak_memory_max_mib"]  # as on a CPU: no more
    return table.sort_values("throughput_ips", ascending=False, ignore_index=True)


def _ranked(memory_mib=None, rows=ROWS) -> tuple[pd.DataFrame, pd.DataFrame]:
    kept, dropped = fitting(candidates(_table(rows), 2), memory_mib)
    return ranked(kept, dropped, 2, memory_mib), dropped


def test_candidates_are_the_layouts_on_the_devices_asked_with_the_options_that_make_them():
    on_two = candidates(_table(), 2)
    assert on_two["strategy"].tolist() == ["fsdp", "ddp", "pipeline-zbv", "model-parallel"]
    # A cut layout is measured cut where it was predicted: at equal profiled time.
    assert on_two["options"].tolist() == [{}, {}, {"split_size": 4, "balance": "time"},
                                          {"balance": "time"}]
    on_one = candidates(_table(), 1)
    assert on_one["options"].tolist() == [{}, {"accumulation_split": 4}]
    single = reference(_table())  # the whole batch on one device, not accumulating
    assert pd.isna(single["split_size"]) and single["step_time_s"] == 0.056


def test_the_tables_own_options_are_used_where_it_has_them():
    table = _table().assign(options=[{"zero": True}, {}, {"split_size": 4, "balance": "params"},
                                     {}, {}, {"accumulation_split": 4}])
    options = dict(zip(candidates(table, 2)["strategy"], candidates(table, 2)["options"],
                       strict=True))
    assert options["fsdp"] == {"zero": True}
    assert options["pipeline-zbv"] == {"split_size": 4, "balance": "params"}
    assert options["model-parallel"] == {"balance": "time"}
    assert option_flags({"split_size": 4, "zero": True, "reshard_after_forward": "no"}) == \
        "--split-size 4 --zero --reshard-after-forward no"


def test_the_ranking_keeps_the_predicted_numbers_and_says_why_each_wins_or_loses():
    table, dropped = _ranked()
    assert dropped.empty
    assert table["rank"].tolist() == [1, 2, 3, 4]
    before = candidates(_table(), 2)
    for column in ("step_time_s", "throughput_ips", "peak_memory_max_mib"):
        assert table[column].tolist() == before[column].tolist()
    assert table["reason"].tolist() == [
        "10% ahead: 9% less busy time a device than ddp (its share of the optimiser's step), "
        "idle time and micro-batching aside",
        "9% behind the pick: 10% more busy time a device than the pick (its share of the "
        "optimiser's step), idle time and micro-batching aside",
        "20% behind the pick: bubble 30% of the step; the pick: exposed communication 1%",
        "30% behind the pick: stages in turn (devices idle) 50% of the step; the pick: "
        "exposed communication 1%",
    ]


def test_a_layout_that_loses_on_micro_batching_says_so():
    rows = [("pipeline-1f1b", 2, 2, CUT, 0.050, 0.10, 70.0, 0.5),
            ("pipeline-gpipe", 2, 4, CUT, 0.040, 0.10, 70.0, 0.9)]
    table, _ = _ranked(rows=rows)
    assert table["reason"].iloc[1] == (
        "20% behind the pick: micro-batch effect 0.50x; the pick: 0.90x")


def test_a_layout_that_loses_on_its_fixed_costs_says_so():
    # the same bubble and micro-batches: what sets them apart is the runtime's probed costs
    rows = [("pipeline-zero-bubble", 2, 4, CUT, 0.060, 0.10, 70.0, 0.8),
            ("pipeline-gpipe", 2, 4, CUT, 0.040, 0.10, 70.0, 0.8)]
    table = _table(rows).assign(fixed_cost_s=[0.004, 0.024])  # fastest first: gpipe, then zb
    kept, dropped = fitting(candidates(table, 2), None)
    reason = ranked(kept, dropped, 2, None)["reason"].iloc[1]
    assert reason == ("33% behind the pick: fixed costs (the runtime's own, probed) 40% of the "
                      "step; the pick: 10%")


def test_layouts_predicted_not_to_fit_are_dropped_and_the_pick_says_it_fits():
    table, dropped = _ranked(memory_mib=120)
    assert table["strategy"].tolist() == ["fsdp", "pipeline-zbv", "model-parallel"]
    assert dropped["strategy"].tolist() == ["ddp"]
    assert dropped_summary(dropped, 4, 120) == (
        "dropped 1 of 4 layouts predicted not to fit in 120 MiB a device; the largest, ddp, "
        "is predicted to need 180 MiB")
    table, dropped = _ranked(memory_mib=100)
    assert table["strategy"].tolist() == ["pipeline-zbv", "model-parallel"]
    assert table["reason"].iloc[0] == (
        "fastest that fits: 2 predicted faster need more than 100 MiB a device (the fastest, "
        "fsdp, 110 MiB)")
    assert dropped_summary(dropped, 4, None) is None


def test_a_close_second_on_less_memory_and_a_tie_are_named():
    rows = [("ddp", 2, None, None, 0.040, 0.01, 180.0, 0.8),
            ("fsdp", 2, None, None, 0.041, 0.01, 110.0, 0.8),
            ("pipeline-looped-bfs", 2, 4, CUT, 0.050, 0.2, 88.0, 0.8),
            ("pipeline-interleaved-1f1b", 2, 4, CUT, 0.050, 0.2, 88.0, 0.8)]
    table, _ = _ranked(memory_mib=200, rows=rows)
    assert table["reason"].iloc[1] == ("within 2% of the pick on 110 MiB a device against 180, "
                                       "90 MiB under the cap")
    ties, _ = _ranked(rows=rows[2:])
    assert ties["reason"].tolist() == [
        "ties pipeline-interleaved-1f1b --split-size 4 --balance time", "ties the pick"]


def test_rank_layouts_keeps_the_table_and_splits_the_candidates_into_ranked_and_dropped():
    table = _table()
    found = rank_layouts(table, 2, 120)
    assert found.table is table and found.link is None
    assert found.candidates["strategy"].tolist() == ["fsdp", "ddp", "pipeline-zbv",
                                                     "model-parallel"]
    assert found.ranked["strategy"].tolist() == ["fsdp", "pipeline-zbv", "model-parallel"]
    assert found.dropped["strategy"].tolist() == ["ddp"]
    expected, dropped = _ranked(memory_mib=120)  # the steps it is made of, one by one
    pd.testing.assert_frame_equal(found.ranked, expected)
    pd.testing.assert_frame_equal(found.dropped, dropped)
    counted = table.assign(counted_memory_max_mib=table["peak_memory_max_mib"] - 100)
    assert rank_layouts(counted, 2, 120, COUNTED).dropped.empty  # the limit on the column named


def test_recommend_layouts_predicts_every_configuration_and_measures_a_missing_link(
        monkeypatch, tmp_path):
    measured, predicted, probing, given = [], [], [], named_link("nvlink4")
    monkeypatch.setattr(recommend, "measured_link", lambda devices, cache, threads:
                        measured.append((devices, cache, threads)) or given)
    monkeypatch.setattr(recommend, "profiles_for", lambda record, cache: (record, cache))

    def predicted_layouts(configs, profiler, link, costs_of=None):
        predicted.append((configs, profiler("record"), link))
        probing.append(costs_of is not None)
        return _table()

    monkeypatch.setattr(recommend, "predicted_layouts", predicted_layouts)
    configs = [SimpleNamespace(devices="cpu,cpu", threads_per_device=3)]
    found = recommend_layouts(configs, 2, 120, recommend.PEAK, None, tmp_path)
    assert measured == [("cpu,cpu", tmp_path, 3)] and found.link is given
    assert predicted == [(configs, ("record", tmp_path), given)]
    assert found.ranked["strategy"].tolist() == ["fsdp", "pipeline-zbv", "model-parallel"]
    assert recommend_layouts(configs, 2, None, recommend.PEAK, given, tmp_path).link is given
    assert len(measured) == 1  # a link given is not measured
    # fixed costs are probed on the devices at hand (the measured link), not for a named one
    assert probing == [True, False]


# Throughput per round (images/s) of three measured configurations.
BEST = {0: 100.0, 1: 90.0, 2: 110.0}


@pytest.mark.parametrize("pick, verdict, regret", [
    ({0: 120.0, 1: 100.0, 2: 130.0}, "the pick is the measured best", 0.0),
    ({0: 98.0, 1: 91.0, 2: 104.0}, "the pick is within noise of the measured best (best)",
     1 - (0.98 * 91 / 90 * 104 / 110) ** (1 / 3)),
    ({0: 80.0, 1: 73.0, 2: 88.0}, "the pick is 20% slower than the measured best (best), "
                                  "beyond noise", 1 - (0.8 * 73 / 90 * 0.8) ** (1 / 3)),
])
def test_the_verdict_on_the_pick_pairs_its_rounds_with_the_measured_best(pick, verdict, regret):
    control = {0: 50.0, 1: 45.0}  # its third round failed
    judged = confirm_verdict({"pick": pick, "best": BEST, "control": control}, "pick")
    assert judged["verdict"] == verdict
    assert judged["regret"] == pytest.approx(regret)
    best = pick if regret == 0 else BEST
    assert judged["best"] == ("pick" if regret == 0 else "best")
    assert judged["measured"]["control"]["ratio_to_best"] == pytest.approx(
        (control[0] / best[0] * control[1] / best[1]) ** 0.5)
    if regret:  # the interval straddles the regret, and 0 only where within noise
        low, high = judged["regret_interval"]
        assert low < regret < high
        assert (low < 0) == ("within noise" in verdict)
    else:
        assert judged["regret_interval"] is None


def test_the_verdict_on_a_pick_that_failed_says_so():
    judged = confirm_verdict({"pick": {}, "best": BEST}, "pick")
    assert judged["best"] == "best"
    assert judged["verdict"] == "the pick was not measured ok (see its record)"


# ---- the command ----

# Devices like this CPU over a named link (--profile-device cpu: without it, on a machine with
# no GPU, a GPU link recommends for the reference GPU: test_recommend_gpu.py).
SMALL = [*TINY_FLAGS, "--devices", "2", "--batch-size", "8", "--split-size", "4",
         "--link", "nvlink4", "--profile-device", "cpu"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """A profile cache the tests that predict share: the tiny workload profiled once."""
    return str(tmp_path_factory.mktemp("profiles"))


@pytest.fixture
def no_profiling(monkeypatch):
    def profiled(*args, **kwargs):
        raise AssertionError("profiled before the input was refused")

    monkeypatch.setattr(record_profiles, "_profile", profiled)


# What recommend says on stderr while it measures what a prediction needs.
PROGRESS = ("profile: ", "contention: ", "link: ")


def _refusal(capsys, argv: list[str]) -> str:
    assert main(["recommend", *argv]) == 2
    out, err = capsys.readouterr()
    err = "\n".join(line for line in err.splitlines() if not line.startswith(PROGRESS))
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("parbench: error: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv, message", [
    (["--confirm", "1", "--on", "cpu"], "--on cpu lists 1 device and the "
                                        "recommendation is for --devices 2; list 2, e.g. "
                                        "--on cpu,cpu"),
    (["--repeats", "2"], "--repeats: for measuring the recommendation; give --confirm K too"),
    (["--confirm", "1", "--repeats", "1"], "--repeats 1: a verdict needs an interval, which "
                                           "needs 2 rounds or more"),
    (["--confirm", "0"], "--confirm must be at least 1, got 0"),
    (["--link", "measured"], "--link measured: recommend predicts for a link named"),
    (["--memory-mib", "0"], "--memory-mib must be above 0, got 0.0"),
    (["--top", "0"], "--top must be at least 1, got 0"),
    (["--split-size", "16"], "--split-size 16 is larger than --batch-size 8"),
])
def test_bad_input_is_one_line_and_exit_2_before_profiling(tmp_path, capsys, no_profiling,
                                                           argv, message):
    err = _refusal(capsys, [*SMALL, "--profile-cache", str(tmp_path), *argv])
    assert message in err, err


def test_many_devices_without_a_link_are_refused(tmp_path, capsys, no_profiling):
    argv = [arg for arg in SMALL if arg not in ("--link", "nvlink4")]
    assert "--devices 2: give --link, the link between them" in _refusal(
        capsys, [*argv, "--profile-cache", str(tmp_path)])


def test_a_memory_nothing_fits_in_names_the_leanest(capsys, profiles, monkeypatch):
    # --confirm counts what fits on the devices at hand, whose contention is not what this
    # checks: a fixed slowdown instead of 18 s measuring one
    monkeypatch.setattr(record_profiles, "load_or_measure_slowdown", lambda *a, **k: 2.0)
    assert main(["recommend", *SMALL, "--profile-cache", profiles, "--memory-mib", "1"]) == 2
    out, err = capsys.readouterr()
    *profiling, error = err.strip().splitlines()  # what it profiled, then one line
    assert out == "" and all(line.startswith("profile: ") for line in profiling)
    leanest = re.search(r"^parbench: error: --memory-mib 1: no layout on 2 devices is "
                        r"predicted to fit; the leanest, (.+), needs ([\d.]+) MiB a device: "
                        r"give --memory-mib (\d+) or more", error)
    assert leanest, error
    assert int(leanest[3]) == math.ceil(float(leanest[2]))
    assert main(["recommend", *SMALL, "--profile-cache", profiles, "--memory-mib",
                 leanest[3]]) == 0  # that much fits the leanest
    assert f" {leanest[1].split()[0]} " in capsys.readouterr().out
    err = _refusal(capsys, [*SMALL, "--profile-cache", profiles, "--memory-mib", leanest[3],
                            "--confirm", "20"])
    assert re.search(r"--confirm 20: \d+ layouts? (is|are) predicted on 2 devices to fit; "
                     r"give --confirm \d+ or fewer", err), err


def test_a_recommendation_confirmed_on_two_emulated_devices(capsys, profiles, tmp_path):
    assert main(["recommend", *SMALL, "--profile-cache", profiles, "--top", "3",
                 "--confirm", "1", "--on", "cpu,cpu", "--repeats", "2", "--steps", "1",
                 "--warmup", "0", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"PREDICTED, not measured (timing model version {PREDICTOR_VERSION})")
    assert "reference, PREDICTED: single on 1 device at the whole batch" in out
    assert "MEASURED on cpu,cpu (emulated: 2 logical devices share cpu" in out
    (folder,) = tmp_path.iterdir()
    document = json.loads((folder / "recommend.json").read_text(),
                          parse_constant=lambda name: pytest.fail(f"{name} in recommend.json"))
    assert document["predictor_version"] == PREDICTOR_VERSION
    assert [row["rank"] for row in document["predicted"]] == list(
        range(1, len(document["predicted"]) + 1))
    measured = document["measured"]
    roles = [row["role"] for row in measured]
    assert roles[0].startswith("pick") and roles[-1].endswith("control")
    assert len(measured) == (1 if roles[0] == "pick, control" else 2)  # the control once
    assert all(row["status"] == "ok" and len(row["rounds"]) == 2 for row in measured)
    judged = document["verdict"]
    verdict = judged["verdict"]
    assert f"verdict, MEASURED: {verdict}" in out
    # Which verdict is chance; that it is the one the measured rows give is not (the verdicts
    # themselves: test_the_verdict_on_the_pick_pairs_its_rounds_with_the_measured_best): the
    # best is the fastest row, and the pick (the first) is it, or its regret's interval says
    # within noise or slower.
    pick, best = measured[0], max(measured, key=lambda row: row["throughput_ips"])
    assert judged["best"] == best["label"]
    if best is pick:
        assert verdict == "the pick is the measured best" and judged["regret"] == 0.0
    else:
        assert judged["regret"] == pytest.approx(1 - pick["ratio_to_best"])
        low, high = judged["regret_interval"]
        assert low <= judged["regret"] <= high
        assert verdict == (
            f"the pick is {judged['regret']:.0%} slower than the measured best "
            f"({best['label']}), beyond noise" if low > 0 else
            f"the pick is within noise of the measured best ({best['label']})")
    records = json.loads((folder / "records.json").read_text())
    assert [r["config_key"] for r in records] == [row["config_key"] for row in measured]
    assert f"parbench report {folder} adds the run's README" in out


ROOT = Path(__file__).resolve().parents[3]


def test_the_command_ranks_the_devices_at_hand_through_recommend_layouts(
        capsys, monkeypatch, no_profiling, tmp_path):
    calls = []

    def recommended(configs, devices, memory_mib, limited, link, cache):
        calls.append((devices, memory_mib, limited, link.describe(), cache))
        table = _table().assign(counted_memory_max_mib=lambda rows: rows["peak_memory_max_mib"])
        return replace(rank_layouts(table, devices, memory_mib, limited), link=link)

    monkeypatch.setattr(recommend, "recommend_layouts", recommended)
    monkeypatch.chdir(tmp_path)  # --on checks that the results folder is writable
    assert main(["recommend", *SMALL, "--profile-cache", str(tmp_path), "--on",
                 "cpu,cpu"]) == 0
    assert calls == [(2, None, COUNTED, named_link("nvlink4").describe(), tmp_path)]
    out = capsys.readouterr().out
    assert "counted MiB/device" in out and "top 4 of 4 layouts" in out


def test_neither_the_command_nor_the_experiment_assembles_the_pipeline_itself():
    """Both predict and rank through parbench.advisor.recommend.recommend's recommend_layouts and
    rank_layouts, so that the published experiment judges what the command recommends."""
    for path in ("parbench/commands/recommend.py", "benchmarks/recommend/experiment.py"):
        source = (ROOT / path).read_text()
        for step in ("predicted_layouts(", "measured_link(", "recommend.candidates(",
                     "recommend.fitting(", "recommend.ranked("):
            assert step not in source, f"{path} calls {step[:-1]} itself"
