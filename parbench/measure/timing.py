"""Step timing that waits for every device: warm-up discarded, each measured step timed from
synchronised start to synchronised end."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Pace", "StepTiming", "time_steps"]

# pace(i): entered before step i and left once it is synchronised (an external timer's hook).
Pace = Callable[[int], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class StepTiming:
    """Wall time of each measured step and of the whole measured span; the discarded warm-up
    steps' times apart (the first one includes compilation under --compile)."""

    step_times_s: tuple[float, ...]
    total_s: float
    warmup_step_times_s: tuple[float, ...] = ()

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.step_times_s, q))

    @property
    def median_s(self) -> float:
        return self.percentile(50)

    @property
    def p90_s(self) -> float:
        return self.percentile(90)

    def throughput(self, samples_per_step: int) -> float:
        """Samples per second over the measured span: samples / wall time, not 1 / median."""
        return samples_per_step * len(self.step_times_s) / self.total_s


def time_steps(step: Callable[[int], object], synchronize: Callable[[], None], warmup: int,
               steps: int, pace: Pace | None = None,
               start_measuring: Callable[[], None] = lambda: None) -> StepTiming:
    """Run `warmup` discarded steps, then time `steps` steps.

    `synchronize` waits for every participating device (and, across processes, every rank)
    before a step's clock starts and after every step, so a step's time includes all the work
    it queued. `start_measuring()` runs once the warm-up is done on every device, before the
    first measured step (to reset peaks, read an energy counter). `pace(i)`, where an external
    timer drives the steps (pytest-benchmark), is entered before step i and left once it is
    synchronised.
    """
    pace = pace or (lambda i: contextlib.nullcontext())
    synchronize()
    times, warmup_times = [], []
    start = None
    for i in range(warmup + steps):
        if i == warmup:
            start_measuring()
        with pace(i):
            t0 = time.perf_counter()
            step(i)
            synchronize()
            t1 = time.perf_counter()
        if i >= warmup:
            start = t0 if start is None else start
            times.append(t1 - t0)
        else:
            warmup_times.append(t1 - t0)
    assert start is not None, "no measured step"
    return StepTiming(tuple(times), t1 - start, tuple(warmup_times))
