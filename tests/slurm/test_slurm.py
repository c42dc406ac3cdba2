"""parbench under a real Slurm (the one-node cluster of tests/slurm/cluster.py): two srun tasks
measuring as one job, the batch script of docs/multi-node.md through sbatch, a sweep cancelled
with scancel and resumed, and a job stopped at its time limit. Each task's environment is what
srun set: no MASTER_ADDR, RANK or SLURM_* of ours. Without a running cluster every test is
skipped, saying why and how to start one."""

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.cluster import KILL_WAIT_S, Cluster
from tests.support import TINY_FLAGS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "multi-node.md"
SWEEP = ["--strategy", "single,ddp", *TINY_FLAGS, "--warmup", "1", "--progress", "off"]
# The documented script on this one CPU node: sbatch's flags override the script's #SBATCH.
ON_THIS_NODE = ["--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1"]


@pytest.fixture(scope="module")
def slurm() -> Iterator[Cluster]:
    """The cluster tests/slurm/cluster.py started (CI's .ci/run, or by hand); whatever the
    tests leave queued is cancelled after them."""
    cluster = Cluster()
    if cluster.node_state() is None:
        why = (cluster.not_started.read_text().strip() if cluster.not_started.exists()
               else "none is running")
        pytest.skip(f"no Slurm cluster here: {why}; start one with `python3 "
                    "tests/slurm/cluster.py start` as root (docs/multi-node.md)")
    yield cluster
    cluster.cancel_jobs()


def _environment(slurm: Cluster) -> dict[str, str]:
    """A submitting shell's: this interpreter's bin/ first on PATH (parbench), the cluster's
    configuration, and nothing that names a rank or a master."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
            **slurm.environment()}


def _batch_script(tmp_path: Path) -> Path:
    """The sbatch script docs/multi-node.md gives users, as they would copy it."""
    [script] = [block for block in re.findall(r"```sh\n(.*?)```", DOCS.read_text(), re.S)
                if block.startswith("#!/bin/bash")]
    path = tmp_path / "parbench.sbatch"
    path.write_text(script)
    return path


def _sbatch(slurm: Cluster, tmp_path: Path, args: list[str], *flags: str) -> str:
    """Submit the documented script with parbench's `args`; its job id."""
    done = subprocess.run(["sbatch", "--parsable", *ON_THIS_NODE, f"--chdir={tmp_path}",
                           f"--output={tmp_path}/slurm-%j.out", *flags,
                           str(_batch_script(tmp_path)), *args],
                          env=_environment(slurm), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _finished(slurm: Cluster, job_id: str, timeout_s: float = 240) -> str:
    """The job's final state, once it left the queue (sbatch --wait polls at up to 32 s)."""
    _wait_for(lambda: _job_ended(slurm, job_id), timeout_s, f"job {job_id} never ended")
    return _job_state(slurm, job_id)


def _output(tmp_path: Path, job_id: str) -> str:
    return (tmp_path / f"slurm-{job_id}.out").read_text()


def _run_folder(results: Path) -> Path:
    [folder] = results.iterdir()
    return folder


def _records(results: Path) -> list[dict]:
    return json.loads((_run_folder(results) / "records.json").read_text())


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.5)


def _job_ended(slurm: Cluster, job_id: str) -> bool:
    queued = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--format", "%T"],
                            env=_environment(slurm), capture_output=True, text=True,
                            timeout=30)
    return queued.stdout.strip() == ""


def _job_state(slurm: Cluster, job_id: str) -> str:
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=_environment(slurm),
                           capture_output=True, text=True, timeout=30).stdout
    state = re.search(r"JobState=(\S+)", shown)
    return state.group(1) if state else "unknown"


