"""ddp and fsdp through the spawn launcher (gloo on loopback): equivalence with the
single-device step, per-rank records, a killed rank, a hanging one (torchrun:
test_torchrun.py)."""

import contextlib
import math
import os
import signal
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from parbench.drive.runner import run_config
from parbench.drive.verify import verify
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config
from tests.support import CPU2, holds_tcp_socket

CPU3 = parse_devices("cpu,cpu,cpu")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("ranks", [3])  # 2 ranks: tests/parbench/strategies/test_conformance.py
def test_one_step_equals_the_single_device_step(tiny_workload, ranks, child_pids):
    workload = replace(tiny_workload, image_size=64)  # BatchNorm well conditioned at layer4
    verdicts = verify(workload, CPU3, ["ddp", "fsdp"], 12, {"world_size": ranks},
                      tolerance=1e-5)
    for verdict in verdicts:
        assert verdict.baseline_update > 1e-4
        assert verdict.max_abs_difference <= 1e-5, verdict
    assert child_pids() == []


@pytest.mark.timeout(180)
def test_a_compressing_hook_differs_from_the_baseline_within_the_tolerance_it_states(
        tiny_workload, child_pids):
    [exact, fp16] = [verify(tiny_workload, CPU3, ["ddp"], 8,
                            {"world_size": 2, "comm_hook": hook}, tolerance=1e-7)[0]
                     for hook in (None, "fp16")]
    assert exact.tolerance == 1e-7 and exact.ok, exact
    # fp16 buckets: each gradient rounded to 11 significant bits before the all-reduce.
    assert fp16.tolerance == pytest.approx(2**-10 * fp16.baseline_update)
    assert 0 < fp16.max_abs_difference <= fp16.tolerance, fp16
    assert child_pids() == []


@pytest.mark.slow  # two processes train until fp16's loss scale comes down from 2^20
@pytest.mark.timeout(240)
def test_fsdp_in_fp16_makes_the_baselines_step(tiny_workload, child_pids):
    """With its sharded gradient scaler, at the scale verify settles on (one step, not
    skipped). Started at 2^20, where the first step overflows fp16 on any machine: the mean
    cross-entropy's gradient at a sample's true-class logit is (p - 1) / 8, which the scale
    takes past fp16's 65504 (into inf, a skipped step) unless the untrained model already gives
    that class p > 1/2 (about 1/10 with 10 classes). Two threads per device: fp16 on a CPU is
    slow, and the baseline's steps here would leave a core idle. Without the mixed-precision
    policy (on by default in fp16), whose fp16 gradients overflow sooner: the scaler is what
    this checks."""
    fp16 = replace(tiny_workload, precision="fp16", initial_loss_scale=2.0**20)
    assert 2.0**20 * (1 - 0.5) / 8 > torch.finfo(torch.float16).max
    [verdict] = verify(fp16, CPU3, ["fsdp"], 8, {"world_size": 2, "mixed_precision": False},
                       tolerance=1e-5, threads_per_device=2)
    assert verdict.baseline_update > 1e-3
    assert verdict.ok, verdict
    # Halved until neither step was skipped.
    assert verdict.loss_scale < 2**20
    assert child_pids() == []


@pytest.mark.timeout(240)
def test_fsdp_mixed_precision_differs_from_autocast_by_less_than_bf16_moves_the_step(
        tiny_workload, child_pids):
    bf16 = replace(tiny_workload, image_size=64, precision="bf16")
    # The policy is fsdp's default in bf16; off, autocast alone.
    [autocast, policy] = [verify(bf16, CPU3, ["fsdp"], 8, {"world_size": 2, **options},
                                 tolerance=1e-5)[0]
                          for options in ({"mixed_precision": False}, {})]
    # Autocast alone: the baseline's own arithmetic in other processes, within fp32's
    # one-step tolerance (summed over the shards in another order, or by other kernels).
    assert autocast.tolerance == 1e-5 and autocast.ok, autocast
    # Its tolerance: twice as far as bf16 autocast moves the baseline's own step from fp32's;
    # still below the step itself, so gradients summed instead of averaged would fail it.
    assert policy.tolerance < policy.baseline_update
    assert 0 < policy.max_abs_difference <= policy.tolerance, policy
    assert child_pids() == []


