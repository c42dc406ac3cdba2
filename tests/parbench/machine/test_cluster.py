"""Where a process sits in a job: torchrun's variables and Slurm's read in one place, and two
srun tasks (Slurm's environment set by hand, on loopback) measuring and recording as
torchrun's ranks do."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from parbench.machine.cluster import Job, first_host, job
from parbench.results.folder import load_records

TORCHRUN = {"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
            "GROUP_RANK": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "29500",
            "TORCHELASTIC_RESTART_COUNT": "2"}
SLURM = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "123456"}


def test_a_process_on_its_own_is_in_no_job():
    assert job({}) is None
    assert job({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None  # one task: on its own


def test_torchrun_s_variables_make_a_job():
    assert job(TORCHRUN) == Job("torchrun", 3, 4, 1, 1, "node1", 29500, restart=2)


def test_srun_s_variables_make_a_job_meeting_at_the_first_node():
    # Every task derives the same port from the job's id where MASTER_PORT is not set.
    assert job(SLURM) == Job("slurm", 3, 4, 1, 1, "gpu07", 15000 + 123456 % 20000)
    assert job({**SLURM, "MASTER_ADDR": "head", "MASTER_PORT": "1234"}).master_addr == "head"
    assert job({**SLURM, **TORCHRUN}).launcher == "torchrun"  # torchrun inside an allocation


@pytest.mark.parametrize("nodelist, host", [("node01", "node01"), ("node[07-09,12]", "node07"),
                                            ("a[3],b[1-2]", "a3"), ("gpu1,gpu2", "gpu1")])
def test_the_first_host_of_a_node_list(nodelist, host):
    assert first_host(nodelist) == host


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.timeout(300)
def test_two_srun_tasks_on_loopback_measure_and_record_as_one_job(tmp_path):
    port = _free_port()
    # ddp first: both tasks start their fork servers (an import of torch each) at once, where
    # single first would run on task 0 alone and leave task 1's to start after it.
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("SLURM_", "TORCHELASTIC_", "MASTER_"))}
    tasks = [subprocess.Popen(
        [sys.executable, "-m", "parbench", "run", "--devices", "cpu", "--model", "resnet18",
         "--image-size", "32", "--num-classes", "10", "--warmup", "1", "--steps", "2",
         "--strategy", "ddp,single", "--batch-size", "8", "--progress", "off",
         "--results-dir", str(tmp_path)],
        env={**environment, "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2",
             "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_JOB_ID": "1",
             "SLURM_JOB_NODELIST": "localhost", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for rank in range(2)]
    try:
        outputs = [task.communicate(timeout=240)[0] for task in tasks]
    finally:
        for task in tasks:
            if task.poll() is None:
                os.killpg(task.pid, signal.SIGKILL)
                task.wait()
    assert [task.returncode for task in tasks] == [0, 0], outputs
    [folder] = list(tmp_path.iterdir())  # rank 0 alone writes
    frame = load_records(folder)
    assert list(zip(frame["strategy"], frame["status"], strict=True)) == [("ddp", "ok"),
                                                                         ("single", "ok")]
    ddp = frame.iloc[0]
    assert ddp["world_size"] == 2 and ddp["backend"] == "gloo"
    assert len(ddp["step_times_s"]) == 2 and len(ddp["peak_memory_mib"]) == 2
