"""`parbench predict`: beside a run's records (their error, a file and a figure apart from the
records, every column documented), or a sweep for devices not at hand; bad input in one line,
before anything is profiled."""

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from parbench.advisor.models import models
from parbench.advisor.models.links import Link
from parbench.advisor.profiling import record_profiles
from parbench.advisor.profiling.contention import CONTENTION_VERSION, slowdown_path
from parbench.advisor.profiling.fixed_costs import NO_FIXED_COSTS
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.recommend.predicted_sweep import above_ideal_notes
from parbench.advisor.runs import records
from parbench.advisor.runs.summary import prediction_section
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.cli import main
from parbench.families.workloads import Workload
from parbench.results.comparisons import add_comparisons
from parbench.results.folder import RunFolder
from parbench.results.record import Record
from parbench.strategies.partition import Partition

RESULTS_DOC = Path(__file__).resolve().parents[3] / "docs" / "results.md"
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


def _contention(cache, slowdown: float, lockstep: float | None = None) -> None:
    """The cached slowdown of two processes computing at once, each at its pace and in
    lock-step (`lockstep`; the same where not given), at the micro-batches the emulated
    records use (the pipeline's 2, ddp's 4 per rank): measured elsewhere."""
    workload = Workload(model="resnet18", image_size=32)
    for micro_batch in (2, 4):
        path = slowdown_path(cache, workload, micro_batch, processes=2)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": CONTENTION_VERSION, "slowdown": slowdown,
                                    "lockstep_slowdown": lockstep or slowdown}))


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
        # At parbench's defaults (bucket views, a static graph), modelled since version 18.
        _record("ddp", 0.035, world_size=2, devices="cpu,cpu", strategy_settings=dict(
            gradient_as_bucket_view=True, static_graph=True, world_size=2)),
        # Trained from an image folder, whose loader no model counts: left out, saying why.
        _record("ddp", 0.05, world_size=2, devices="cpu,cpu", data="/data/images"),
    ]
    add_comparisons(records)  # each speedup over single, as a run has them
    folder.write_records(records)
    return folder


@pytest.fixture(scope="module")
def predicted(tmp_path_factory) -> tuple[RunFolder, Path, str]:
    """The run of `_run_folder` predicted on pcie4, once for the tests that read what that
    wrote: its folder, the profile cache and what it printed."""
    tmp_path = tmp_path_factory.mktemp("predicted")
    folder, out = _run_folder(tmp_path), io.StringIO()
    cache = folder.path / "profiles"  # where a run's profiles are kept, published with it
    _contention(cache, 1.0)
    with contextlib.redirect_stdout(out):
        assert main(["predict", str(folder.path), "--link", "pcie4"]) == 0
    return folder, cache, out.getvalue()


@pytest.mark.slow  # the module's measured, predicted run (about 30 s) serves these three
def test_predict_puts_each_prediction_beside_its_record_with_the_error(predicted):
    folder, cache, out = predicted
    assert "PREDICTED beside measured" in out and "median |error|" in out
    written = pd.read_csv(folder.path / "predictions.csv")
    table = written[written["not_predicted"].isna()].reset_index(drop=True)
    assert list(table["strategy"]) == ["single", "pipeline-gpipe", "ddp", "ddp"]  # modelled
    # torch's settings and parbench's: the same step, the buckets' copy of the gradients only
    # in the first's memory
    # (one probe for both: their options, all defaults, are the same)
    torch_ddp, tuned_ddp = table.iloc[2], table.iloc[3]
    assert tuned_ddp["predicted_step_time_s"] == torch_ddp["predicted_step_time_s"]
    assert max(json.loads(tuned_ddp["predicted_counted_memory_mib"])) < max(
        json.loads(torch_ddp["predicted_counted_memory_mib"]))
    assert "left out: ddp on cpu,cpu (/data/images): trained from an image folder" in out
    # every measured record is a row: the one left out says why, and the summary names it
    [left] = written[written["not_predicted"].notna()].to_dict("records")
    assert left["strategy"] == "ddp" and pd.isna(left["predicted_step_time_s"])
    assert left["not_predicted"].startswith("trained from an image folder")
    assert "not predicted, 1 measured configuration: ddp on 2 ranks: trained from" in out
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
    assert len(folder.read_records()) == 7  # the records are left as measured
    assert set(table["link"]) == {"pcie4"} and set(table["kind"]) == {"predicted"}
    assert table["step_time_low_s"].iloc[0] == 0.045  # the measured interval, for a reader


