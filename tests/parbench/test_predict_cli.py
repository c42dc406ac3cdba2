"""`parbench predict`: beside a run's records (their error, a file and a figure apart from the
records), or a sweep for devices not at hand; bad input in one line."""

import json

import pandas as pd
import pytest

from parbench.cli import main
from parbench.comparisons import add_comparisons
from parbench.predict import models, record_profiles
from parbench.predict.contention import CONTENTION_VERSION, slowdown_path
from parbench.predict.links import Link
from parbench.predict.profile import BlockProfile, Profile
from parbench.predict.summary import prediction_section
from parbench.predict.sweep import above_ideal_notes
from parbench.record import Record
from parbench.results import RunFolder
from parbench.workloads import Workload
from strategies.partition import Partition

SMALL = dict(model="resnet18", image_size=32, precision="fp32", devices="cpu,cpu",
             physical_devices="cpu", device_kind="cpu", emulated=True, threads_per_device=1,
             global_batch=8)


def _record(strategy: str, step_s: float, **fields) -> Record:
    return Record(status="ok", strategy=strategy, throughput_ips=8 / step_s,
                  step_time_median_s=step_s, **{**SMALL, **fields})


def _traced_gpipe() -> list[list]:
    """A 2-rank GPipe step of 4 micro-batches as a measured timeline holds it (forward 10 ms,
    backward 20 ms on each stage)."""
    blocks = tuple(BlockProfile(name, 0.01, 0.02, 0.0, 1, (1,), 1) for name in ("a", "b"))
    profile = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 2, 1, blocks)
    predicted = models.pipeline("gpipe", profile, Partition(("a", "b"), (0, 1), "time"), 2, 4,
                                Link("free", float("inf")))
    return [list(span) for span in predicted.spans]


def _contention(cache, slowdown: float) -> None:
    """The cached slowdown of two processes computing at once, at the micro-batches the
    emulated records use (the pipeline's 2, ddp's 4 per rank): measured elsewhere."""
    workload = Workload(model="resnet18", image_size=32)
    for micro_batch in (2, 4):
        path = slowdown_path(cache, workload, micro_batch, processes=2)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": CONTENTION_VERSION, "slowdown": slowdown}))


def _run_folder(tmp_path) -> RunFolder:
    folder = RunFolder.create(tmp_path / "results")
    records = [
        _record("single", 0.05, world_size=1, peak_memory_max_mib=100.0,
                intervals={"step_time_median_s": [0.045, 0.055]}),
        _record("pipeline-gpipe", 0.08, world_size=2, split_size=2, micro_batches=4,
                partition="stem..layer2.1 | layer3.0..head",
                strategy_options={"balance": "tutorial", "split_size": 2},
                timeline=_traced_gpipe()),
        _record("ddp", 0.04, world_size=2),
        _record("data-parallel", 0.04, world_size=1),  # the models leave these out
        _record("ddp", 0.04, world_size=2, strategy_options={"comm_hook": "fp16"}),
    ]
    add_comparisons(records)  # each speedup over single, as a run has them
    folder.write_records(records)
    return folder


