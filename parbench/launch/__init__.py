"""Run a configuration's workers: in this process, one spawned process per device, or under
torchrun (one process per device across nodes, each configuration's ranks agreeing on its
outcome, rank 0 merging the record).

`measure` and `verify_training` are the one interface, each a `Launcher`'s (launchers.py);
which one runs a configuration is decided by its plan (`RunPlan.launcher`: its strategy, a
memory cap, and whether torchrun started this process).
"""

from __future__ import annotations

import torch

from parbench.launch.failures import (
    OUT_OF_MEMORY,
    Interrupted,
    LaunchError,
    failure_reason,
    interruption_reason,
    is_out_of_memory,
)
from parbench.launch.job import (
    from_rank_zero,
    job_devices,
    job_group,
    join_job,
    leave_job,
    measure_on_every_rank,
    same_on_every_rank,
)
from parbench.launch.launchers import LAUNCHERS, Launcher, launcher_for
from parbench.launch.ranks import Task
from parbench.launch.spawn import spawn
from parbench.launch.worker import Trained
from parbench.machine.allocator import pin_cpu_allocator
from parbench.measure import Pace
from parbench.measure.measurement import Measurement
from parbench.plan.config import Config
from parbench.plan.planning import job_rank

__all__ = [
    "LAUNCHERS", "OUT_OF_MEMORY", "Interrupted", "LaunchError", "Launcher", "failure_reason",
    "from_rank_zero", "interruption_reason", "is_out_of_memory", "join_job", "launcher_for",
    "leave_job", "measure", "measure_collectives", "measure_on_every_rank",
    "same_on_every_rank", "job_devices", "job_group", "job_rank", "verify_training",
]


def measure(config: Config, pace: Pace | None = None) -> Measurement | None:
    """Measure `config` with the launcher its plan names; its measurement (under torchrun on
    rank 0; other ranks get None). See `Launcher.measure` for `pace`."""
    pin_cpu_allocator()
    return launcher_for(config).measure(config, pace)


def measure_collectives(config: Config, names, sizes, iterations: int,
                        warmup: int) -> list[dict]:
    """Time each collective at each size on the processes `config` (a data-parallel one)
    starts, with its backend: rows of collective, size_bytes and the slowest rank's time_s."""
    pin_cpu_allocator()
    return spawn(config, Task.COLLECTIVES, (list(names), list(sizes), iterations, warmup))


def verify_training(config: Config, batches: list[tuple[torch.Tensor, torch.Tensor]],
                    nudge_seed: int | None = None) -> Trained:
    """A step of `config` on each batch, whatever its launcher: each step's loss and the
    parameters after the last (`nudge_seed`: see `worker.train_steps`)."""
    return launcher_for(config).verify_training(config, batches, nudge_seed)
