"""Memory before running: each layout's per-rank peak by what holds it, the limit an emulated
device runs out at, and each configuration of a limited run called from its prediction."""

from dataclasses import replace

import pandas as pd
import pytest
import torch
from torch import nn

from parbench.advisor.models import data_parallel, models
from parbench.advisor.models.links import Link
from parbench.advisor.models.memory import RankMemory
from parbench.advisor.models.sharded_pipelines import sharded_pipelines
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.runs.memory_calls import as_planned, calls_summary, memory_calls
from parbench.drive.runner import run_config
from parbench.measure.tensors import DeviceLimit, TensorMemory
from parbench.plan.config import Config
from parbench.strategies.partition import Partition
from tests.support import CPU2

MIB = 2**20
FREE = Link("free", float("inf"))


def _profile(micro_batch: int = 2) -> Profile:
    """Four blocks of 1 MiB of parameters each (the stem and head 1 MiB too), each saving 2 MiB
    of activations a micro-batch of 2, in proportion to the micro-batch."""
    blocks = tuple(BlockProfile(name, 0.01, 0.01, 0.01, MIB, (MIB,), MIB * micro_batch)
                   for name in ("stem", "b1", "b2", "head"))
    return Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, micro_batch, 1, blocks)


def test_each_data_parallel_rank_holds_what_its_layout_keeps():
    profile = _profile()  # 4 MiB of parameters, 8 MiB saved a rank
    ddp = data_parallel.ddp(profile, 2, FREE)
    assert ddp.memory[0] == RankMemory(3 * 4 * MIB, 8 * MIB, bucket_bytes=4 * MIB)
    assert ddp.counted_memory_mib == (3 * 4 + 8 + 4,) * 2
    zero = data_parallel.ddp(profile, 4, FREE, zero=True)  # momentum over 4 ranks
    assert zero.counted_memory_mib[0] == (2 + 1 / 4) * 4 + 8 + 4
    fsdp = data_parallel.fsdp(profile, 4, FREE)
    # Sharded 4 ways; gathered at once: the root (stem, head) and two units, not counted.
    assert fsdp.counted_memory_mib[0] == 3 * 4 / 4 + 8
    assert fsdp.peak_memory_mib[0] == 3 * 4 / 4 + 8 + 2 + 2
    hsdp = data_parallel.hsdp(profile, 4, 2, FREE)  # sharded over 2, replicated twice
    assert hsdp.counted_memory_mib[0] == 3 * 4 / 2 + 8
    assert hsdp.global_batch == 8


def test_hsdp_adds_the_shards_all_reduce_across_replicas_to_fsdp_within_a_group():
    profile = _profile()
    link = Link("slow", 1.0)  # 1 GB/s: a collective costs in proportion to its bytes
    within = data_parallel.fsdp(profile, 2, link)
    hybrid = data_parallel.hsdp(profile, 4, 2, link)
    assert hybrid.step_time_s > within.step_time_s  # the same gathers, plus the all-reduces
    assert data_parallel.hsdp(profile, 4, 4, link).step_time_s == pytest.approx(
        data_parallel.fsdp(profile, 4, link).step_time_s)  # one group: fsdp itself


def test_each_pipeline_of_pipeline_fsdp_holds_its_stages_shard_and_its_schedules_activations():
    profile = _profile()
    cut = Partition(("stem", "b1", "b2", "head"), (0, 2), "time")
    one = models.pipeline("1f1b", profile, cut, 2, 4, FREE)
    both = sharded_pipelines(profile, cut, 2, 4, FREE)
    assert both.global_batch == 2 * one.global_batch and len(both.memory) == 4
    for rank, alone in zip(both.memory, one.memory * 2, strict=True):
        assert rank.state_bytes == alone.state_bytes / 2  # each stage sharded over 2 copies
        assert rank.activation_bytes == alone.activation_bytes
        assert rank.unsharded_bytes == 2 * 2 * MIB  # the stage and its gradient, in full
    assert both.step_time_s >= one.step_time_s
    slow = Link("slow", 1.0)  # 1 GB/s: each rank's stage gathered before, reduced after
    gathers = sharded_pipelines(profile, cut, 2, 4, slow).step_time_s \
        - models.pipeline("1f1b", profile, cut, 2, 4, slow).step_time_s
    assert gathers >= slow.collective_s("all_gather", 2 * MIB, 2) \
        + slow.collective_s("reduce_scatter", 2 * MIB, 2)