def test_predict_puts_each_prediction_beside_its_record_with_the_error(tmp_path, capsys):
    folder = _run_folder(tmp_path)
    cache = tmp_path / "profiles"
    _contention(cache, 1.0)
    assert main(["predict", str(folder.path), "--link", "pcie4",
                 "--profile-cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED beside measured" in out and "median |error|" in out
    table = pd.read_csv(folder.path / "predictions.csv")
    assert list(table["strategy"]) == ["single", "pipeline-gpipe", "ddp"]  # modelled ones
    expected = table["predicted_step_time_s"] / table["step_time_median_s"] - 1
    assert table["prediction_error"].tolist() == pytest.approx(expected.tolist())
    assert (folder.path / "predictions.png").is_file()
    assert (folder.path / "predicted-timeline-001-pipeline-gpipe.png").is_file()
    assert "predicted_timeline" not in table  # spans are drawn, not tabled
    # The schedule model alone, on the trace's own times: its step (0.15 s), give or take the
    # link's transfer of a 32 px activation.
    assert "told apart: the schedule model alone" in out
    assert table["traced_step_s"].iloc[1] == pytest.approx(0.15)
    assert abs(table["trace_replay_error"].iloc[1]) < 0.01
    assert sorted(p.name for p in cache.glob("resnet*")) == [  # split, per rank, whole batch
        f"resnet18-32px-1000cls-fp32-cpu-1t-b{size}.json" for size in (2, 4, 8)]
    assert len(folder.read_records()) == 5  # the records are left as measured
    assert set(table["link"]) == {"pcie4"} and set(table["kind"]) == {"predicted"}
    assert table["step_time_low_s"].iloc[0] == 0.045  # the measured interval, for a reader


def test_emulated_devices_computing_at_once_are_slowed_as_measured(tmp_path, capsys):
    steps = {}
    for slowdown in (1.0, 1.5):
        record_profiles._profile.cache_clear()  # a profile is otherwise read once per process
        folder = _run_folder(tmp_path / str(slowdown))
        _contention(tmp_path / "profiles", slowdown)
        assert main(["predict", str(folder.path), "--link", "nvlink4",
                     "--profile-cache", str(tmp_path / "profiles")]) == 0
        steps[slowdown] = pd.read_csv(folder.path / "predictions.csv").set_index("strategy")[
            "predicted_step_time_s"]
    assert "contention: 2 processes computing at once" in capsys.readouterr().err
    assert steps[1.5]["single"] == steps[1.0]["single"]  # one device: nothing shared
    # Two stages computing at once: 1.5x the compute, give or take NVLink's transfers.
    assert steps[1.5]["pipeline-gpipe"] / steps[1.0]["pipeline-gpipe"] == pytest.approx(
        1.5, rel=0.01)


def test_the_run_report_shows_the_predictions_beside_the_measurements(tmp_path, capsys):
    folder = _run_folder(tmp_path)
    _contention(tmp_path / "profiles", 1.0)
    assert main(["predict", str(folder.path), "--link", "pcie4",
                 "--profile-cache", str(tmp_path / "profiles")]) == 0
    section = "\n".join(prediction_section(folder.path))  # what `parbench report` writes
    assert section.startswith("## Predicted against measured")
    assert "PREDICTED by `parbench predict`" in section and "link: pcie4" in section
    assert "median |error|" in section and "inside the measurement's 95% interval" in section
    assert "| single | 1 | 0.05 [0.045, 0.055] |" in section
    assert "| pipeline-gpipe (" in section and "![predictions](predictions.png)" in section
    # Beside each step, its speedup over single, predicted and measured, and the memory check.
    assert "PREDICTED speedup" in section and "Speedups over single" in section
    assert "Peak memory on the fullest device: median |error|" in section
    table = pd.read_csv(folder.path / "predictions.csv").set_index("strategy")
    assert table.loc["pipeline-gpipe", "speedup_vs_baseline"] == pytest.approx(0.05 / 0.08)
    assert table.loc["pipeline-gpipe", "speedup_error"] == pytest.approx(
        table.loc["pipeline-gpipe", "predicted_speedup"] / (0.05 / 0.08) - 1)
    predicted_peak = max(json.loads(table.loc["single", "predicted_peak_memory_mib"]))
    assert table.loc["single", "memory_error"] == pytest.approx(predicted_peak / 100.0 - 1)


def test_predict_without_a_run_ranks_a_sweep_fastest_first(tmp_path, capsys):
    csv = tmp_path / "sweep.csv"
    assert main(["predict", "--model", "resnet18", "--image-size", "32", "--devices", "2",
                 "--batch-size", "8", "--split-size", "4", "--link", "nvlink4",
                 "--profile-cache", str(tmp_path / "profiles"), "--csv", str(csv)]) == 0
    assert capsys.readouterr().out.startswith("PREDICTED, not measured")
    table = pd.read_csv(csv)
    assert set(table["kind"]) == {"predicted"}
    assert table["throughput_ips"].is_monotonic_decreasing
    assert {"single", "model-parallel", "pipeline", "pipeline-1f1b", "pipeline-zbv",
            "ddp"} <= set(table["strategy"])
    # Each speedup splits into micro-batching x parallelism, and parallelism never beats the
    # device count: what exceeds it is the micro-batch effect, and the output says so.
    assert (table["micro_batch_effect"] * table["parallel_effect"]).tolist() == pytest.approx(
        table["speedup_vs_single"].tolist())
    assert (table["parallel_effect"] <= 2 + 1e-9).all()
    accumulating = table[(table["strategy"] == "single") & (table["split_size"] == 4)]
    assert accumulating["parallel_effect"].tolist() == pytest.approx([1.0])


def test_a_sweep_over_device_counts_shows_each_strategys_fastest_split_and_draws_it(
        tmp_path, capsys):
    csv, figure = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    assert main(["predict", "--model", "resnet18", "--image-size", "32", "--devices", "2,4",
                 "--batch-size", "8", "--split-size", "2,4", "--link", "ethernet100",
                 "--profile-cache", str(tmp_path / "profiles"), "--csv", str(csv),
                 "--figure", str(figure)]) == 0
    out = capsys.readouterr().out
    assert "2 devices; fastest first, each strategy at its fastest split" in out
    assert "4 devices; fastest first" in out and "30 us a message" in out
    # single on one device (whole batch first: every speedup's baseline), the rest on 2 and 4
    singles = [line.split()[2] for line in out.splitlines() if line.split()[:1] == ["single"]]
    assert len(singles) == 4 and singles.count("NaN") == 2  # whole and accumulating, twice
    table = pd.read_csv(csv)
    assert set(table["devices"]) == {1, 2, 4}
    assert not table.duplicated(["strategy", "devices", "split_size"]).any()
    assert (table["strategy"] == "single").sum() == 3  # whole batch, splits 2 and 4: once
    assert set(table.loc[table["strategy"] == "pipeline-gpipe", "split_size"]) == {2, 4}
    assert figure.is_file() and figure.with_suffix(".svg").is_file()


def test_a_predicted_speedup_above_the_devices_is_explained():
    table = pd.DataFrame(dict(strategy=["ddp", "fsdp"], speedup_vs_single=[4.4, 3.0],
                              micro_batch_effect=[1.1, 1.0], parallel_effect=[4.0, 3.0]))
    assert above_ideal_notes(table, 4) == [
        "ddp at 4.40x is above the 4 devices: the 1.10x micro-batch effect (a device works on "
        "fewer images at once, which this device's profile runs faster per image) x 4.00x from "
        "parallelism"]


@pytest.mark.parametrize("argv, message", [
    (["--link", "measured"], "--link measured needs collectives"),
    (["--link", "fibre"], "--link 'fibre': give measured, nvlink4"),
    (["--devices", "2"], "give a run folder to predict beside its records, or --devices"),
])
def test_bad_predict_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    run = [str(_run_folder(tmp_path).path)] if "--devices" not in argv else []
    assert main(["predict", *run, *argv, "--profile-cache", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
