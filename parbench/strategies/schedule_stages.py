"""The modules a pipelining schedule runs on each rank: a stage under the workload's autocast,
exchanging contiguous tensors, and a PipelineStage that exchanges nothing with its own rank."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage

__all__ = ["AutocastStage", "ContiguousGradient", "ScheduleStage"]


class ContiguousGradient(torch.autograd.Function):
    """Identity whose gradient is made contiguous: the gradient a stage sends back for its
    input must be, for gloo (a compiled or channels_last stage may produce another layout)."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.view_as(inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class AutocastStage(nn.Module):
    """Runs a stage's forward under the workload's autocast (per thread, and the schedule
    calls forward itself), exchanging contiguous tensors."""

    def __init__(self, module: nn.Module, device: torch.device, workload) -> None:
        super().__init__()
        self.module = module
        self._device = device
        self._workload = workload

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.requires_grad:
            inputs = ContiguousGradient.apply(inputs)
        with self._workload.autocast(self._device):
            # gloo sends contiguous tensors only, and a compiled or channels_last stage may
            # return another layout (a no-op where the output is contiguous already).
            return self.module(inputs).contiguous()


class ScheduleStage(PipelineStage):
    """A PipelineStage whose warm-up exchanges nothing with its own rank. In torch 2.11 a
    schedule's first step sends a dummy tensor to each neighbouring stage, also to one on the
    same rank (the V layouts: rank K-1 holds stages K-1 and K), and gloo has no pair to itself
    ("Pair is not connected"); torch 2.14 leaves such neighbours out itself, and every release
    passes their activations and gradients locally."""

    def _get_init_p2p_neighbors_ops(self) -> list[dist.P2POp]:
        return [op for op in super()._get_init_p2p_neighbors_ops()
                if getattr(op, "group_peer", op.peer) != self.group_rank]
