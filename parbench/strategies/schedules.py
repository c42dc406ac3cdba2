"""torch.distributed.pipelining's schedules as parbench runs them, and the options of the
pipelines that run them: a cut, micro-batches, stages per rank, pipelines side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch.distributed.pipelining as pipelining
from typing_extensions import Self  # typing's from Python 3.11

from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError
from parbench.strategies.options import option
from parbench.strategies.partition import default_balance
from parbench.strategies.pipeline import PipelineOptions
from parbench.strategies.stages import bubble_fraction, resolve_split

__all__ = ["SCHEDULES", "InterleavedOptions", "PipelineFSDPOptions", "Schedule",
           "ScheduleOptions", "check_schedule"]


@dataclass(frozen=True)
class Schedule:
    """A schedule of torch.distributed.pipelining as parbench runs it."""

    torch_name: str  # its class in torch.distributed.pipelining
    multi_stage: bool  # several stages per rank
    v_shape: bool  # rank r holds stages r and 2K-1-r (else r, r+K, r+2K, ...)
    splits_backward: bool  # input- and weight-gradient halves (zero bubble): no torch.compile
    # Theoretical idle share of a step from K ranks, M micro-batches and V stages per rank
    # (None: no closed form used here).
    bubble: Callable[[int, int, int], float | None]

    @property
    def torch_class(self):
        return getattr(pipelining, self.torch_name, None)


SCHEDULES = {
    "gpipe": Schedule("ScheduleGPipe", False, False, False, bubble_fraction),
    "1f1b": Schedule("Schedule1F1B", False, False, False, bubble_fraction),
    "interleaved-1f1b": Schedule("ScheduleInterleaved1F1B", True, False, False, bubble_fraction),
    "looped-bfs": Schedule("ScheduleLoopedBFS", True, False, False, bubble_fraction),
    # ZB-H1 (Qi et al. 2024): a third of 1F1B's bubble over the ideal time when F, B and W
    # take equal time (as if three times the micro-batches).
    "zero-bubble": Schedule("ScheduleInterleavedZeroBubble", True, False, True,
                            lambda k, m, v: bubble_fraction(k, 3 * m, v)),
    # ZB-V: no bubble once M >= 2K, F, B and W taking equal time.
    "zbv": Schedule("ScheduleZBVZeroBubble", True, True, True,
                    lambda k, m, v: 0.0 if m >= 2 * k else None),
    "dualpipev": Schedule("ScheduleDualPipeV", True, True, True, lambda k, m, v: None),
}


@dataclass(frozen=True)
class ScheduleOptions(PipelineOptions):
    """A pipeline's cut and micro-batches, and the schedule its registered name presets."""

    schedule: str = option("gpipe", choices=tuple(SCHEDULES), preset=True,
                           help="the torch.distributed.pipelining schedule")

    @property
    def pipeline_count(self) -> int:
        """The pipelines side by side (P): one, unless the options replicate it."""
        return 1

    def parallel_dims(self, devices) -> ParallelDims:
        return replace(super().parallel_dims(devices), schedule=self.schedule)


@dataclass(frozen=True)
class InterleavedOptions(ScheduleOptions):
    """Several stages per rank: the model is cut into K x V stages."""

    stages_per_rank: int | None = option(minimum=2, label="V", help="stages each rank holds "
                                         "(V): the model is cut into K x V stages (default 2)")

    def pieces(self, devices) -> int:
        return len(devices) * (self.stages_per_rank or 2)

    def parallel_dims(self, devices) -> ParallelDims:
        return replace(super().parallel_dims(devices), stages_per_rank=self.stages_per_rank or 1)

    def resolved(self, global_batch, devices) -> Self:
        return replace(super().resolved(global_batch, devices),
                       stages_per_rank=self.stages_per_rank or 2)


@dataclass(frozen=True)
class PipelineFSDPOptions(ScheduleOptions):
    """The pipeline's cut and micro-batches, and how many pipelines run side by side."""

    pipelines: int | None = option(minimum=2, label="P", help=(
        "pipelines side by side (the data-parallel dimension): N devices make P pipelines of "
        "N/P stages, each on 1/P of the batch (default 2)"))

    @property
    def pipeline_count(self) -> int:
        """The pipelines side by side, the default resolved."""
        return self.pipelines or 2

    def fewest_devices(self) -> int:
        return 4  # two pipelines of two stages

    def pieces(self, devices) -> int:
        return len(devices) // self.pipeline_count

    def device_count(self) -> int | None:
        return self.stages * self.pipeline_count if self.stages else None

    def device_count_text(self) -> str:
        return f"{self.pipeline_count} pipelines of {self.stages} stages need"

    def check(self, workload, global_batch, devices) -> None:
        pipelines = self.pipeline_count
        if len(devices) % pipelines or len(devices) // pipelines < 2:
            raise StrategyError(f"{len(devices)} devices do not make {pipelines} pipelines of 2 "
                                f"stages or more; give {2 * pipelines} devices or a multiple, "
                                "or another --pipelines")
        if global_batch % pipelines:
            lower = global_batch - global_batch % pipelines
            raise StrategyError(f"batch {global_batch} does not divide over {pipelines} "
                                f"pipelines; use a multiple of {pipelines}, e.g. --batch-size "
                                f"{lower or pipelines} or {lower + pipelines}")
        super().check(workload, global_batch // pipelines, devices)

    def parallel_dims(self, devices) -> ParallelDims:
        return replace(super().parallel_dims(devices), stages=len(devices) // self.pipeline_count,
                       shards=self.pipeline_count)

    def resolved(self, global_batch, devices) -> Self:
        pipelines = self.pipeline_count
        stages = len(devices) // pipelines
        split, _ = resolve_split(global_batch // pipelines, self.split_size, stages)
        return replace(self, pipelines=pipelines, stages=stages, split_size=split,
                       balance=self.balance or default_balance(stages))


def check_schedule(schedule: Schedule, ranks: int, per_rank: int,
                   micro_batches: int, batch: int) -> None:
    """What the schedule requires of stages per rank and micro-batches (of `batch` images)."""
    if schedule.v_shape and per_rank != 2:
        raise StrategyError(f"{schedule.torch_name} holds exactly 2 stages per rank (a V), "
                            f"got --stages-per-rank {per_rank}")
    if schedule.torch_name in ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"):
        rounds = max(1, micro_batches // ranks)
        if micro_batches % rounds:
            raise StrategyError(
                f"{schedule.torch_name} needs the micro-batch count M to be a multiple of "
                f"max(1, M // K) = {rounds}, got M = {micro_batches} on K = {ranks} ranks; "
                f"choose a --split-size that makes M a multiple of {ranks}")
    # torch's 1F1B raises this at construction, on every rank of a launched run: refused
    # here, before anything is launched, a sweep records it as skipped and a draw draws
    # again
    if schedule.torch_name in ("ScheduleDualPipeV", "Schedule1F1B") \
            and micro_batches < ranks * per_rank:
        stages = ranks * per_rank
        divisors = [size for size in range(1, batch // stages + 1) if batch % size == 0]
        fix = (f"--split-size {divisors[-1]}" if divisors else
               f"a --batch-size that gives each pipeline {stages} images or more")
        raise StrategyError(f"{schedule.torch_name} needs at least as many micro-batches as "
                            f"stages ({stages}), got {micro_batches}; use {fix}")
