"""Fully sharded data parallel (FSDP2, `fully_shard`): parameters, gradients and optimiser
state sharded over ranks, each residual block gathered only while it runs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from strategies.options import option
from strategies.partition import resnet_blocks
from strategies.rank_parallel import RankDataParallel, ReplicaOptions

__all__ = ["FSDP", "FSDPOptions"]


@dataclass(frozen=True)
class FSDPOptions(ReplicaOptions):
    """fully_shard's own setting."""

    reshard_after_forward: str | None = option(choices=("yes", "no"), label="reshard", help=(
        "free each block's gathered parameters after its forward and gather them again for "
        "backward (yes, FSDP2's default: less memory), or keep them until backward (no: one "
        "all-gather per block per step)"))


class FSDP(RankDataParallel):
    """One process per device; each residual block is its own FSDP unit, then the whole model
    (stem and head), so at most one block's parameters are gathered at a time (unless
    `reshard_after_forward` is "no")."""

    summary = "one process per device, fully_shard (FSDP2) per residual block"
    Options = FSDPOptions

    fp16_refusal = ("fp16 loss scaling is not coordinated across shards here; use "
                    "--precision bf16 or fp32")

    def wrap(self, model: nn.Module) -> nn.Module:
        # layerN.M: a residual block, not the stem or the head (the root unit holds those).
        reshard = self.options.reshard_after_forward != "no"
        units = [fully_shard(block, reshard_after_forward=reshard)
                 for name, block in resnet_blocks(model) if "." in name]
        units.append(fully_shard(model))
        if dist.get_backend() == "gloo":
            # torch 2.8's gloo reduce-scatter silently sums for ReduceOp.AVG (pytorch#162338),
            # giving N times the gradient: reduce by SUM and let FSDP divide, as gloo's own
            # AVG does where it works (verify catches the difference).
            for unit in units:
                unit.set_force_sum_reduction_for_comms(True)
        self._units = units
        return units[-1]

    @contextlib.contextmanager
    def without_communication(self):
        """FSDP2's equivalent of DDP's no_sync, and more: gradients are not reduce-scattered,
        and parameters stay gathered after the first step, so later steps all-gather nothing
        either: forward and backward as a DDP replica's. The sharded parameters then get no
        gradient, so the optimiser step updates nothing: fsdp's compute time leaves out the
        update."""
        root = self._units[-1]
        root.set_requires_gradient_sync(False)
        root.set_reshard_after_forward(False)
        root.set_reshard_after_backward(False)
        try:
            yield
        finally:
            root.set_requires_gradient_sync(True)
            root.set_reshard_after_backward(True)
            reshard = self.options.reshard_after_forward != "no"
            for block in self._units[:-1]:  # the root stays gathered after forward, as it was
                block.set_reshard_after_forward(reshard, recurse=False)
            for unit in self._units:
                unit.reshard()

    def communication(self) -> dict[str, float | int | None]:
        """Bytes per step counted from the model's FSDP units: the whole gradient is
        reduce-scattered (`allreduce_bytes`, the payload an all-reduce of it would carry);
        each block's parameters are all-gathered for forward and again for backward (once
        where they are not resharded after forward), the root's (stem and head) once, as
        FSDP2 keeps the root gathered between the two."""
        def nbytes(module: nn.Module) -> int:
            return sum(p.numel() * p.element_size() for p in module.parameters())

        root, blocks = self._units[-1], self._units[:-1]
        block_bytes = sum(nbytes(block) for block in blocks)
        gathers = 1 if self.options.reshard_after_forward == "no" else 2
        return dict(allreduce_bytes=nbytes(root),
                    allgather_bytes=gathers * block_bytes + (nbytes(root) - block_bytes))

    def trained_parameters(self):
        full = [parameter.full_tensor() for parameter in self.model.parameters()]  # collective
        return full if self.rank == 0 else []
