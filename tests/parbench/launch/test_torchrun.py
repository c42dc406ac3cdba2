"""parbench in a job on CPU (gloo on loopback): two torchrun nodes sweep, a failed configuration
(a rank killed, or every rank out of memory) is recorded and the sweep goes on, two srun tasks
(Slurm's environment set by hand) resume it, and the job writes one merged record per
configuration; how the ranks agree on a failure."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from parbench.launch import LaunchError
from parbench.launch.failures import root_cause
from parbench.launch.ranks import Task
from parbench.launch.spawn import Rendezvous, spawn_rank
from parbench.plan.config import Config
from parbench.results.folder import load_records
from tests.support import CPU2, TINY_FLAGS, holds_tcp_socket

# The killed configuration's worker is killed as soon as it is seen connected to its
# rendezvous store, with its 2 + 8 steps (ddp warms up 2), then 2 + 8 without communication,
# still ahead of it: seconds of CPU, against the few milliseconds the test takes to kill it.
STEPS = 8
SWEEP = ["--devices", "cpu", *TINY_FLAGS, "--warmup", "1", "--progress", "off"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _two_nodes(parbench_args: list[str]) -> list[subprocess.Popen]:
    """Two torchrun agents meeting on loopback (c10d), one rank each, each agent in a session
    of its own (its rank and their workers with it)."""
    port = _free_port()
    return [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
         f"test-{port}", "-m", "parbench", *parbench_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for _ in range(2)]


def _two_srun_tasks(parbench_args: list[str]) -> list[subprocess.Popen]:
    """Two tasks of one srun job on loopback, one per node (Slurm's environment set by hand:
    no srun here), each in a session of its own."""
    port = _free_port()
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("SLURM_", "TORCHELASTIC_", "MASTER_"))}
    return [subprocess.Popen(
        [sys.executable, "-m", "parbench", *parbench_args],
        env={**environment, "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2",
             "SLURM_LOCALID": "0", "SLURM_NODEID": str(rank), "SLURM_JOB_ID": "1",
             "SLURM_STEP_ID": "0",
             "SLURM_JOB_NODELIST": "localhost", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for rank in range(2)]


def _finish(agents: list[subprocess.Popen], timeout: float) -> list[str]:
    """Each agent's output once it exits; any still running at the timeout is killed with its
    session."""
    try:
        return [agent.communicate(timeout=timeout)[0] for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()


def _processes() -> dict[int, tuple[int, bytes, bytes]]:
    """pid -> (parent pid, command line, environment) of every process this user can read."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            found[int(stat.parent.name)] = (parent, (stat.parent / "cmdline").read_bytes(),
                                            (stat.parent / "environ").read_bytes())
        except (OSError, ValueError):
            continue
    return found


def _worker_of_rank(agents: list[subprocess.Popen], rank: int) -> int | None:
    """The process measuring a configuration for torchrun rank `rank` of the agents' job."""
    processes = _processes()
    ranks = [pid for pid, (parent, command, environment) in processes.items()
             if parent in {agent.pid for agent in agents}
             and f"\0RANK={rank}\0".encode() in b"\0" + environment]
    servers = [pid for pid, (parent, command, _) in processes.items()
               if parent in ranks and b"forkserver" in command]  # the rank's fork server
    workers = [pid for pid, (parent, _, _) in processes.items() if parent in servers]
    return workers[0] if workers else None


@dataclasses.dataclass(frozen=True)
class KilledJob:
    """A two-node sweep whose first configuration lost a rank, then resumed: the records after
    each run, how long the first run went on after the kill, and the resumed run's output
    (both tasks')."""

    folder: Path
    first: list[dict]
    after_kill_s: float
    resumed_output: str
    second: list[dict]


@pytest.fixture(scope="module")
def killed_job(tmp_path_factory) -> KilledJob:
    """Two torchrun nodes on loopback (one rank each) sweep ddp and single at batch 4 (rank 1's
    ddp worker SIGKILLed as it trains), 8, and 4096 (out of memory under the cap); then two
    srun tasks, one per node, resume the run (the ranks of any job resume it alike: rank 0
    reads the folder and hands every rank the sweep). Measured once, for the three tests
    below."""
    results = tmp_path_factory.mktemp("job")
    # ddp first: each rank starts its fork server (an import of torch, some 5 s of CPU) for
    # its first configuration, both at once for ddp; single first would run on rank 0 alone
    # and leave rank 1's server to start after it.
    agents = _two_nodes(["run", *SWEEP, "--strategy", "ddp,single", "--batch-size", "4,8,4096",
                         "--steps", str(STEPS), "--memory-cap-mib", "400",
                         "--results-dir", str(results)])
    try:
        deadline = time.monotonic() + 120
        victim = None
        while time.monotonic() < deadline:
            victim = _worker_of_rank(agents, 1)
            if victim is not None and holds_tcp_socket(victim):
                break  # set up and at its rendezvous: from here on, training
            time.sleep(0.02)
        else:
            pytest.fail(f"rank 1's worker never reached its rendezvous ({victim})")
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:  # the agents are reaped (and killed with their sessions) whatever happened above
        outputs = _finish(agents, timeout=180)
    after_kill_s = time.monotonic() - killed_at
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    [folder] = list(results.iterdir())  # rank 0 alone writes
    first = json.loads((folder / "records.json").read_text())

    tasks = _two_srun_tasks(["run", "--resume", str(folder), "--progress", "off"])
    outputs = _finish(tasks, timeout=180)
    assert [task.returncode for task in tasks] == [0, 0], outputs
    second = json.loads((folder / "records.json").read_text())
    return KilledJob(folder, first, after_kill_s, "\n".join(outputs), second)