class _Blocks(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))


def _train_step(model: nn.Module, optimizer, counted: TensorMemory, batch: int) -> None:
    model(torch.randn(batch, 256)).square().sum().backward()
    optimizer.step()
    counted.after_step()


def test_a_device_runs_out_where_its_counted_tensors_exceed_its_memory():
    model = _Blocks()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = 3 * sum(p.nbytes for p in model.parameters())  # with gradients and momentum
    limit = DeviceLimit(int((state + 2 * MIB) / MIB) + 1, optimizer)
    counted = TensorMemory([model], limit)
    _train_step(model, optimizer, counted, 64)  # 64 x 256 floats saved a few times: fits
    with pytest.raises(torch.OutOfMemoryError, match="--device-memory-mib"):
        _train_step(model, optimizer, counted, 4096)  # 4 MiB a saved activation
    counted.close()


def test_a_limited_run_records_who_ran_out_and_ddp_counts_its_buckets(tiny_workload):
    # With the gradients copied into DDP's buckets (gradient_as_bucket_view off, torch's
    # default), which buffer_bytes reports.
    runs = {limit: run_config(Config("ddp", tiny_workload, 8, CPU2, warmup=1, steps=1,
                                     device_memory_mib=limit,
                                     options={"gradient_as_bucket_view": False}))
            for limit in (40, 400)}
    assert runs[40].status == "oom" and "device memory" in runs[40].reason
    fits = runs[400]
    assert fits.status == "ok" and fits.device_memory_mib == 400
    parameters = sum(p.nbytes for p in tiny_workload.build_model().parameters()) / MIB
    # Parameters, gradients, momentum and the buckets' copy, and the activations beside.
    assert 4 * parameters < fits.peak_memory_mib[0] < 4 * parameters + 20


def _profiles(record: dict):
    return lambda size: _profile(size)


def test_every_configuration_of_a_limited_run_is_called_before_it_ran():
    common = dict(model="resnet18", image_size=32, precision="fp32", device_kind="cpu",
                  devices="cpu,cpu", emulated=True, device_memory_mib=22.0, global_batch=4,
                  strategy_options={})
    records = pd.DataFrame([
        dict(common, strategy="single", status="ok", world_size=1, peak_memory_max_mib=20.0),
        # no cut recorded (as where it ran out before making one): the one its options plan
        dict(common, strategy="pipeline-1f1b", status="ok", world_size=2, split_size=2,
             strategy_options={"stages": 2, "balance": "time", "split_size": 2,
                               "schedule": "1f1b"}),
        dict(common, strategy="ddp", status="oom", world_size=2),
    ])
    calls = memory_calls(records, _profiles, FREE).set_index("strategy")
    # single: 12 MiB of state and 16 of activations at batch 4 (4 blocks of 4 MiB): called
    # out of memory, though it fitted (the profile's activations are made up here).
    assert calls.loc["single", "predicted_fullest_mib"] == 12 + 16
    assert calls.loc["single", "call"] == "out of memory"
    assert not calls.loc["single", "right"]
    assert calls.loc["ddp", "predicted_fullest_mib"] == 12 + 8 + 4
    assert calls.loc["ddp", "right"]
    planned = as_planned(records.iloc[1].to_dict(), _profile(2))
    assert planned["micro_batches"] == 2
    assert planned["partition"] == "stem..b1 | b2..head"
    # its first rank: 6 MiB of state, two micro-batches of 4 MiB in flight (1F1B's warm-up)
    assert calls.loc["pipeline-1f1b", "predicted_fullest_mib"] == 6 + 8
    assert calls.loc["pipeline-1f1b", "right"]
    summary = calls_summary(calls.reset_index())
    assert summary.startswith("2 of 3 calls right (1 ran out of memory, 2 fit")
    assert "single batch 4 (called out of memory, predicted 28 MiB of 22)" in summary
    unlimited = records.drop(columns="device_memory_mib")
    assert memory_calls(unlimited, _profiles, FREE).empty
    assert calls_summary(pd.DataFrame()) is None
    assert replace(RankMemory(0, 0), unsharded_bytes=MIB).peak_mib == 1


