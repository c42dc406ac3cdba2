"""A step's operations counted without computing them are the ones a CPU counts as it runs the
same small workload: exactly in fp32, and under autocast but for batch norm's saved statistics;
fp16's scaler steps as when nothing overflowed."""

import pytest
import torch

from parbench.advisor.profiling.op_profile.labels import StepLabels
from parbench.advisor.profiling.op_profile.measure import WARMUP_STEPS, Training, counted_step
from parbench.advisor.profiling.op_profile.without_compute import count_step, counted_rows
from parbench.families.workloads import Workload

RESNET = Workload(model="resnet18", image_size=32)


def _counted_on_cpu(workload: Workload) -> list:
    """As measure_ops counts a step, on one thread (two contend on a loaded 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        training = Training(workload, 2, torch.device("cpu"))
        for _ in range(WARMUP_STEPS):
            training.step()
        labels = StepLabels(training.blocks)
        try:
            return counted_step(training, labels)
        finally:
            labels.remove()
    finally:
        torch.set_num_threads(threads)


def _what(op) -> tuple:
    """An operation but for its bytes."""
    return op.block, op.phase, op.name, op.input_shapes, op.dtype, op.flops


def test_an_fp32_step_counts_the_same_without_compute():
    counted = count_step(RESNET, 2)
    assert counted == _counted_on_cpu(RESNET)
    rows = counted_rows(counted)
    assert sum(row.count for row in rows) == len(counted) > len(rows)
    assert sum(row.flops for row in rows) == sum(op.flops for op in counted) > 0
    assert {row.phase for row in rows} == {"forward", "backward", "optimizer"}


def test_under_autocast_only_batch_norms_saved_statistics_differ():
    workload = Workload(model="resnet18", image_size=32, precision="bf16")
    counted, on_cpu = count_step(workload, 2), _counted_on_cpu(workload)
    assert [_what(op) for op in counted] == [_what(op) for op in on_cpu]
    assert {"aten::_to_copy", "aten::convolution"} <= {op.name for op in counted}
    assert {op.name for op, cpu in zip(counted, on_cpu, strict=True) if op != cpu} \
        == {"aten::native_batch_norm", "aten::native_batch_norm_backward"}
    moved = sum(op.bytes_read + op.bytes_written for op in counted)
    assert moved == pytest.approx(sum(op.bytes_read + op.bytes_written for op in on_cpu),
                                  rel=1e-3)


def test_fp16s_scaler_steps_as_when_no_gradient_overflowed():
    # Without storage there is no overflow to read back: the optimiser steps, after unscaling.
    workload = Workload(model="resnet18", image_size=32, precision="fp16")
    names = [op.name for op in count_step(workload, 2) if op.phase == "optimizer"]
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in names
    assert "aten::_amp_update_scale_" in names
    assert names.count("aten::add_") >= len(list(workload.build_model().parameters()))
    assert "aten::_local_scalar_dense" not in names
