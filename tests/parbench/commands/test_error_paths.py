"""Refusals and failures no other test reaches, each driven as a user meets it where it can be:
a refusal is one line on stderr (`parbench: error: ...`) with exit 2 and no traceback; a
configuration that fails in a sweep is recorded with its reason while the configurations
measured beside it keep their records.

- run in a job with a list of devices (commands/run_spec.py, `_job_device`)
- verify in a job (commands/verify.py, `command_verify`)
- predict of a held-out run whose kept predictions this version may not make again
  (commands/predict.py, `_checked_run_arguments`)
- recommend with a link it does not know, or --gpu with what measures at hand
  (commands/recommend.py, `_recommend_link`, `_gpu`)
- a configuration whose world size is not the job's (launch/job.py, `measure_in_job`)
- ranks of one job that would measure different sweeps (launch/job.py, `same_on_every_rank`)
- rank 0's worker ending without its result (launch/spawn.py, `_start`)
- --device-memory-mib on a strategy whose devices cannot be told apart (launch/worker.py,
  `_device_limit`)
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
import torch.distributed as dist

from parbench.advisor.runs.published import PREDICTION_FILE
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.cli import main
from parbench.families.workloads import Workload
from parbench.launch import LaunchError, job
from parbench.plan.config import Config
from parbench.results.folder import RunFolder
from parbench.strategies.single import SingleDevice
from tests.support import CPU2, TINY_FLAGS, child_pids, ok_record

# The module, not the function of its name that parbench.launch exports.
spawning = importlib.import_module("parbench.launch.spawn")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def one_rank_job(monkeypatch):
    """This process as the only rank of a job torchrun started (its environment set by hand,
    a free port on loopback for its store); the job's store forgotten before and after."""
    for key in [key for key in os.environ if key.startswith(("SLURM_", "TORCHELASTIC_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    for key, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", GROUP_RANK="0",
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())).items():
        monkeypatch.setenv(key, value)
    job._job_store.cache_clear()
    yield
    job._job_store.cache_clear()
    if dist.is_initialized():
        dist.destroy_process_group()


def _refusal(capsys, argv: list[str]) -> str:
    """What `parbench ARGV` said on stderr, checked to be one line, exit 2, no traceback."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("parbench: error: ")
    return err.strip()


@pytest.mark.timeout(60)
def test_run_in_a_job_with_a_list_of_devices_is_refused(one_rank_job, capsys, tmp_path):
    err = _refusal(capsys, ["run", "--devices", "cpu,cpu", *TINY_FLAGS, "--strategy", "single",
                            "--results-dir", str(tmp_path)])
    assert err == ("parbench: error: under torchrun or srun each process drives one device: "
                   "give --devices cpu or --devices cuda (a rank uses cuda:<its local rank>), "
                   "and the number of processes with torchrun's --nnodes and --nproc-per-node "
                   "(srun's --nodes and --ntasks-per-node)")
    assert not dist.is_initialized()  # the job's group left again
    assert list(tmp_path.iterdir()) == []  # no run folder begun


def test_verify_in_a_job_is_refused(one_rank_job, capsys):
    err = _refusal(capsys, ["verify", "--devices", "cpu,cpu", *TINY_FLAGS, "--strategy",
                            "single"])
    assert err == ("parbench: error: run parbench verify without torchrun or srun; it starts "
                   "its own processes")


def _held_out_run(tmp_path, stored: dict) -> RunFolder:
    """A held-out run (drawn by the prediction-holdout experiment) measured under this version
    of the models, with the predictions `stored` describes kept beside it."""
    folder = RunFolder.create(tmp_path / "results")
    folder.write_command({"experiment": "prediction-holdout", "seed": 0})
    folder.write_records([ok_record(
        world_size=1, environment={"predictor_version": PREDICTOR_VERSION},
        step_time_median_s=0.05, throughput_ips=80.0)])
    (folder.path / PREDICTION_FILE).write_text(json.dumps(stored))
    return folder


@pytest.mark.parametrize("stored, why", [
    ({"predictor_version": PREDICTOR_VERSION - 1},
     f"they were made by version {PREDICTOR_VERSION - 1} of the models, which are now version "
     f"{PREDICTOR_VERSION}"),
    ({"predictor_version": PREDICTOR_VERSION, "fingerprint": "an older source"},
     "the models' sources changed since they were made, still numbered version "
     f"{PREDICTOR_VERSION}: bump PREDICTOR_VERSION (parbench/advisor/version.py)"),
], ids=["older-version", "changed-sources"])
def test_a_held_out_run_whose_predictions_cannot_be_made_again_is_refused_and_kept(
        tmp_path, capsys, monkeypatch, stored, why):
    from parbench.advisor.profiling import record_profiles

    monkeypatch.setattr(record_profiles, "_profile", lambda *args, **kwargs: pytest.fail(
        "profiled before the run was refused"))
    folder = _held_out_run(tmp_path, stored)
    before = {path.name: path.read_bytes() for path in folder.path.iterdir()}
    err = _refusal(capsys, ["predict", str(folder.path), "--link", "pcie4"])
    assert err == (f"parbench: error: {folder.path} is a held-out run whose predictions cannot "
                   f"be made again: {why}")
    # What was measured and predicted before stays as it was.
    assert {path.name: path.read_bytes() for path in folder.path.iterdir()} == before


RECOMMEND = ["recommend", *TINY_FLAGS, "--devices", "2", "--batch-size", "8", "--split-size", "4",
             "--profile-device", "cpu"]


@pytest.mark.parametrize("argv, message", [
    (["--link", "fibre"], "--link 'fibre': give measured, nvlink4, pcie4, ethernet100, or a bus "
                          "bandwidth in GB/s above 0"),
    (["--link", "0"], "--link '0': give measured"),
    (["--link", "pcie4", "--gpu", "H100", "--confirm", "1"],
     "--gpu H100: recommends for GPUs not at hand, which --confirm and --on cannot measure; "
     "drop --gpu, or --confirm and --on"),
], ids=["unknown-link", "no-bandwidth", "gpu-with-confirm"])
def test_recommend_refuses_a_link_it_does_not_know_and_a_gpu_it_cannot_measure(
        tmp_path, capsys, monkeypatch, argv, message):
    from parbench.advisor.profiling import record_profiles

    monkeypatch.setattr(record_profiles, "_profile", lambda *args, **kwargs: pytest.fail(
        "profiled before the input was refused"))
    err = _refusal(capsys, [*RECOMMEND, "--profile-cache", str(tmp_path), *argv])
    assert message in err, err


@pytest.mark.timeout(60)
def test_a_configuration_whose_world_size_is_not_the_jobs_fails_on_its_rank(one_rank_job):
    config = Config("ddp", Workload(model="resnet18", image_size=32, num_classes=10), 4, CPU2)
    with job.job_group(timeout_s=30):
        with pytest.raises(LaunchError) as raised:
            job.measure_in_job(config)
        assert str(raised.value) == "ddp uses 2 devices but the job has 1 processes"
        # The failure is left in the job's store, where another rank's worker would read it
        # and stop.
        [key] = [f"parbench/0/{n}/failed" for n in range(64)
                 if job._job_store().check([f"parbench/0/{n}/failed"])]
        assert job._job_store().get(key).decode() == str(raised.value)
    assert child_pids() == []  # nothing was started for it


def _two_srun_tasks(argvs: list[list[str]]) -> list[subprocess.Popen]:
    """Two tasks of one srun job on loopback, one per node, task k running `parbench
    argvs[k]` (Slurm's environment set by hand), each in a session of its own."""
    port = _free_port()
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("SLURM_", "TORCHELASTIC_", "MASTER_", "RANK",
                                          "WORLD_SIZE", "LOCAL_RANK"))}
    return [subprocess.Popen(
        [sys.executable, "-m", "parbench", *argv],
        env={**environment, "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2",
             "SLURM_LOCALID": "0", "SLURM_NODEID": str(rank), "SLURM_JOB_ID": "1",
             "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "localhost",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        for rank, argv in enumerate(argvs)]


@pytest.mark.timeout(150)
def test_ranks_given_different_sweeps_refuse_on_every_rank_before_measuring(tmp_path):
    sweep = ["run", "--devices", "cpu", *TINY_FLAGS, "--strategy", "single", "--steps", "1",
             "--warmup", "1", "--progress", "off", "--results-dir", str(tmp_path)]
    tasks = _two_srun_tasks([[*sweep, "--batch-size", "4"], [*sweep, "--batch-size", "8"]])
    try:
        outputs = [task.communicate(timeout=120) for task in tasks]
    finally:
        for task in tasks:
            if task.poll() is None:
                os.killpg(task.pid, signal.SIGKILL)
                task.wait()
    for task, (out, err) in zip(tasks, outputs, strict=True):
        assert task.returncode == 2, (out, err)
        assert "Traceback" not in out + err
        [line] = [line for line in err.splitlines() if line.startswith("parbench")]
        assert line == ("parbench: error: ranks [1] differ from rank 0 in the configurations "
                        "they measure; give every node the same arguments, data and software")
    assert list(tmp_path.iterdir()) == []  # nothing measured, no run folder begun


def _records(results) -> dict[str, dict]:
    [folder] = list(results.iterdir())
    return {r["strategy"]: r for r in json.loads((folder / "records.json").read_text())}


@pytest.mark.timeout(150)
def test_a_worker_that_leaves_no_result_is_recorded_and_the_sweep_keeps_the_rest(
        tmp_path, capsys, monkeypatch):
    # Rank 0's worker exits cleanly but its result file is not there (read as missing).
    monkeypatch.setattr(spawning, "_read_result", lambda out_dir: None)
    assert main(["run", "--devices", "cpu,cpu", *TINY_FLAGS, "--strategy", "single,ddp",
                 "--batch-size", "4", "--steps", "1", "--warmup", "1", "--progress", "off",
                 "--results-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    records = _records(tmp_path)
    assert records["ddp"]["status"] == "error"
    assert re.fullmatch(r"LaunchError: rank 0 finished without leaving its result"
                        r"( \(at \w+\.py:\d+\))?", records["ddp"]["reason"])
    assert records["single"]["status"] == "ok" and records["single"]["step_time_median_s"] > 0
    assert child_pids() == []


@pytest.mark.timeout(150)
def test_a_device_memory_limit_on_devices_not_told_apart_is_recorded_and_the_rest_kept(
        tmp_path, capsys, monkeypatch):
    # nn.DataParallel names no module per device (it runs on CUDA only): single made so here.
    monkeypatch.setattr(SingleDevice, "placed_modules", lambda self: None)
    assert main(["run", "--devices", "cpu,cpu", *TINY_FLAGS, "--strategy",
                 "single,model-parallel", "--batch-size", "4", "--steps", "1", "--warmup", "1",
                 "--device-memory-mib", "400", "--progress", "off",
                 "--results-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    records = _records(tmp_path)
    assert records["single"]["status"] == "error"
    assert re.fullmatch(re.escape(
        "ValueError: --device-memory-mib counts each logical device's tensors, and this "
        "strategy's devices cannot be told apart (nn.DataParallel); give --memory-cap-mib "
        "instead") + r" \(at worker\.py:\d+\)", records["single"]["reason"])
    assert records["model-parallel"]["status"] == "ok"
    assert records["model-parallel"]["step_time_median_s"] > 0