def test_verify_refuses_to_call_a_step_that_changed_nothing_equal(tiny_workload):
    [verdict] = verify(replace(tiny_workload, learning_rate=0.0), CPU3, ["model-parallel"], 8,
                       {"stages": 2}, tolerance=1e-5)
    assert verdict.baseline_update == 0 and not verdict.ok
    assert "nothing was compared" in verdict.error


@pytest.mark.timeout(180)
def test_fsdp_gathers_in_half_precision_under_its_policy(tiny_workload):
    config = Config("fsdp", replace(tiny_workload, precision="bf16"), 8, CPU3, warmup=1,
                    steps=2, options={"world_size": 2, "mixed_precision": True,
                                      "reshard_after_forward": "no"})
    record = run_config(config)
    assert record.status == "ok", record.reason
    assert record.loss_last < record.loss_first
    # Each parameter gathered once, in 2 bytes, less BatchNorm's weights and biases (kept in
    # fp32); gradients reduced in fp32.
    batchnorm = 2 * (64 + 4 * 64 + 5 * 128 + 5 * 256 + 5 * 512)
    assert record.allgather_bytes == 2 * (11_181_642 - batchnorm) + 4 * batchnorm
    assert record.allreduce_bytes == 4 * 11_181_642


@pytest.mark.slow  # ddp and fsdp measured end to end, 13 s of two cores
@pytest.mark.timeout(180)
def test_ranks_are_recorded_and_fsdp_holds_less_per_rank_than_ddp(tiny_workload):
    records = {}
    for name, options in (("ddp", {}), ("fsdp", {}), ("ddp-zero", {"zero": True}),
                          ("fsdp-gathered", {"reshard_after_forward": "no"})):
        config = Config(name.split("-")[0], tiny_workload, 8, CPU3, warmup=1,
                        steps=2, options={"world_size": 2, **options})
        records[name] = record = run_config(config)
        assert record.status == "ok", record.reason
        assert record.world_size == 2 and record.backend == "gloo"
        assert record.devices == "cpu,cpu" and record.emulated
        assert len(record.peak_memory_mib) == len(record.physical_peak_memory_mib) == 2
        per_rank = record.rank_step_times_s
        assert len(per_rank) == 2 and all(len(times) == 2 for times in per_rank)
        assert record.step_times_s == [max(a, b) for a, b in zip(*per_rank, strict=True)]
        assert isinstance(record.loss_last, float) and math.isfinite(record.loss_last)
        # The step split into compute (the same steps, communication off) and exposed
        # communication, with the gradient bytes reduced per step: resnet18's, 10 classes.
        assert len(record.compute_step_times_s) == 2 and record.compute_time_s > 0
        assert record.exposed_comm_time_s == pytest.approx(
            record.step_time_median_s - record.compute_time_s)
        assert record.allreduce_bytes == 4 * 11_181_642
    assert records["fsdp"].allgather_bytes > records["fsdp"].allreduce_bytes
    # Not resharded after forward: every parameter is gathered once per step.
    assert records["fsdp-gathered"].allgather_bytes == records["fsdp"].allreduce_bytes
    assert records["ddp"].allgather_bytes is None
    assert records["ddp"].ddp_backward_comm_time_s > 0  # DDP's own timings, gloo included
    # Parameters, gradients and momentum dominate at 32 px: sharded over 2 ranks, about half.
    ddp, fsdp = records["ddp"].peak_memory_max_mib, records["fsdp"].peak_memory_max_mib
    assert fsdp < 0.7 * ddp
    # ZeRO-1 shards the momentum only: a sixth less of parameters + gradients + momentum.
    zero = records["ddp-zero"].peak_memory_mib
    assert max(zero) < ddp - 0.4 * 4 * 11_181_642 / 2**20


