"""benchmarks/gpu/reference.py on CPU: its dry run, and the chunk runner that keeps each step's
output, fills in what an earlier step found and stops a step at the chunk's time limit."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "reference.py"


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("gpu_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_dry_run_prints_every_chunk_in_priority_order_and_runs_nothing(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--results-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    names = ["gpu-tests", "resnet50-224", "resnet50-224-large", "tutorial", "data-parallel",
             "pytest-benchmark", "asv", "predicted"]
    positions = [out.index(f"chunk {n} {name}:") for n, name in enumerate(names, 1)]
    assert positions == sorted(positions)
    assert "-m pytest -m gpu tests/gpu" in out
    assert "predict --profile-device cuda" in out and "--devices 2,4,8" in out
    assert "--split-size 1,3,5,8,10,12,20,40,60" in out and "--devices cuda:0,cuda:0" in out
    assert "--batch-size '<max-batch'\"'\"'s answer>'" in out  # filled in at run time
    assert "[skipped: timm's benchmark.py is a script in timm's repository" in out
    estimates = [int(line.split()[1]) for line in out.splitlines()
                 if line.startswith("  estimated ")]
    assert len(estimates) == 8 and max(estimates) < 600  # each chunk inside 10 minutes
    assert f"total estimated {sum(estimates)} s" in out
    assert "within 27 minutes: chunks 1,2,3,4,5." in out
    assert list(tmp_path.iterdir()) == []


def test_unknown_chunks_are_refused(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--chunks", "2,9"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith("--chunks: there are chunks 1 to 8, got 2,9")


def test_a_chunk_keeps_each_step_and_stops_a_step_at_its_time_limit(reference, tmp_path,
                                                                   child_pids):
    python = sys.executable
    write = "import pathlib, sys; pathlib.Path(sys.argv[1], 'found').write_text('64')"
    steps = (
        reference.Step("finds", (python, "-c", write, "{folder}"), 1,
                       finds=("batch", lambda folder: (folder / "found").read_text())),
        reference.Step("uses", (python, "-c", "print('batch', {batch})"), 1),
        reference.Step("elsewhere", (python, "-c", ""), 1, needs="no such tool here"),
        reference.Step("sleeps", (python, "-c", "import time; time.sleep(60)"), 1),
        reference.Step("never", (python, "-c", "print('never')"), 1),
    )
    chunk = reference.Chunk(1, "test", "the runner", steps,
                            summarise=lambda folder: {"batch": 64})
    folder = tmp_path / "1-test"
    reference.run_chunk(chunk, folder, {}, limit_s=4)
    entries = json.loads((folder / "steps.json").read_text())
    assert [e["step"] for e in entries] == ["finds", "uses", "elsewhere", "sleeps"]
    assert [e["status"] for e in entries[:3]] == ["ok", "ok", "skipped"]
    assert entries[0]["batch"] == "64"
    assert (folder / "uses.log").read_text() == "batch 64\n"
    assert entries[2]["reason"] == "no such tool here"
    assert entries[3]["status"].startswith("timeout after") and entries[3]["seconds"] < 30
    assert not (folder / "never.log").exists()
    assert json.loads((folder / "summary.json").read_text()) == {"batch": 64}
    assert child_pids() == []


def test_a_step_is_not_started_once_the_chunk_has_no_time_left(reference, tmp_path):
    steps = (reference.Step("late", (sys.executable, "-c", "print('late')"), 1),)
    folder = tmp_path / "1-late"
    reference.run_chunk(reference.Chunk(1, "late", "", steps), folder, {}, limit_s=0)
    [entry] = json.loads((folder / "steps.json").read_text())
    assert entry["status"] == "not started: the chunk's time ran out"
    assert not (folder / "late.log").exists()
