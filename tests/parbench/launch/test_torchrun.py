"""parbench under torchrun on CPU (gloo on loopback): a failed configuration (a rank killed, or
every rank out of memory) is recorded and the sweep goes on, `--resume` works, and one node's
job or two nodes' write one merged record per configuration; how the ranks agree on a failure."""

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
from parbench.machine.devices import parse_devices
from parbench.results.folder import load_records
from parbench.sweep.config import Config

TINY = ["--devices", "cpu", "--model", "resnet18", "--image-size", "32", "--num-classes", "10",
        "--warmup", "1", "--progress", "off"]


def _torchrun(torchrun_args: list[str], parbench_args: list[str]) -> subprocess.Popen:
    """A torchrun agent in a session of its own (its ranks and their workers with it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *torchrun_args, "-m", "parbench",
         *parbench_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


def _worker_of_rank(agent: subprocess.Popen, rank: int) -> int | None:
    """The process measuring a configuration for torchrun rank `rank` of `agent`'s job."""
    processes = _processes()
    ranks = [pid for pid, (parent, command, environment) in processes.items()
             if parent == agent.pid and f"\0RANK={rank}\0".encode() in b"\0" + environment]
    servers = [pid for pid, (parent, command, _) in processes.items()
               if parent in ranks and b"forkserver" in command]  # the rank's fork server
    workers = [pid for pid, (parent, _, _) in processes.items() if parent in servers]
    return workers[0] if workers else None


@pytest.mark.timeout(300)
def test_a_killed_rank_is_recorded_the_sweep_goes_on_and_resume_measures_it_again(tmp_path):
    standalone = ["--standalone", "--nproc-per-node", "2"]
    # Enough steps that the first configuration is still training a second after its worker
    # starts: at batch 16 a rank's worker lives about 4 s (1 + 8 steps, then 1 + 8 without
    # communication, at about 0.2 s a step on 2 cores), batch 4's about 2 s.
    agent = _torchrun(standalone, ["run", *TINY, "--strategy", "ddp", "--batch-size", "16,4",
                                   "--steps", "8", "--results-dir", str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while (victim := _worker_of_rank(agent, 1)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert victim, "rank 1 never started its worker"
        time.sleep(1)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:  # the agent is reaped (and killed with its session) whatever happened above
        [output] = _finish([agent], timeout=180)
    assert agent.returncode == 0, output
    [folder] = list(tmp_path.iterdir())
    first = json.loads((folder / "records.json").read_text())
    assert [(r["global_batch"], r["status"]) for r in first] == [(16, "error"), (4, "ok")]
    assert first[0]["reason"].startswith("LaunchError: rank 1 died"), first[0]["reason"]
    assert "SIGKILL" in first[0]["reason"]
    assert first[1]["world_size"] == 2 and len(first[1]["peak_memory_mib"]) == 2
    # Both ranks moved on at once: well under the 1800 s timeout a hung peer would wait.
    assert time.monotonic() - killed_at < 120

    agent = _torchrun(standalone, ["run", "--resume", str(folder)])
    [output] = _finish([agent], timeout=180)
    assert agent.returncode == 0, output
    assert "1 of 2 configurations already measured" in output
    second = json.loads((folder / "records.json").read_text())
    assert [(r["global_batch"], r["status"]) for r in second] == [(16, "ok"), (4, "ok")]
    assert second[1]["step_times_s"] == first[1]["step_times_s"]  # kept, not measured again


@pytest.mark.timeout(300)
def test_two_torchrun_nodes_on_loopback_record_every_configuration_out_of_memory_ones_too(
        tmp_path):
    port = _free_port()
    # ddp first: each rank starts its fork server (an import of torch, some 5 s of CPU) for its
    # first configuration, both at once for ddp; single first would run on rank 0 alone and
    # leave rank 1's server to start after it.
    agents = [_torchrun(["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}"],
                        ["run", *TINY, "--strategy", "ddp,single", "--batch-size", "8,4096",
                         "--steps", "2", "--memory-cap-mib", "400",
                         "--results-dir", str(tmp_path)])
              for _ in range(2)]
    outputs = _finish(agents, timeout=240)
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    [folder] = list(tmp_path.iterdir())  # rank 0 alone writes
    frame = load_records(folder)
    assert list(zip(frame["strategy"], frame["global_batch"], frame["status"], strict=True)) == [
        ("ddp", 8, "ok"), ("single", 8, "ok"), ("ddp", 4096, "oom"), ("single", 4096, "oom")]
    assert "can't allocate memory" in frame.iloc[2]["reason"]  # ddp's, agreed by both ranks
    ddp = frame.iloc[0]
    assert ddp["world_size"] == 2 and ddp["nodes"] == 2 and ddp["backend"] == "gloo"
    assert ddp["emulated"]  # both nodes are this host
    assert len(ddp["step_times_s"]) == 2 and len(ddp["peak_memory_mib"]) == 2


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
    that never comes, until its launcher reads that rank 0 failed."""
    config = Config("ddp", tiny_workload, 8, parse_devices("cpu,cpu"), warmup=1, steps=2,
                    timeout_s=100)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    started = time.monotonic()

    def peer_failure() -> str | None:
        return "rank 0 failed: RuntimeError: boom" if time.monotonic() - started > 3 else None

    with pytest.raises(LaunchError, match="^rank 1 stopped: rank 0 failed: RuntimeError: boom$"):
        spawn_rank(config, Task.MEASURE, Rendezvous("127.0.0.1", store.port, "test/", 1, 2),
                   peer_failure)
    assert time.monotonic() - started < 20  # not the 100 s timeout
    assert child_pids() == []