def _on_a_gpu(micro_batch: int) -> Profile:
    """_profile's blocks as a GPU's profile: 3 MiB of transients in a step, 2 MiB reserved
    beyond the allocator's peak, a context of 100 MiB."""
    return replace(_profile(micro_batch), device="cuda", transient_bytes=3 * MIB,
                   reserved_extra_bytes=2 * MIB, context_bytes=100 * MIB)


def test_a_gpu_holds_its_transients_reserve_and_context_beyond_the_counted_tensors():
    single = models.single(_on_a_gpu(4), 1)  # 12 MiB of state, 16 of activations
    assert single.counted_memory_mib == (28,)
    assert single.peak_memory_mib == (28 + 3,)  # what max_memory_allocated reads
    assert single.reserved_memory_mib == (28 + 3 + 2,)
    assert single.device_memory_mib == (28 + 3 + 2 + 100,)
    ddp = data_parallel.ddp(_on_a_gpu(2), 2, FREE)  # every rank holds its own
    assert ddp.device_memory_mib == (12 + 8 + 4 + 105,) * 2
    on_a_cpu = models.single(_profile(4), 1)  # none of these on a CPU
    assert on_a_cpu.device_memory_mib == on_a_cpu.peak_memory_mib == (28,)


def test_a_gpu_configuration_is_called_against_its_cap_or_its_memory_with_all_it_holds():
    common = dict(model="resnet18", image_size=32, precision="fp32", device_kind="cuda",
                  devices="cuda:0", emulated=False, global_batch=4, strategy_options={},
                  strategy="single", world_size=1)
    records = pd.DataFrame([
        # capped at 32 MiB: 28 counted fit, but the allocator reserves 33
        dict(common, status="oom", memory_cap_mib=32.0),
        # a card of 0.125 GiB (128 MiB): 133 MiB with the context do not fit it
        dict(common, status="oom", gpu_memory_gib="0.125;0.125"),
        dict(common, status="ok", gpu_memory_gib=0.25),
        dict(common, status="ok", gpu_memory_gib=float("nan")),  # no limit known: no call
        dict(common, status="ok", gpu_memory_gib=0.125, emulated=True),  # devices share it
    ])
    calls = memory_calls(records, lambda record: _on_a_gpu, FREE)
    assert calls["compared"].tolist() == ["reserved", "device", "device"]
    assert calls["limit_mib"].tolist() == [32, 128, 256]
    assert calls["predicted_fullest_mib"].tolist() == [33, 133, 133]
    assert calls["right"].all()


class _Chunked(nn.Module):
    """Saves views of its weight for backward, as attention saves its packed projection."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(96, 32))

    def forward(self, x):
        return sum(x @ part.t() for part in self.weight.chunk(3))


def test_views_of_a_parameter_gathered_after_counting_began_are_not_activations():
    """FSDP swaps in gathered parameters the count has never seen; views of them that an op
    saves are parameter memory, not activations (ViT's fsdp was counted 60 MiB high)."""
    module = _Chunked()
    counted = TensorMemory([module])
    module.weight = nn.Parameter(torch.randn(96, 32))  # as FSDP's unsharded parameter
    module(torch.randn(4, 32, requires_grad=True)).sum().backward()
    assert counted.saved_peak_bytes() == [4 * 32 * 4]  # the input alone, not 12 KiB of weight
    counted.close()
