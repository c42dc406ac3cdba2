"""Tensor parallelism's plans and refusals (one step of each against single, and a record of
each: the conformance test, slow tier)."""

import re
from dataclasses import replace

import pytest
import torch

from parbench import strategies
from parbench.families.workloads import Workload

CPU = torch.device("cpu")
VIT = Workload(model="vit_b_16", image_size=16, num_classes=10)


def _plan(name, workload=VIT, devices=4, batch=8, **options):
    return strategies.plan(name, workload, batch, (CPU,) * devices, options)


def test_tp_splits_over_every_rank_and_fsdp_tp_over_two_by_default():
    assert _plan("tp").options.mesh_shape(4) == (1, 4)
    plan = _plan("fsdp-tp")
    assert (plan.options.world_size, plan.options.tp_size) == (None, 2)  # None: every device
    assert plan.options.mesh_shape(4) == (2, 2)
    assert plan.options.given() == {"tp_size": 2}  # what its label shows: fsdp-tp (tp=2)
    assert _plan("fsdp-tp", devices=6, tp_size=3).options.mesh_shape(6) == (2, 3)
    assert [strategies.layout_of(name) for name in ("tp", "fsdp-tp")] == [
        strategies.Layout.TENSOR_PARALLEL, strategies.Layout.SHARDED_TENSOR_PARALLEL]


def test_a_resnet_is_refused_with_the_reason(tiny_workload):
    for name in ("tp", "fsdp-tp"):
        with pytest.raises(strategies.WorkloadRefused, match="a ResNet is convolutions"):
            _plan(name, tiny_workload)


@pytest.mark.parametrize(("name", "devices", "options", "message"), [
    ("tp", 8, {}, "8 tensor-parallel ranks do not divide vit_b_16's 12 attention heads; "
                  "give --world-size 2 or --world-size 3 or --world-size 4 or --world-size 6"),
    ("fsdp-tp", 8, {"tp_size": 8}, "8 tensor-parallel ranks do not divide vit_b_16's 12 "
                                   "attention heads; give --tp-size 2 on a multiple of 4 "
                                   "devices or --tp-size 3 on a multiple of 6 devices or "
                                   "--tp-size 4 on a multiple of 8 devices"),
    ("tp", 4, {"tp_size": 2}, "tp splits each layer over all its 4 ranks, not --tp-size 2"),
    ("fsdp-tp", 2, {}, "2 ranks as 1 x 2 (fsdp x tp): fsdp-tp needs at least 2 of each"),
    ("fsdp-tp", 6, {"tp_size": 4}, "6 ranks as 1 x 4"),
    ("fsdp-tp", 4, {"tp_size": 2, "batch": 9}, "batch 9 does not divide over 2 data-parallel"),
])
def test_a_mesh_that_does_not_fit_is_refused_with_the_numbers(name, devices, options, message):
    batch = options.pop("batch", 8)
    with pytest.raises(strategies.StrategyError, match=re.escape(message)):
        _plan(name, devices=devices, batch=batch, **options)


def test_fp16_is_refused_and_bf16_rounds_elsewhere_than_single():
    with pytest.raises(strategies.WorkloadRefused, match="no fp16 loss scale"):
        _plan("tp", replace(VIT, precision="fp16"))
    cls = strategies.lookup("tp").cls
    assert cls.verify_rounds_elsewhere(_plan("tp", replace(VIT, precision="bf16")))
    assert not cls.verify_rounds_elsewhere(_plan("tp"))


def test_the_scaling_sweep_leaves_tensor_parallelism_out():
    from parbench.plan import suite

    assert "tp" not in suite.scaled_strategies() and "ddp" in suite.scaled_strategies()