@pytest.mark.timeout(120)
def test_two_srun_tasks_measure_as_one_job_and_rank_zero_records_it(slurm, tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(["srun", "--nodes=1", "--ntasks=2", "parbench", "run", *SWEEP,
                           "--batch-size", "4", "--steps", "3", "--results-dir", str(results)],
                          env=_environment(slurm), capture_output=True, text=True, timeout=110,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = _records(results)
    assert [(r["strategy"], r["status"], r["world_size"]) for r in records] == [
        ("single", "ok", 1), ("ddp", "ok", 2)]
    assert all(len(r["step_times_s"]) == 3 for r in records)
    launched = {r["launched_by"] for r in records}
    assert len(launched) == 1 and re.fullmatch(r"slurm job \d+\.0, 2 ranks", launched.pop())
    assert done.stdout.count("results: ") == 1  # rank 0 alone prints the table and records


@pytest.mark.timeout(300)
def test_the_documented_batch_script_runs_a_sweep_to_a_whole_run_folder(slurm, tmp_path):
    results = tmp_path / "results"
    job_id = _sbatch(slurm, tmp_path, [*SWEEP, "--batch-size", "4,8", "--steps", "3",
                                       "--results-dir", str(results)])
    assert _finished(slurm, job_id) == "COMPLETED", _output(tmp_path, job_id)
    records = _records(results)
    assert [(r["strategy"], r["global_batch"], r["status"]) for r in records] == [
        ("single", 4, "ok"), ("ddp", 4, "ok"), ("single", 8, "ok"), ("ddp", 8, "ok")]
    assert {r["launched_by"] for r in records} == {f"slurm job {job_id}.0, "
                                                                  "2 ranks"}
    folder = _run_folder(results)
    assert {"command.json", "env.json", "records.json", "records.csv"} <= {
        path.name for path in folder.iterdir()}
    assert f"results: {folder}" in _output(tmp_path, job_id)


@pytest.mark.timeout(300)
def test_a_cancelled_sweep_keeps_its_records_and_resume_completes_it(slurm, tmp_path):
    results = tmp_path / "results"
    args = [*SWEEP, "--batch-size", "4,8", "--steps", "100", "--results-dir", str(results)]
    job_id = _sbatch(slurm, tmp_path, args)
    log = tmp_path / f"slurm-{job_id}.out"
    # Once single is on disk and ddp has started (some 10 s of steps here): cancel.
    _wait_for(lambda: log.exists() and "[2/4] ddp" in log.read_text(), 120, "ddp never started")
    time.sleep(2)
    subprocess.run(["scancel", job_id], env=_environment(slurm), check=True, timeout=30)
    assert _finished(slurm, job_id, KILL_WAIT_S + 30) == "CANCELLED"
    records = _records(results)
    *finished, stopped = records
    assert finished and all(r["status"] == "ok" for r in finished)
    # As slurmctld shows a cancelled job while its processes end (COMPLETING), or once ended.
    why = {f"interrupted by Slurm: job {job_id} ending (scancel, or its batch script exited "
           "first)", f"interrupted by Slurm: job {job_id} cancelled (scancel)"}
    assert stopped["status"] == "error" and stopped["reason"] in why
    assert f"parbench: {stopped['reason']}; {len(finished)} finished" in log.read_text()
    kept = [r["step_times_s"] for r in finished]

    folder = _run_folder(results)
    resumed_id = _sbatch(slurm, tmp_path, ["--resume", str(folder), "--progress", "off"])
    assert _finished(slurm, resumed_id) == "COMPLETED", _output(tmp_path, resumed_id)
    assert f"{len(finished)} of 4 configurations already measured" in _output(tmp_path,
                                                                              resumed_id)
    records = _records(results)
    assert [(r["strategy"], r["global_batch"], r["status"]) for r in records] == [
        ("single", 4, "ok"), ("ddp", 4, "ok"), ("single", 8, "ok"), ("ddp", 8, "ok")]
    assert [r["step_times_s"] for r in records[:len(kept)]] == kept  # kept, not measured again


@pytest.mark.timeout(300)
def test_a_job_at_its_time_limit_records_the_configuration_it_stopped(slurm, tmp_path):
    # A time limit is whole minutes, enforced every 30 s or so: stopped 60-100 s in, within
    # single's steps (some 0.03 s each here), then SIGKILL KILL_WAIT_S later.
    results = tmp_path / "results"
    job_id = _sbatch(slurm, tmp_path, [*SWEEP, "--batch-size", "4", "--steps", "100000",
                                       "--results-dir", str(results)], "--time=1")
    assert _finished(slurm, job_id) == "TIMEOUT"
    [record] = _records(results)
    assert (record["strategy"], record["status"], record["reason"]) == (
        "single", "error", f"interrupted by Slurm at job {job_id}'s time limit (00:01:00)")
    assert "DUE TO TIME LIMIT" in _output(tmp_path, job_id)