def test_emulated_devices_computing_at_once_are_slowed_as_measured(tmp_path, capsys,
                                                                   monkeypatch):
    # the slowdown alone: no probe's fixed cost (solved against each slowdown) beside it
    monkeypatch.setattr(records, "load_or_probe", lambda *_: NO_FIXED_COSTS)
    steps, profiled = {}, []
    for slowdown in (1.0, 1.5):
        record_profiles._profile.cache_clear()  # a profile is otherwise read once per process
        folder = _run_folder(tmp_path / str(slowdown))
        # in lock-step (each step waiting for the slowest): 1.0, then 2.25
        _contention(folder.path / "profiles", slowdown, lockstep=slowdown ** 2)
        for profile in profiled:  # the same profiles: only the slowdown differs
            shutil.copy(profile, folder.path / "profiles")
        assert main(["predict", str(folder.path), "--link", "nvlink4"]) == 0
        steps[slowdown] = pd.read_csv(folder.path / "predictions.csv").set_index("strategy")[
            "predicted_step_time_s"]
        profiled = list((folder.path / "profiles").glob("resnet*.json"))
    assert "contention: 2 processes computing at once" in capsys.readouterr().err
    assert steps[1.5]["single"] == steps[1.0]["single"]  # one device: nothing shared
    # Two stages are slowed 1.5x only while both compute: not while one waits (the fill and
    # drain of GPipe's pipeline), so the step by less.
    assert 1.0 < steps[1.5]["pipeline-gpipe"] / steps[1.0]["pipeline-gpipe"] < 1.5
    # ddp's ranks wait for the slowest every step: their compute slowed as measured in
    # lock-step (2.25x), their all-reduces not.
    ratios = (steps[1.5]["ddp"] / steps[1.0]["ddp"]).dropna()  # each ddp record predicted
    assert len(ratios) >= 1 and ((1.5 < ratios) & (ratios <= 2.25)).all()


@pytest.mark.slow  # reads the predicted run above
def test_the_run_report_shows_the_predictions_beside_the_measurements(predicted):
    folder, _, _ = predicted
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


def _documented() -> set[str]:
    """Every `name` in the first cell of a table row of docs/results.md."""
    cells = [line.split("|")[1] for line in RESULTS_DOC.read_text().splitlines()
             if line.startswith("| `")]
    return {name for cell in cells for name in re.findall(r"`([^`]+)`", cell)}


@pytest.mark.slow  # reads the predicted run above
def test_every_predictions_column_is_documented(predicted):
    folder, _, _ = predicted
    columns = pd.read_csv(folder.path / "predictions.csv").columns
    assert {"prediction_error", "speedup_error", "memory_error", "trace_replay_error"} <= set(
        columns)  # this run has every kind of error
    missing = [column for column in columns if column not in _documented()]
    assert not missing, f"docs/results.md does not document predictions.csv's {missing}"


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


@pytest.fixture
def no_profiling(monkeypatch):
    """A profile or contention measurement asked for fails the test: refusals come first."""
    def profiled(*args, **kwargs):
        raise AssertionError("profiled before the input was refused")

    record_profiles._profile.cache_clear()  # else a profile read earlier would be reused
    monkeypatch.setattr(record_profiles, "load_or_profile", profiled)
    monkeypatch.setattr(record_profiles, "load_or_measure_slowdown", profiled)


