"""Data-parallel strategies' rules: where they run, how the batch divides, what they equal."""

from dataclasses import replace

import pytest
import torch

import strategies
from strategies import StrategyError

CPU = torch.device("cpu")
GPU0, GPU1 = torch.device("cuda:0"), torch.device("cuda:1")


def test_data_parallel_needs_distinct_gpus():
    reason = strategies.lookup("data-parallel").cls.unavailable_reason
    assert "CUDA devices only" in reason((CPU, CPU))
    assert "distinct GPUs" in reason((GPU0, GPU0))
    assert reason((GPU0, GPU1)) is None
    assert strategies.available((CPU, CPU))["data-parallel"] is not None


@pytest.mark.parametrize("name", ["ddp", "fsdp", "data-parallel"])
def test_the_global_batch_must_divide_over_the_replicas(name):
    cls = strategies.lookup(name).cls
    cls.check_config(12, (CPU,) * 3)
    cls.check_config(10, (CPU,) * 3, world_size=2)  # the first 2 devices
    with pytest.raises(StrategyError, match="batch 10 does not divide over 3 replicas; use a "
                                            "multiple of 3, e.g. --batch-size 9 or 12"):
        cls.check_config(10, (CPU,) * 3)


def test_world_size_takes_the_first_devices_and_needs_enough():
    cls = strategies.lookup("ddp").cls
    assert cls.select_devices((CPU,) * 3, world_size=2) == (CPU, CPU)
    assert cls.select_devices((CPU,) * 3) == (CPU,) * 3
    with pytest.raises(StrategyError, match="world size 4 needs at least 4 devices, got 3"):
        cls.select_devices((CPU,) * 3, world_size=4)


def test_the_exact_reference_accumulates_over_the_replicas_shards():
    ddp = strategies.lookup("ddp").cls
    assert ddp.equivalent_accumulation(12, (CPU,) * 3) == 4
    assert ddp.equivalent_accumulation(12, (CPU,) * 3, world_size=2) == 6
    assert ddp.equivalent_accumulation(12, (GPU0, GPU1), sync_batchnorm=True) is None
    assert strategies.lookup("single").cls.equivalent_accumulation(12, (CPU,)) is None


@pytest.mark.parametrize("options, message", [
    ({"sync_batchnorm": True}, "SyncBatchNorm runs on CUDA devices only"),
    ({"bucket_cap_mb": 0}, "bucket size must be above 0 MB"),
])
def test_ddp_refuses_options_it_cannot_honour(options, message):
    with pytest.raises(StrategyError, match=message):
        strategies.lookup("ddp").cls.check_config(4, (CPU, CPU), **options)


def test_fsdp_refuses_fp16(tiny_workload):
    with pytest.raises(StrategyError, match="use --precision bf16 or fp32"):
        strategies.create("fsdp", replace(tiny_workload, precision="fp16"), (CPU, CPU))
