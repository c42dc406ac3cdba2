"""Fully sharded data parallel (FSDP2, `fully_shard`): parameters, gradients and optimiser
state sharded over ranks, each residual block gathered only while it runs."""

from __future__ import annotations

from torch import nn
from torch.distributed.fsdp import fully_shard

from strategies.base import StrategyError
from strategies.partition import resnet_blocks
from strategies.rank_parallel import RankDataParallel

__all__ = ["FSDP"]


class FSDP(RankDataParallel):
    """One process per device; each residual block is its own FSDP unit, then the whole model
    (stem and head), so at most one block's parameters are gathered at a time."""

    name = "fsdp"
    summary = "one process per device, fully_shard (FSDP2) per residual block"
    option_names = ("world_size",)

    def __init__(self, workload, devices, **options) -> None:
        if workload.precision == "fp16":
            raise StrategyError("fsdp: fp16 loss scaling is not coordinated across shards here; "
                                "use --precision bf16 or fp32")
        super().__init__(workload, devices, **options)

    def wrap(self, model: nn.Module) -> nn.Module:
        for name, block in resnet_blocks(model):
            if "." in name:  # layerN.M: a residual block, not the stem or the head
                fully_shard(block)
        return fully_shard(model)

    def trained_parameters(self):
        full = [parameter.full_tensor() for parameter in self.model.parameters()]  # collective
        return full if self.rank == 0 else []
