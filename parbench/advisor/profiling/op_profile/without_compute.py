"""A training step's operations counted without computing them: each operation's FLOPs, bytes
read and written, dtype and calls, by the op counter the profiles count with, on tensors that
have no storage (meta tensors under FakeTensorMode, which present themselves as CPU tensors, so
that CPU autocast casts them as it casts real ones). ResNet-50 at 224 px and 256 images counts
in seconds on a CPU."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from parbench.advisor.profiling.op_profile.counting import CountedOp
from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.advisor.profiling.op_profile.labels import StepLabels
from parbench.advisor.profiling.op_profile.measure import WARMUP_STEPS, Training, counted_step
from parbench.families.workloads import Workload

__all__ = ["count_step", "counted_rows"]


def count_step(workload: Workload, micro_batch: int) -> list[CountedOp]:
    """Every operation of one training step of `workload` at `micro_batch` images, as a CPU
    runs them (its operators, autocast's casts, fp16's gradient scaling), after as many
    warm-up steps as a measured profile takes first, none of it computed.

    The model is built on the CPU (its weights drawn: a ViT's truncated normal reads its own
    values), then each parameter and buffer is replaced by one without storage. Where they
    differ from a CPU's counts: a meta kernel's outputs, where it keeps batch norm's saved
    statistics in the input's dtype (the CPU's in fp32: a few hundred bytes a call under
    autocast), and fp16's scaler, which does not read back whether a gradient overflowed (there
    is no value to read) and steps the optimiser as when none did."""
    model = workload.build_model_on("cpu")
    with FakeTensorMode() as mode:
        _drop_storage(model, mode)
        training = Training(workload, micro_batch, torch.device("cpu"), model=model)
        if training.scaler.is_enabled():
            training.scaler = _ScalerWithoutReadBack("cpu", init_scale=workload.initial_loss_scale)
        for _ in range(WARMUP_STEPS):
            training.step()
        labels = StepLabels(training.blocks)
        try:
            return counted_step(training, labels)
        finally:
            labels.remove()


def counted_rows(ops: Iterable[CountedOp]) -> list[OpRow]:
    """The calls grouped as a profile's rows are (block, phase, operator, input shapes, dtype),
    each with its calls, FLOPs and bytes summed, in the order they first ran; no time."""
    rows: dict[tuple, OpRow] = {}
    for op in ops:
        key = (op.block, op.phase, op.name, op.input_shapes, op.dtype)
        row = rows.get(key)
        rows[key] = OpRow(op.block, op.phase, op.name, op.input_shapes, op.dtype,
                          (row.count if row else 0) + 1, (row.flops if row else 0) + op.flops,
                          (row.bytes_read if row else 0) + op.bytes_read,
                          (row.bytes_written if row else 0) + op.bytes_written, 0.0, 0.0)
    return list(rows.values())


def _drop_storage(model: nn.Module, mode: FakeTensorMode) -> None:
    """Each parameter and buffer of `model` replaced by a tensor of its shape, dtype, strides
    and device without storage. Set in each module's own table: Module.to would swap them in
    place, which the fake mode's references to them forbid."""
    fakes: dict[int, torch.Tensor] = {}  # a tensor shared by two modules stays one
    for module in model.modules():
        tables: tuple[dict, dict] = (module._parameters, module._buffers)
        for table in tables:
            for name, tensor in table.items():
                if tensor is None:
                    continue
                if id(tensor) not in fakes:
                    fake: torch.Tensor = mode.from_tensor(tensor)
                    if isinstance(tensor, nn.Parameter):
                        fake = nn.Parameter(fake, requires_grad=tensor.requires_grad)
                    fakes[id(tensor)] = fake
                table[name] = fakes[id(tensor)]


class _ScalerWithoutReadBack(torch.amp.GradScaler):
    """fp16's gradient scaler stepping the optimiser as when no gradient overflowed, without
    reading back whether one did (`.item()`, a value a tensor without storage does not have)."""

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)
