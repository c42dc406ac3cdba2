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

from parbench import strategies
from parbench.strategies import StrategyError
from tests.support import one_rank

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[3]
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
    assert _plan("ddp", 12, (CPU,) * 3, tiny_workload).reference_micro_batch == 4
    assert _plan("ddp", 12, (CPU,) * 3, tiny_workload, world_size=2).reference_micro_batch == 6
    assert _plan("ddp", 12, (GPU0, GPU1), tiny_workload,
                 sync_batchnorm=True).reference_micro_batch is None
    assert _plan("single", 12, (CPU,), tiny_workload).reference_micro_batch is None


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
    from parbench.strategies.nn_data_parallel import AutocastForward

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
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))
    with one_rank():
        fsdp = strategies.create(_plan("fsdp", 4, (CPU,), tiny_workload))
        fsdp.setup()
        assert fsdp._mesh.device_type == "cpu"
        images, labels = tiny_workload.make_batch(4, CPU)
        assert torch.isfinite(fsdp.train_step(images, labels))
        assert {p.device.type for p in fsdp.model.parameters()} == {"cpu"}
        fsdp.close()


GATHER = """
import sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from parbench.strategies.fsdp import gathered_through_cpu

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


@pytest.mark.parametrize("options, on", [
    ({}, True), ({"gradient_as_bucket_view": False, "static_graph": False}, False)])
def test_ddp_is_set_up_as_practitioners_set_it_and_each_setting_turns_off(options, on,
                                                                          tiny_workload):
    with one_rank():
        ddp = strategies.create(_plan("ddp", 4, (CPU,), tiny_workload, **options))
        ddp.setup()
        assert ddp._wrapped.static_graph is on
        assert ddp._wrapped.gradient_as_bucket_view is on
        # Gradients as views into the buckets: no second copy of them.
        assert (ddp.buffer_bytes() is None) is on
        ddp.close()


def test_ddps_own_times_are_its_measured_iterations_never_the_warm_ups(tiny_workload):
    """DDP logs an iteration's times at the next forward, labelled with the next one's number,
    and keeps running averages over every one it sampled, warm-up included: the record's are
    the means of the measured iterations' own."""
    images, labels = tiny_workload.make_batch(4, CPU)
    with one_rank():
        ddp = strategies.create(_plan("ddp", 4, (CPU,), tiny_workload))
        ddp.setup()
        logged = []
        for step in range(5):  # two warm-up steps, then three measured
            ddp.train_step(images, labels)
            logged.append(ddp._wrapped._get_ddp_logging_data())
            ddp.after_step(measured=step >= 2)
        assert [data["iteration"] for data in logged] == [0, 1, 2, 3, 4]
        # After step k, the times of step k-1: steps 2 and 3 (measured) were logged after
        # steps 3 and 4; step 4's would be by a later forward.
        sampled = logged[3:]
        times = ddp.communication()
        for key, field in (("forward_compute_time", "ddp_forward_time_s"),
                           ("backward_compute_time", "ddp_backward_compute_time_s"),
                           ("backward_comm_time", "ddp_backward_comm_time_s"),
                           ("backward_compute_comm_overlap_time", "ddp_overlap_time_s")):
            assert times[field] == pytest.approx(sum(d[key] for d in sampled) / 2 / 1e9)
        # The compute-only steps (no_sync, after synchronised ones, as static_graph needs)
        # are no iteration of DDP's.
        with ddp.without_communication():
            ddp.train_step(images, labels)
        assert ddp._iterations == 5
        ddp.close()
        # Measured steps DDP logged none of: no times, rather than the warm-up's.
        ddp = strategies.create(_plan("ddp", 4, (CPU,), tiny_workload))
        ddp.setup()
        for step in range(3):
            ddp.train_step(images, labels)
            ddp.after_step(measured=step >= 2)
        assert ddp.communication()["ddp_forward_time_s"] is None
        ddp.close()


def _fsdp_on_one_rank(workload, **options):
    fsdp = strategies.create(_plan("fsdp", 4, (CPU,), workload, **options))
    fsdp.setup()
    return fsdp


