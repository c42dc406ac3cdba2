"""Collective bandwidth as nccl-tests defines it: the time of all-reduce, all-gather and
reduce-scatter over message sizes, algorithm bandwidth (size / time) and bus bandwidth (what
each link carried: algbw x 2(n-1)/n for all-reduce, x (n-1)/n for the other two)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["COLLECTIVES", "bus_bandwidth", "bus_factor", "interpolated_time_s",
           "time_collectives"]


def _all_reduce(buffer: torch.Tensor, shard: torch.Tensor) -> None:
    dist.all_reduce(buffer)


def _all_gather(buffer: torch.Tensor, shard: torch.Tensor) -> None:
    dist.all_gather_into_tensor(buffer, shard)


def _reduce_scatter(buffer: torch.Tensor, shard: torch.Tensor) -> None:
    dist.reduce_scatter_tensor(shard, buffer)


# name -> how to run it on a buffer of the message size (nccl-tests' "size": all-gather's
# output and reduce-scatter's input, the whole gathered or reduced tensor) and this rank's
# 1/world shard of it, both allocated before the timing.
COLLECTIVES = {"all_reduce": _all_reduce, "all_gather": _all_gather,
               "reduce_scatter": _reduce_scatter}


def bus_factor(name: str, world: int) -> float:
    """busbw / algbw for `name` on `world` ranks (nccl-tests' PERFORMANCE.md)."""
    if name == "all_reduce":
        return 2 * (world - 1) / world
    return (world - 1) / world


def bus_bandwidth(name: str, size_bytes: int, time_s: float, world: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in GB/s (1e9 bytes) for one collective."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(name, world)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_collectives(names: Sequence[str], sizes: Sequence[int], iterations: int,
                     warmup: int, device: torch.device) -> list[dict]:
    """This rank's mean time of each collective at each size (bytes of float32), after
    `warmup` untimed calls; every rank calls it together."""
    world = dist.get_world_size()
    rows = []
    for name in names:
        run = COLLECTIVES[name]
        for size in sizes:
            elements = max(world, size // 4 // world * world)  # divides over the ranks
            buffer = torch.ones(elements, dtype=torch.float32, device=device)
            shard = torch.ones(elements // world, dtype=torch.float32, device=device)
            for _ in range(warmup):
                run(buffer, shard)
            _synchronize(device)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                run(buffer, shard)
            _synchronize(device)
            rows.append(dict(collective=name, size_bytes=elements * 4,
                             time_s=(time.perf_counter() - start) / iterations))
            del buffer, shard
    return rows


def interpolated_time_s(rows: Sequence[dict], name: str, size_bytes: float) -> float | None:
    """The time of collective `name` on `size_bytes`, interpolated in log size between the
    measured sizes (at the ends, the nearest size's bandwidth); None if it was not measured."""
    measured = sorted((r["size_bytes"], r["time_s"]) for r in rows if r["collective"] == name)
    if not measured or size_bytes <= 0:
        return None
    sizes = np.log([s for s, _ in measured])
    bandwidths = [s / t for s, t in measured]
    bandwidth = float(np.interp(math.log(size_bytes), sizes, bandwidths))
    return size_bytes / bandwidth