def _refusal(capsys, argv: list[str]) -> str:
    """What `parbench predict ARGV` said on stderr, checked to be one line and exit 2."""
    assert main(["predict", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("parbench: error: ")
    return err


SWEEP = ["--model", "resnet18", "--image-size", "32", "--devices", "2", "--batch-size", "8",
         "--split-size", "4", "--link", "pcie4"]


@pytest.mark.parametrize("argv, message", [
    (["--devices", "0"], "--devices must be at least 1, got 0"),
    (["--devices", "-1"], "--devices must be at least 1, got -1"),
    (["--devices", "x"], "--devices 'x': give device counts, whole numbers separated by commas, "
                         "e.g. --devices 2,4,8"),
    (["--devices", "2,,4"], "--devices '2,,4': give device counts"),
    (["--devices", "cpu,cpu"], "--devices 'cpu,cpu': give device counts"),
    (["--devices", "11", "--batch-size", "44"],
     "--devices 11: resnet18 has 10 blocks to cut, so its stages fill at most 10 devices; give "
     "--devices 10 or fewer"),
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--batch-size", "-8"], "--batch-size must be at least 1, got -8"),
    (["--batch-size", "x"], "argument --batch-size: invalid int value: 'x'"),
    (["--devices", "4", "--batch-size", "2", "--split-size", "2"],
     "--batch-size 2 is fewer images than --devices 4: give each device at least one, "
     "--batch-size 4 or more"),
    (["--split-size", "0"], "--split-size must be at least 1, got 0"),
    (["--split-size", "x"], "--split-size 'x': give micro-batch sizes"),
    (["--split-size", "2,,4"], "--split-size '2,,4': give micro-batch sizes"),
    (["--split-size", "16"], "--split-size 16 is larger than --batch-size 8; a micro-batch "
                             "cannot exceed the global batch"),
    (["--split-size", "1"], "resnet18 cannot train fewer than 2 images at --image-size 32 "
                            "(--split-size 1 gives micro-batches of 1): give 2 images or more"),
    (["--split-size", ""], "--split-size '': give micro-batch sizes"),
    (["--image-size", "16"], "--image-size 16: resnet18 cannot train on it; use at least 32"),
    (["--image-size", "8"], "--image-size must be at least 16, got 8"),
    (["--model", "vit_b_16", "--image-size", "40"],
     "--image-size 40: vit_b_16 cannot train on it; use a multiple of 16 (e.g. 32)"),
    (["--image-size", "100000"], "input images alone need"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    (["--model", "vgg16"], "invalid choice: 'vgg16'"),
    (["--precision", "fp8"], "invalid choice: 'fp8'"),
    (["--profile-device", "tpu"], "invalid choice: 'tpu'"),
    (["--profile-device", "cuda"], "--profile-device cuda: this machine has no GPU; profile on "
                                   "a machine with one, or give --profile-device cpu"),
    (["--link", "fibre"], "--link 'fibre': give measured, nvlink4, pcie4, ethernet100, or a bus "
                          "bandwidth in GB/s above 0"),
    (["--link", "-5"], "--link '-5': give measured"),
    (["--link", "0"], "--link '0': give measured"),
    (["--link", "measured"], "--link measured reads a run folder's collectives: give the run "
                             "folder, or name a link"),
    (["--profile-cache", "{tmp}/a-file"], "--profile-cache {tmp}/a-file: {tmp}/a-file is a file, "
                                          "not a folder; give a folder"),
    (["--profile-cache", "{tmp}/a-file/profiles"], "{tmp}/a-file is a file, not a folder"),
    (["--csv", "{tmp}/no-such/sweep.csv"], "--csv {tmp}/no-such/sweep.csv: cannot write into "
                                           "{tmp}/no-such"),
    (["--figure", "{tmp}"], "--figure {tmp} is a folder; give a file in it, e.g. --figure "
                            "{tmp}/sweep.png"),
])
def test_a_bad_sweep_is_one_line_and_exit_2_before_profiling(tmp_path, capsys, no_profiling,
                                                             argv, message):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    (tmp_path / "a-file").write_text("")
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    err = _refusal(capsys, [*SWEEP, "--profile-cache", str(tmp_path / "p"), *argv])
    assert message.format(tmp=tmp_path) in err, err


def test_a_sweep_without_its_batch_says_what_to_give(capsys, no_profiling):
    assert "give a run folder to predict beside its records, or --devices N and --batch-size B" \
        in _refusal(capsys, ["--devices", "2"])


def test_a_sweep_that_runs_out_of_memory_profiling_is_one_line(tmp_path, capsys, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                           "1 bytes.\nError code 12")

    record_profiles._profile.cache_clear()
    monkeypatch.setattr(record_profiles, "load_or_profile", out_of_memory)
    assert main(["predict", *SWEEP, "--profile-cache", str(tmp_path / "p")]) == 2
    *profiling, error = capsys.readouterr().err.strip().splitlines()  # what it was profiling
    assert all(line.startswith("profile: ") for line in profiling)
    assert error.startswith("parbench: error: profiling ran out of memory (DefaultCPUAllocator")
    assert error.endswith("use a smaller --batch-size or --image-size")


def _run_like(tmp_path: Path, kind: str) -> Path:
    """A run folder as `kind` names it: whole, or missing or damaged in one way."""
    if kind == "missing":
        return tmp_path / "no-such-run"
    if kind == "file":
        (tmp_path / "a-file").write_text("")
        return tmp_path / "a-file"
    if kind in ("run", "bad-collectives", "held-out-before"):
        folder = _run_folder(tmp_path)
        if kind == "bad-collectives":
            (folder.path / "collectives.json").write_text("[{")
        if kind == "held-out-before":  # drawn and measured before the models were versioned
            folder.write_command({"experiment": "prediction-holdout", "seed": 0})
        return folder.path
    folder = RunFolder.create(tmp_path / "results")
    failed = [Record(status="error", strategy="single", reason="RuntimeError: boom", **SMALL),
              Record(status="skipped", strategy="data-parallel", reason="CUDA only", **SMALL)]
    records = {"none-ok": failed,
               "unmodelled": [*failed, _record("data-parallel", 0.04, world_size=1),
                              _record("ddp", 0.04, world_size=2,
                                      strategy_options={"comm_hook": "fp16"}),
                              _record("single", 0.05, world_size=1, compile=True)],
               "lacking": [_record("single", 0.05, model=None)],
               "cuda": [_record("single", 0.05, device_kind="cuda")]}.get(kind)
    if records is not None:
        folder.write_records(records)
    elif kind == "not-json":
        (folder.path / "records.json").write_text("[{")
    else:  # stopped before its first record: only the command it was started with
        assert kind == "no-records"
        folder.write_command({"strategy": "single"})
    return folder.path


@pytest.mark.parametrize("kind, argv, message", [
    ("run", ["--link", "measured"], "--link measured needs collectives measured in {run}: run "
                                    "parbench collectives --into {run}, or name a link"),
    ("run", ["--link", "fibre"], "--link 'fibre': give measured, nvlink4"),
    ("run", ["--link", "-5"], "--link '-5': give measured"),
    ("run", ["--devices", "2"], "--devices: for a sweep not run, while a run folder's records "
                                "say what to predict; give them without the run folder, or the "
                                "run folder alone"),
    ("run", ["--model", "resnet18", "--image-size", "64", "--csv", "x.csv"],
     "--model, --image-size, --csv: for a sweep not run"),
    ("run", ["--profile-cache", "{run}/p"], "--profile-cache: a run's profiles are kept in the "
                                            "run folder ({run}/profiles), to be published with "
                                            "it; give --profile-cache only for a sweep not run"),
    ("missing", [], "{run} is not a run folder (no records.json or command.json); give a folder "
                    "written by `parbench run`"),
    ("file", [], "{run} is not a run folder"),
    ("no-records", [], "{run} holds no record yet (its run stopped before the first "
                       "configuration was written): finish it with parbench run --resume {run}"),
    ("not-json", [], "{run}/records.json is not valid JSON"),
    ("none-ok", [], "{run} has no measured record to predict (every configuration failed or was "
                    "skipped; its records.csv says why): predict a run with an ok record, or a "
                    "sweep with --devices N --batch-size B"),
    ("unmodelled", [], "{run} has no record of a strategy the timing models cover"),
    ("lacking", [], "{run}: a measured record lacks model, which its prediction needs"),
    ("cuda", [], "{run} was measured on cuda and this machine has no GPU: predict it on a "
                 "machine with one"),
    ("held-out-before", [], "{run} is a held-out run measured when the models were version 0; "
                            f"they are now version {PREDICTOR_VERSION}, which may have been tuned "
                            "since: a held-out set is predicted only by the version frozen "
                            "before it was measured. Draw a new one: parbench run --experiment "
                            "prediction-holdout --seed <a seed not used before>"),
    ("bad-collectives", ["--link", "measured"],
     "{run}/collectives.json is not valid JSON (Expecting property name enclosed in double "
     "quotes: line 1 column 3 (char 2)); measure it again with parbench collectives --into {run}"),
])
def test_a_bad_run_folder_is_one_line_and_exit_2_before_profiling(tmp_path, capsys, no_profiling,
                                                                  kind, argv, message):
    if kind == "cuda" and torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    run = _run_like(tmp_path, kind)
    argv = [arg.format(run=run) for arg in argv]
    err = _refusal(capsys, [str(run), "--link", "pcie4",
                            *argv])
    assert message.format(run=run) in err, err


def test_a_run_from_another_cpu_is_predicted_with_a_warning(tmp_path):
    from parbench.commands.environment import other_machine
    from parbench.machine.devices import cpu_cores
    from parbench.machine.environment import cpu_model

    folder = RunFolder(tmp_path)
    (tmp_path / "env.json").write_text(json.dumps(
        {"cpu_model": cpu_model(), "cpu_cores_available": cpu_cores()}))
    assert other_machine(folder) is None  # this machine's own run
    (tmp_path / "env.json").write_text(json.dumps(
        {"cpu_model": "Some Other CPU", "cpu_cores_available": cpu_cores() + 62}))
    warning = other_machine(folder)
    assert warning.startswith(f"warning: {tmp_path.name} was measured on Some Other CPU with "
                              f"{cpu_cores() + 62} cores, and this machine is {cpu_model()}")
    (tmp_path / "env.json").write_text("{}")
    assert other_machine(folder) is None  # a run that does not say


def test_the_default_profile_cache_is_a_folder_per_host(monkeypatch):
    """A profile or probe measures the host that took it: two hosts sharing a home folder
    keep theirs apart; a folder given is used as it is."""
    import platform

    from parbench.advisor.profiling.record_profiles import DEFAULT_CACHE
    from parbench.commands.caches import profile_cache

    monkeypatch.setattr(platform, "node", lambda: "node-a.cluster")
    first = profile_cache(None)
    monkeypatch.setattr(platform, "node", lambda: "node b/2")
    assert (first, profile_cache(None)) == (DEFAULT_CACHE / "node-a.cluster",
                                            DEFAULT_CACHE / "node-b-2")
    assert profile_cache(Path("/tmp/given")) == Path("/tmp/given")


def test_a_record_trained_from_an_image_folder_is_left_out_saying_why(capsys):
    """No model counts the host's decoding and augmenting of images: such a record is a row
    saying so, beside the synthetic ones predicted."""
    from parbench.commands.left_out import modelled_only

    records = pd.DataFrame([dict(status="ok", strategy="ddp", devices="cpu,cpu",
                                 data=data, strategy_settings=None)
                            for data in ("synthetic", "/data/images", None)])
    kept, left = modelled_only(records)
    assert list(kept["data"].fillna("none")) == ["synthetic", "none"]
    [why] = left["not_predicted"]
    assert why.startswith("trained from an image folder") and "parbench loader" in why
    assert "left out: ddp on cpu,cpu (/data/images): trained from an image folder" in (
        capsys.readouterr().out)