@pytest.mark.parametrize("options, units, resharded", [
    ({}, ["layer1", "layer2", "layer3", "layer4"], [True, True, True, False]),
    ({"reshard_after_forward": "yes"}, ["layer1", "layer2", "layer3", "layer4"], [True] * 4),
    ({"fsdp_units": "block"}, [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)],
     [True] * 7 + [False]),
    ({"fsdp_units": "block", "reshard_after_forward": "no"},
     [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)], [False] * 8),
])
def test_fsdp_shards_a_resnet_by_layer_groups_and_keeps_the_last_gathered(
        options, units, resharded, tiny_workload):
    """torchtitan's choice by default: a few layer-group units, every one resharded after
    forward but the last of the forward (backward needs it at once), the root (stem and head)
    kept gathered; all-gathers counted per unit, twice where it reshards, else once."""
    with one_rank():
        fsdp = _fsdp_on_one_rank(tiny_workload, **options)
        names = {module: name for name, module in fsdp.model.named_modules()}
        *made, root = fsdp._units
        assert [names[unit.modules[0]] for unit in made] == units
        assert [unit.reshard for unit in made] == resharded
        assert root.modules == (fsdp.model,) and not root.reshard
        parameters = {name: p.numel() for name, p in tiny_workload.build_model()
                      .named_parameters()}
        gathered = sum(n * (2 if any(name.startswith(unit + ".") and flag
                                     for unit, flag in zip(units, resharded, strict=True))
                            else 1) for name, n in parameters.items())
        assert fsdp.communication() == dict(allreduce_bytes=4 * sum(parameters.values()),
                                            allgather_bytes=4 * gathered)
        fsdp.close()


def test_fsdp_gathers_bf16_parameters_and_reduces_in_fp32_by_default_under_bf16(
        tiny_workload):
    """MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), as torchtitan's, on by
    default in bf16 (`--mixed-precision off` turns it off); BatchNorm in fp32 units, one per
    layer group and the root's (the stem's)."""
    bf16 = replace(tiny_workload, precision="bf16")
    images, labels = bf16.make_batch(4, CPU)
    for options, policy in (({}, True), ({"mixed_precision": False}, False)):
        with one_rank():
            fsdp = _fsdp_on_one_rank(bf16, **options)
            seen: dict = {}

            def weight_dtype(module, args, seen=seen) -> None:  # as the module computes
                seen.setdefault(module, module.weight.dtype)

            conv, norm = fsdp.model.layer1[0].conv1, fsdp.model.layer1[0].bn1
            for module in (conv, norm):
                module.register_forward_pre_hook(weight_dtype)
            assert torch.isfinite(fsdp.train_step(images, labels))
            assert seen[conv] == (torch.bfloat16 if policy else torch.float32)
            assert seen[norm] == torch.float32
            float32 = [unit for unit in fsdp._units if unit.float32]
            assert len(float32) == (5 if policy else 0)
            if policy:
                states = [unit.handle._get_fsdp_state() for unit in fsdp._units]
                assert {s._mp_policy.reduce_dtype for s in states} == {torch.float32}
            fsdp.close()


def test_fsdp_shards_a_vit_block_by_block_and_its_groups_as_runs_of_layers(tiny_workload):
    """ViT's default is each encoder layer a unit, as torchtitan shards each transformer
    block; its groups are the encoder in four runs of consecutive layers."""
    from parbench.families import family_of

    vit = replace(tiny_workload, model="vit_b_16")
    assert _plan("fsdp", 4, (CPU,), vit).options.fsdp_units == "block"
    assert _plan("fsdp", 4, (CPU,), tiny_workload).options.fsdp_units == "group"
    model = vit.build_model()
    groups = family_of("vit_b_16").layer_groups(model)
    assert [[list(model.encoder.layers).index(layer) for layer in group]
            for group in groups] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_hsdps_mesh_is_made_of_groups_on_the_ranks_own_backend():
    """Ranks that share a GPU run gloo: their mesh's groups must be gloo too, never the
    device type's default (NCCL for CUDA, which refuses two ranks on one GPU)."""
    import torch.distributed as dist

    from parbench.strategies.fsdp import mesh_of_groups

    with one_rank():
        for device_type in ("cpu", "cuda"):
            mesh = mesh_of_groups(device_type, (1, 1), ("replicate", "shard"))
            assert mesh.device_type == device_type and mesh.mesh.tolist() == [[0]]
            assert [dist.get_backend(mesh.get_group(name))
                    for name in ("replicate", "shard")] == ["gloo", "gloo"]