def _sockets_of(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of TCP sockets in LISTEN state owned by these processes."""
    inodes, found = _sockets_of(pids), set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:
                address = fields[1].split(":")[0]
                found.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1])
                          if len(address) == 8 else address)
    return found


@pytest.mark.timeout(180)
def test_the_default_rendezvous_listens_on_loopback_only(tiny_workload, child_pids):
    """The store and gloo's own sockets: sampled while a real 2-rank job runs."""
    # 2 + 3 steps (ddp warms up 2), then 2 + 3 without communication: some 1.5 s of
    # sampling, every 0.05 s.
    config = Config("ddp", tiny_workload, 8, CPU2, warmup=1, steps=3)
    result = {}
    worker = threading.Thread(target=lambda: result.update(record=run_config(config)))
    worker.start()
    seen: set[str] = set()
    while worker.is_alive():
        seen |= _listening_addresses([os.getpid(), *child_pids()])
        time.sleep(0.05)
    worker.join()
    assert result["record"].status == "ok", result["record"].reason
    assert seen and seen <= {"127.0.0.1"}, seen


@pytest.mark.timeout(180)
def test_a_killed_rank_fails_fast_naming_it_and_leaves_no_process(tiny_workload, child_pids):
    config = Config("ddp", tiny_workload, 8, CPU2, warmup=1, steps=10_000,
                    timeout_s=150)
    result = {}
    worker = threading.Thread(target=lambda: result.update(record=run_config(config)))
    worker.start()
    # Into training, however long the set-up takes: both ranks started and connected to the
    # rendezvous store (10,000 steps: they cannot be done before the kill).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = child_pids()
        if len(ranks) == 2 and all(holds_tcp_socket(rank) for rank in ranks):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the ranks never reached their rendezvous")
    victim = max(ranks)  # spawned second: rank 1
    os.kill(victim, signal.SIGKILL)
    # Fast: well before the 150 s timeout a hung peer would wait (the join's own bound).
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert result["record"].status == "error"
    assert result["record"].reason.startswith("LaunchError: rank 1 died")
    assert "SIGKILL" in result["record"].reason
    assert child_pids() == []


@pytest.mark.slow  # writes an image folder and trains ddp from it: about 9 s
@pytest.mark.timeout(180)
def test_ddp_trains_on_an_image_folder(tiny_workload, image_folder, child_pids):
    root = image_folder(classes=2, per_class=8)
    config = Config("ddp", replace(tiny_workload, data_dir=str(root)), 4,
                    CPU2, warmup=1, steps=3, loader_workers=1)
    record = run_config(config)
    assert record.status == "ok", record.reason
    assert record.data == str(root)
    assert child_pids() == []


_TICKS = os.sysconf("SC_CLK_TCK")


def _started_at(pid: int) -> float:
    """When process `pid` started, on CLOCK_BOOTTIME (/proc/PID/stat's starttime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19]) / _TICKS


@pytest.mark.timeout(180)
def test_a_hanging_rank_is_stopped_at_the_timeout_naming_the_ranks(tiny_workload, child_pids):
    """A rank frozen by SIGSTOP hangs its peer in the all-reduce: the launcher's deadline ends
    both, kills them and records the error."""
    config = Config("ddp", tiny_workload, 8, CPU2, warmup=1, steps=10_000,
                    timeout_s=4)  # the deadline counts from when both ranks are started
    result = {}
    worker = threading.Thread(target=lambda: result.update(record=run_config(config)))
    started = time.monotonic()
    worker.start()
    deadline = started + 120
    while len(ranks := child_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(ranks) == 2, "the ranks never started"
    last_started = max(_started_at(rank) for rank in ranks)
    # Frozen once both are at their rendezvous (each holds a TCP socket; 10,000 steps: both
    # are still running at the deadline in any case).
    while not all(holds_tcp_socket(rank) for rank in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(max(ranks), signal.SIGSTOP)
    worker.join(timeout=120)  # generous: the deadline's kill, not its timing, is checked
    assert not worker.is_alive()
    assert result["record"].status == "error"
    reason = result["record"].reason
    if "DistStoreError" in reason:
        # Frozen before it had written its rendezvous key: rank 0's own wait, bounded by the
        # same timeout, ended first and names it.
        assert "wait timeout after 4000ms" in reason
    else:
        # Never before the timeout, which counts from when both ranks are started; how long
        # after it a loaded machine takes to end them is not bounded here (a tick: /proc's).
        assert time.clock_gettime(time.CLOCK_BOOTTIME) - last_started >= 4 - 2 / _TICKS
        assert "timed out after 4 s; ranks still running: [0, 1]" in reason
    assert child_pids() == []


@pytest.mark.parametrize("backend, device, bound", [
    ("nccl", "cuda:1", "cuda:1"),  # a GPU of its own: NCCL bound to it at once
    ("gloo", "cuda:0", None),  # ranks sharing a GPU run gloo: nothing to bind
    ("gloo", "cpu", None),
    (None, "cpu", None),
])
def test_a_rank_binds_its_process_group_to_its_gpu_under_nccl_only(backend, device, bound):
    import torch

    from parbench.launch.spawn import group_device

    found = group_device(backend, torch.device(device))
    assert found == (torch.device(bound) if bound else None)
