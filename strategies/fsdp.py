"""Fully sharded data parallel (FSDP2, `fully_shard`): parameters, gradients and optimiser
state sharded over ranks, each residual block gathered only while it runs."""

from __future__ import annotations

import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from strategies.partition import resnet_blocks
from strategies.rank_parallel import RankDataParallel

__all__ = ["FSDP"]


class FSDP(RankDataParallel):
    """One process per device; each residual block is its own FSDP unit, then the whole model
    (stem and head), so at most one block's parameters are gathered at a time."""

    summary = "one process per device, fully_shard (FSDP2) per residual block"

    fp16_refusal = ("fp16 loss scaling is not coordinated across shards here; use "
                    "--precision bf16 or fp32")

    def wrap(self, model: nn.Module) -> nn.Module:
        # layerN.M: a residual block, not the stem or the head (the root unit holds those).
        units = [fully_shard(block) for name, block in resnet_blocks(model) if "." in name]
        units.append(fully_shard(model))
        if dist.get_backend() == "gloo":
            # torch 2.8's gloo reduce-scatter silently sums for ReduceOp.AVG (pytorch#162338),
            # giving N times the gradient: reduce by SUM and let FSDP divide, as gloo's own
            # AVG does where it works (verify catches the difference).
            for unit in units:
                unit.set_force_sum_reduction_for_comms(True)
        return units[-1]

    def trained_parameters(self):
        full = [parameter.full_tensor() for parameter in self.model.parameters()]  # collective
        return full if self.rank == 0 else []
