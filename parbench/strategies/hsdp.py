"""Hybrid sharded data parallel's options (HSDP: fsdp's strategy on a 2-D DeviceMesh):
parameters sharded within each group of ranks, the groups replicas of each other, gradients
reduce-scattered within a group and all-reduced across the groups."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError
from parbench.strategies.fsdp import FSDPOptions
from parbench.strategies.options import option

__all__ = ["HSDPOptions"]


@dataclass(frozen=True)
class HSDPOptions(FSDPOptions):
    """The mesh's shape: how many ranks shard each copy of the model."""

    shard_size: int | None = option(minimum=1, label="shard", help=(
        "HSDP: ranks in each sharding group (the mesh is N/shard replicas x shard); it must "
        "divide the ranks; default: half of them (two replicas)"))

    def check(self, workload, global_batch, devices) -> None:
        super().check(workload, global_batch, devices)
        ranks = len(devices)
        replicas, shard = self.mesh_shape(ranks)
        if replicas * shard == ranks and replicas >= 2 and shard >= 2:
            return
        # Else one of the mesh's dimensions has one rank: that is ddp's layout or fsdp's.
        shapes = [f"--shard-size {d}" for d in range(2, ranks // 2 + 1) if ranks % d == 0]
        why = (f"--shard-size {shard} does not divide {ranks} ranks" if replicas * shard != ranks
               else f"{ranks} ranks as {replicas} replica(s) of {shard} shard(s): HSDP needs at "
               "least 2 of each")
        raise StrategyError(f"{why}; "
                            + (f"give {' or '.join(shapes)}" if shapes else
                               "give at least 4 ranks"))

    def resolved(self, global_batch: int, devices: tuple[torch.device, ...]) -> HSDPOptions:
        return dataclasses.replace(self, shard_size=self.mesh_shape(len(devices))[1])

    def parallel_dims(self, devices) -> ParallelDims:
        replicas, shard = self.mesh_shape(len(devices))
        return ParallelDims(replicas=replicas, shards=shard)

    def fewest_devices(self) -> int:
        return 4  # two replicas of two shards

    def mesh_shape(self, ranks: int) -> tuple[int, int]:
        """(replicas, ranks per sharding group)."""
        shard = self.shard_size or max(ranks // 2, 1)
        return ranks // shard, shard
