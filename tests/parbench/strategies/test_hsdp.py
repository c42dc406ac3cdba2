"""hsdp: FSDP2 over a (replicate x shard) mesh; its shape refusals, its record's communication
split on 4 emulated CPU devices, and its CPU gather (its step against the baseline's:
test_conformance.py, on 4 devices)."""

import types

import pytest
import torch

from parbench import strategies
from parbench.drive.runner import run_config
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config
from parbench.strategies.fsdp import gathered_through_cpu

CPU4 = parse_devices("cpu,cpu,cpu,cpu")


def _plan(devices: int, workload, **options):
    return strategies.plan("hsdp", workload, 16, (torch.device("cpu"),) * devices, options)


def test_the_mesh_is_two_replicas_by_default_and_each_dimension_needs_two_ranks(tiny_workload):
    assert _plan(4, tiny_workload).options.mesh_shape(4) == (2, 2)
    assert _plan(8, tiny_workload).options.mesh_shape(8) == (2, 4)
    assert _plan(8, tiny_workload, shard_size=2).options.mesh_shape(8) == (4, 2)
    with pytest.raises(strategies.StrategyError, match="--shard-size 3 does not divide 4 ranks; "
                                                       "give --shard-size 2"):
        _plan(4, tiny_workload, shard_size=3)
    with pytest.raises(strategies.StrategyError, match="8 ranks as 1 replica.s. of 8 shard.s.: "
                       "HSDP needs at least 2 of each; give --shard-size 2 or --shard-size 4"):
        _plan(8, tiny_workload, shard_size=8)
    with pytest.raises(strategies.StrategyError, match="needs at least 4 devices, got 2"):
        _plan(2, tiny_workload)


@pytest.mark.slow  # hsdp measured end to end on 4 ranks, 10 s of two cores
@pytest.mark.timeout(240)
def test_its_record_splits_the_step_into_compute_and_communication(tiny_workload, child_pids):
    record = run_config(Config("hsdp", tiny_workload, 8, CPU4, warmup=1, steps=1))
    assert record.status == "ok", record.reason
    assert record.world_size == 4
    assert record.strategy_options == {"fsdp_units": "group", "shard_size": 2}
    assert len(record.peak_memory_mib) == 4 and len(record.compute_step_times_s) == 1
    assert record.exposed_comm_time_s == pytest.approx(
        record.step_time_median_s - record.compute_time_s)
    # Counted as fsdp counts them: the whole fp32 gradient reduced (within a group, then
    # across the groups), each layer group's parameters gathered for forward and for
    # backward, but the last's (layer4's, most of them) and the root's, gathered once.
    parameters = sum(p.numel() for p in tiny_workload.build_model().parameters())
    assert record.allreduce_bytes == 4 * parameters
    assert 4 * parameters < record.allgather_bytes < 2 * 4 * parameters
    assert child_pids() == []


def test_its_cpu_gather_takes_the_first_sharding_group(monkeypatch):
    """Ranks sharing a GPU gather as CPU shards (fsdp's gathered_through_cpu; its real
    all-gather is checked against full_tensor() in test_data_parallel.py): on a 2 x 2 mesh
    ranks 0 and 1 shard the first replica and ranks 2 and 3 hold the same shards again, so the
    parameter is the first group's shards in rank order."""
    weight = torch.arange(10.0).view(5, 2)
    shards = [weight[:3], weight[3:], weight[:3], weight[3:]]  # Shard(0): torch.chunk's sizes

    def gather_object(mine, everyone, dst):  # what rank 0 receives; the others, nothing
        if everyone is not None:
            everyone[:] = [[shard] for shard in shards]

    monkeypatch.setattr(torch.distributed, "gather_object", gather_object)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 4)
    local = types.SimpleNamespace(to_local=lambda: shards[0])
    [gathered] = gathered_through_cpu([local], rank=0, group_size=2)
    assert torch.equal(gathered, weight)
    assert gathered_through_cpu([local], rank=1, group_size=2) == []
