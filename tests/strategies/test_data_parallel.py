"""Data-parallel strategies' rules: where they run, how the batch divides, what they equal."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import strategies
from strategies import StrategyError

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
GPU0, GPU1 = torch.device("cuda:0"), torch.device("cuda:1")


def test_data_parallel_needs_distinct_gpus():
    reason = strategies.lookup("data-parallel").cls.unavailable_reason
    assert "CUDA devices only" in reason((CPU, CPU))
    assert "distinct GPUs" in reason((GPU0, GPU0))
    assert reason((GPU0, GPU1)) is None


def _plan(name, batch, devices, workload, **options):
    return strategies.plan(name, workload, batch, devices, options)


@pytest.mark.parametrize("name", ["ddp", "fsdp", "data-parallel"])
def test_the_global_batch_must_divide_over_the_replicas(name, tiny_workload):
    gpus = (GPU0, GPU1, torch.device("cuda:2"))  # data-parallel runs on distinct GPUs only
    _plan(name, 12, gpus, tiny_workload)
    _plan(name, 10, gpus, tiny_workload, world_size=2)  # the first 2 devices
    with pytest.raises(StrategyError, match="batch 10 does not divide over 3 replicas; use a "
                                            "multiple of 3, e.g. --batch-size 9 or 12"):
        _plan(name, 10, gpus, tiny_workload)


def test_world_size_takes_the_first_devices_and_needs_enough(tiny_workload):
    assert _plan("ddp", 12, (CPU,) * 3, tiny_workload, world_size=2).devices == (CPU, CPU)
    assert _plan("ddp", 12, (CPU,) * 3, tiny_workload).devices == (CPU,) * 3
    with pytest.raises(StrategyError, match="world size 4 needs at least 4 devices, got 3"):
        _plan("ddp", 12, (CPU,) * 3, tiny_workload, world_size=4)


def test_the_exact_reference_accumulates_over_the_replicas_shards(tiny_workload):
    assert _plan("ddp", 12, (CPU,) * 3, tiny_workload).reference_split == 4
    assert _plan("ddp", 12, (CPU,) * 3, tiny_workload, world_size=2).reference_split == 6
    assert _plan("ddp", 12, (GPU0, GPU1), tiny_workload,
                 sync_batchnorm=True).reference_split is None
    assert _plan("single", 12, (CPU,), tiny_workload).reference_split is None


@pytest.mark.parametrize("options, message", [
    ({"sync_batchnorm": True}, "SyncBatchNorm runs on CUDA devices only"),
    ({"bucket_cap_mb": 0}, "--bucket-cap-mb must be above 0, got 0"),
])
def test_ddp_refuses_options_it_cannot_honour(options, message, tiny_workload):
    with pytest.raises(StrategyError, match=message):
        _plan("ddp", 4, (CPU, CPU), tiny_workload, **options)


def test_fsdp_takes_fp16_and_its_mixed_precision_policy_needs_a_lower_precision(tiny_workload):
    _plan("fsdp", 4, (CPU, CPU), replace(tiny_workload, precision="fp16"))
    with pytest.raises(StrategyError, match="give --precision bf16 or fp16"):
        _plan("fsdp", 4, (CPU, CPU), tiny_workload, mixed_precision=True)


def _forward_dtype_in_a_replica_thread(module, images) -> torch.dtype:
    """The dtype `module` computes in, run as torch's parallel_apply runs a DataParallel
    replica: in a thread of its own that enters autocast again without a dtype."""
    seen = []

    def replica():
        with torch.amp.autocast("cpu", enabled=True):  # parallel_apply's re-entry
            seen.append(module(images).dtype)

    thread = threading.Thread(target=replica)
    thread.start()
    thread.join()
    return seen[0]


def test_data_parallel_replicas_compute_in_the_precision_asked(tiny_workload):
    """A replica thread's autocast falls back to the device's default dtype (bf16 on CPU,
    fp16 on CUDA): the replicated module enters the workload's own."""
    from strategies.data_parallel import AutocastForward

    workload = replace(tiny_workload, precision="fp16")  # not the default here, as bf16 on CUDA
    model = workload.build_model_on(CPU)
    images, _ = workload.make_batch(2, CPU)
    assert _forward_dtype_in_a_replica_thread(model, images) == torch.bfloat16  # the bug
    assert _forward_dtype_in_a_replica_thread(AutocastForward(model, workload),
                                              images) == torch.float16
    fp32 = AutocastForward(model, replace(tiny_workload, precision="fp32"))
    assert fp32(images).dtype == torch.float32


def test_fsdp_on_cpu_stays_on_cpu_where_the_default_accelerator_is_a_gpu(tiny_workload,
                                                                           monkeypatch):
    """On a GPU host fully_shard, given no mesh, builds one on the default accelerator: CPU
    ranks would then train on CUDA. One rank here, with CUDA made the default accelerator."""
    import torch.distributed as dist

    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fsdp = strategies.create(_plan("fsdp", 4, (CPU,), tiny_workload))
        fsdp.setup()
        assert fsdp._mesh.device_type == "cpu"
        images, labels = tiny_workload.make_batch(4, CPU)
        assert torch.isfinite(fsdp.train_step(images, labels))
        assert {p.device.type for p in fsdp.model.parameters()} == {"cpu"}
        fsdp.close()
    finally:
        dist.destroy_process_group()


GATHER = """
import sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from strategies.fsdp import gathered_through_cpu

def rank_main(rank, world, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    # dim 0 of 5, 1 and 3 over 3 ranks: uneven shards, and empty ones on the last ranks
    model = nn.Sequential(nn.Linear(7, 5), nn.Linear(5, 1), nn.Conv2d(1, 3, 3))
    fully_shard(model, mesh=DeviceMesh.from_group(dist.group.WORLD, "cpu"))
    parameters = list(model.parameters())
    full = [p.full_tensor() for p in parameters]
    gathered = gathered_through_cpu(parameters, rank)
    if rank == 0:
        assert [g.shape for g in gathered] == [f.shape for f in full]
        assert all(torch.equal(g, f) for g, f in zip(gathered, full))
        print("gathered", [tuple(g.shape) for g in gathered])
    else:
        assert gathered == []
    dist.destroy_process_group()

if __name__ == "__main__":
    # forked: the ranks share this interpreter's torch instead of importing it three times
    mp.start_processes(rank_main, args=(3, sys.argv[1]), nprocs=3, start_method="fork")
"""


def test_fsdp_gathers_uneven_shards_through_cpu_as_full_tensor_does(tmp_path):
    """Ranks sharing a GPU gather the trained parameters as CPU shards (full_tensor's CUDA
    all-gather over gloo killed rank 0 on an H200): on CPU both gathers must agree, for
    shards of unequal length and empty ones."""
    script = tmp_path / "gather.py"
    script.write_text(GATHER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "store")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the ranks too, should it have hung
    assert process.returncode == 0, out
    assert "gathered [(5, 7), (5,), (1, 5), (1,), (3, 1, 3, 3), (3,)]" in out
