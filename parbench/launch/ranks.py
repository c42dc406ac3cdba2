"""What one process does for a launcher: train and measure in this process, or play one rank
of a process group and gather every rank's result on rank 0."""

from __future__ import annotations

import contextlib
import enum
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from parbench.launch.worker import combine_trained, measure_worker, train_steps
from parbench.machine.devices import DeviceSet
from parbench.measure import Pace
from parbench.measure.collectives import time_collectives
from parbench.measure.measurement import Measurement, merge
from parbench.plan.config import Config

__all__ = ["Task", "in_process_threads", "measure_here", "run_rank", "set_device"]


class Task(enum.Enum):
    """What a launched process is asked to do."""

    MEASURE = "measure"  # train and measure; rank 0 returns the merged measurement
    ALONE = "alone"  # a one-process strategy measured in a process of its own (memory cap)
    VERIFY = "verify"  # a step on each given batch; rank 0 returns the losses, parameters
    # Time collectives (the batch: names, sizes, iterations, warm-up); rank 0 returns each
    # one's time, the slowest rank's (measure.collectives).
    COLLECTIVES = "collectives"


@contextlib.contextmanager
def in_process_threads(config: Config):
    """Each op runs on its logical device's share of cores; strategies that drive several
    devices run one worker thread per device, so N logical devices = N cores of work."""
    threads_before = torch.get_num_threads()
    if config.used_devices.kind == "cpu":
        torch.set_num_threads(config.threads_per_device)
    try:
        yield
    finally:
        torch.set_num_threads(threads_before)


def measure_here(config: Config, pace: Pace | None = None) -> Measurement:
    """A one-process strategy, measured in this process on its devices' share of cores."""
    with in_process_threads(config):
        return merge([measure_worker(config, lambda s: DeviceSet(s.devices), pace=pace)])


def set_device(config: Config, device: torch.device) -> None:
    if device.type == "cpu":
        torch.set_num_threads(config.threads_per_device)
    else:
        torch.cuda.set_device(device)


def run_rank(config: Config, task: Task, device: torch.device, batch=None, pace=None):
    """This rank's part of `task`, in an initialised process group; rank 0 returns the result
    gathered from every rank (the merged measurement, or all the trained parameters)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    mine: object
    if task is Task.MEASURE:
        mine = asdict(measure_worker(config, lambda s: DeviceSet((device,)), dist.barrier,
                                     pace))
    elif task is Task.COLLECTIVES:
        names, sizes, iterations, warmup = batch
        mine = time_collectives(names, sizes, iterations, warmup, device)
    else:
        mine = train_steps(config, batch)
    gathered: list[Any] | None = [None] * size if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rank != 0:
        return None
    assert gathered is not None
    if task is Task.MEASURE:
        return merge([Measurement(**m) for m in gathered])
    if task is Task.COLLECTIVES:
        return [{**row, "time_s": max(rows[i]["time_s"] for rows in gathered)}
                for i, row in enumerate(gathered[0])]
    return combine_trained(gathered)