def _outcomes(records: list[dict]) -> list[tuple[str, int, str]]:
    return [(r["strategy"], r["global_batch"], r["status"]) for r in records]


@pytest.mark.slow  # the job below: some 35 s of two cores
@pytest.mark.timeout(480)
def test_a_killed_rank_is_recorded_the_sweep_goes_on_and_resume_measures_it_again(killed_job):
    first = killed_job.first
    assert _outcomes(first) == [("ddp", 4, "error"), ("single", 4, "ok"), ("ddp", 8, "ok"),
                                ("single", 8, "ok"), ("ddp", 4096, "oom"),
                                ("single", 4096, "oom")]
    assert first[0]["reason"].startswith("LaunchError: rank 1 died"), first[0]["reason"]
    assert "SIGKILL" in first[0]["reason"]
    # Both ranks moved on at once, the rest of the sweep measured: well under the 1800 s
    # timeout a hung peer would wait.
    assert killed_job.after_kill_s < 120
    # Resumed: the failed configuration measured again, every other one kept.
    assert "5 of 6 configurations already measured" in killed_job.resumed_output
    second = killed_job.second
    assert [r["status"] for r in second] == ["ok", "ok", "ok", "ok", "oom", "oom"]
    for kept in range(1, 4):
        assert second[kept]["step_times_s"] == first[kept]["step_times_s"]  # not measured again


@pytest.mark.slow  # the job below: some 35 s of two cores
@pytest.mark.timeout(480)
def test_two_torchrun_nodes_on_loopback_record_every_configuration_out_of_memory_ones_too(
        killed_job):
    """What the two torchrun nodes measured (before the resume)."""
    first = killed_job.first
    assert _outcomes(first[2:]) == [("ddp", 8, "ok"), ("single", 8, "ok"), ("ddp", 4096, "oom"),
                                    ("single", 4096, "oom")]
    assert "can't allocate memory" in first[4]["reason"]  # ddp's, agreed by both ranks
    ddp = first[2]
    assert ddp["world_size"] == 2 and ddp["nodes"] == 2 and ddp["backend"] == "gloo"
    assert ddp["emulated"]  # both nodes are this host
    assert len(ddp["step_times_s"]) == STEPS and len(ddp["peak_memory_mib"]) == 2


@pytest.mark.slow  # the job below: some 35 s of two cores
@pytest.mark.timeout(480)
def test_two_srun_tasks_on_loopback_measure_and_record_as_one_job(killed_job):
    """The configuration the two srun tasks measured (the one the torchrun nodes failed, resumed),
    rank 0 alone writing."""
    assert [folder.name for folder in killed_job.folder.parent.iterdir()] == [
        killed_job.folder.name]
    ddp = load_records(killed_job.folder).iloc[0]
    assert (ddp["strategy"], ddp["status"]) == ("ddp", "ok")
    assert ddp["world_size"] == 2 and ddp["nodes"] == 2 and ddp["backend"] == "gloo"
    assert len(ddp["step_times_s"]) == STEPS and len(ddp["peak_memory_mib"]) == 2


def test_the_root_cause_is_the_failure_the_others_followed():
    killed = "rank 1 died: process 0 terminated with signal SIGKILL"
    peer_gone = "rank 0 failed: RuntimeError: [pair.cc:534] Connection closed by peer [::1]"
    assert root_cause({0: peer_gone, 1: killed}) == 1
    assert root_cause({0: "rank 0 stopped: rank 1 failed: ValueError: x",
                       1: "rank 1 failed: ValueError: x"}) == 1
    out_of_memory = "rank 1 failed: torch.OutOfMemoryError: CUDA out of memory"
    assert root_cause({0: killed, 1: out_of_memory}) == 1
    assert root_cause({2: "rank 2 failed: ValueError: y", 1: "rank 1 failed: ValueError: y"}) == 1


@pytest.mark.timeout(120)
def test_a_worker_waiting_for_a_failed_peer_is_stopped_when_the_store_says_so(
        tiny_workload, child_pids):
    """With gloo a peer that died closes its sockets, but with NCCL, or before the group is
    formed, the others would wait until the timeout: here rank 1's worker waits for a rank 0
    that never comes, until its launcher reads that rank 0 failed (a second after the worker
    started): well before its timeout, which this test's own timeout comes long before."""
    # A timeout far past this test's own (pytest-timeout's 120 s): a worker left to it fails
    # the test, whatever the machine's speed.
    config = Config("ddp", tiny_workload, 8, CPU2, warmup=1, steps=2, timeout_s=3600)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    worker_seen: list[float] = []

    def peer_failure() -> str | None:
        if not worker_seen and child_pids():
            worker_seen.append(time.monotonic())
        waited = worker_seen and time.monotonic() - worker_seen[0] > 1
        return "rank 0 failed: RuntimeError: boom" if waited else None

    with pytest.raises(LaunchError, match="^rank 1 stopped: rank 0 failed: RuntimeError: boom$"):
        spawn_rank(config, Task.MEASURE, Rendezvous("127.0.0.1", store.port, "test/", 1, 2),
                   peer_failure)
    assert worker_seen, "the worker never started"
    # Stopped only once the failure was said, a second after the worker was seen.
    assert time.monotonic() - worker_seen[0] >= 1
    assert child_pids() == []
