"""Run a configuration's workers: in this process, one spawned process per device, or under
torchrun (one process per device across nodes, each configuration's ranks agreeing on its
outcome, rank 0 merging the record).

`measure` and `verify_parameters` are the one interface; which launcher runs a configuration
follows from its strategy (`Config.process_per_device`), a memory cap, and whether torchrun started
this process.
"""

from __future__ import annotations

import torch

from parbench.config import Config
from parbench.launch.backends import (
    BACKENDS,
    backend_for,
    backend_problem,
    process_group_backend,
    world_size,
)
from parbench.launch.failures import (
    OUT_OF_MEMORY,
    LaunchError,
    failure_reason,
    is_out_of_memory,
)
from parbench.launch.ranks import Task, in_process_threads, measure_here
from parbench.launch.spawn import spawn
from parbench.launch.torchrun import (
    from_rank_zero,
    join_torchrun,
    leave_torchrun,
    measure_under_torchrun,
    same_on_every_rank,
    torchrun_devices,
    torchrun_rank,
)
from parbench.measure import Pace
from parbench.worker import Measurement, trained_parameters

__all__ = [
    "BACKENDS", "OUT_OF_MEMORY", "LaunchError", "backend_for", "backend_problem",
    "failure_reason", "from_rank_zero", "is_out_of_memory", "join_torchrun", "leave_torchrun",
    "measure", "measure_collectives", "process_group_backend", "same_on_every_rank",
    "torchrun_devices", "torchrun_rank", "verify_parameters", "world_size",
]


def measure(config: Config, pace: Pace | None = None) -> Measurement | None:
    """Measure `config` with the launcher its strategy needs; return its measurement (under
    torchrun on rank 0; other ranks get None). With `pace`, an external timer drives every
    step of this process, which then plays rank 0 itself (see `parbench.paced`)."""
    if torchrun_rank() is not None:
        return measure_under_torchrun(config)
    if config.process_per_device:
        return spawn(config, Task.MEASURE, pace=pace)
    if config.memory_cap_mib and pace is None:
        # Under a cap an allocation can fail where torch cannot recover (even crash):
        # never in the process that holds the sweep.
        return spawn(config, Task.ALONE)
    return measure_here(config, pace)


def measure_collectives(config: Config, names, sizes, iterations: int,
                        warmup: int) -> list[dict]:
    """Time each collective at each size on the processes `config` (a data-parallel one)
    starts, with its backend: rows of collective, size_bytes and the slowest rank's time_s."""
    return spawn(config, Task.COLLECTIVES, (list(names), list(sizes), iterations, warmup))


def verify_parameters(config: Config, images: torch.Tensor,
                      labels: torch.Tensor) -> list[torch.Tensor]:
    """The parameters after one step of `config` on this batch, whatever its launcher."""
    if config.process_per_device:
        return spawn(config, Task.VERIFY, (images, labels))
    with in_process_threads(config):
        return trained_parameters(config, images, labels)
