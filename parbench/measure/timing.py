"""Step timing that waits for every device: warm-up discarded, each measured step timed from
synchronised start to synchronised end, with the host's time to queue it beside; nothing of
the harness's between a step's start and its end."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["HOST_BOUND_SHARE", "Pace", "StepTiming", "host_bound", "time_steps"]

# A GPU step whose host time (queuing its work) is at least this share of the step is
# host-bound: the devices waited on the host's launches (or the step waited inside itself).
HOST_BOUND_SHARE = 0.9

# pace(i): entered before step i and left once it is synchronised (an external timer's hook).
Pace = Callable[[int], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class StepTiming:
    """Wall time of each measured step and their sum; the discarded warm-up steps' times apart
    (the first one includes compilation under --compile); and, per measured step, the host's
    time from the step's start until its last work was queued (before the wait for the
    devices): close to the step's time, the host (dispatch) bounds the step."""

    step_times_s: tuple[float, ...]
    total_s: float
    warmup_step_times_s: tuple[float, ...] = ()
    host_times_s: tuple[float, ...] = ()

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.step_times_s, q))

    @property
    def median_s(self) -> float:
        return self.percentile(50)

    @property
    def p90_s(self) -> float:
        return self.percentile(90)

    def throughput(self, samples_per_step: int) -> float:
        """Samples per second over the measured steps: samples / their wall time, not
        1 / median."""
        return samples_per_step * len(self.step_times_s) / self.total_s


def time_steps(step: Callable[[int], object], synchronize: Callable[[], None], warmup: int,
               steps: int, pace: Pace | None = None,
               start_measuring: Callable[[], None] = lambda: None,
               after_step: Callable[[int], None] = lambda i: None) -> StepTiming:
    """Run `warmup` discarded steps, then time `steps` steps.

    `synchronize` waits for every participating device (and, across processes, every rank)
    before each step's clock starts and before it stops, so a step's time includes all the
    work it queued and no rank's clock runs while another does the harness's work.
    `start_measuring()` runs once the warm-up is done on every device, before the first
    measured step (to reset peaks, read an energy counter); `after_step(i)` once step i is
    synchronised and its clock stopped (what the harness reads after a step). Neither is
    timed: the measured span is the sum of the steps. `pace(i)`, where an external timer
    drives the steps (pytest-benchmark), is entered before step i and left once it is
    synchronised.
    """
    pace = pace or (lambda i: contextlib.nullcontext())
    times, warmup_times, host_times = [], [], []
    for i in range(warmup + steps):
        if i == warmup:
            start_measuring()
        with pace(i):
            synchronize()  # every rank starts its clock together, whatever each did before
            t0 = time.perf_counter()
            step(i)
            queued = time.perf_counter()
            synchronize()
            t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
            host_times.append(queued - t0)
        else:
            warmup_times.append(t1 - t0)
        after_step(i)
    assert times, "no measured step"
    return StepTiming(tuple(times), sum(times), tuple(warmup_times), tuple(host_times))


def host_bound(host_s: float | None, step_s: float | None, device_kind: str | None,
               precision: str | None = None, backend: str | None = None) -> bool | None:
    """Whether the host bounds a step: on GPUs, where the host queues work the devices run
    later, its time queuing the step's work is at least HOST_BOUND_SHARE of the step (the GPU
    waited for its launches, as eager dispatch of small kernels makes it). None where it cannot
    tell: on CPUs (the host does the work itself), and where the step waits on the GPU inside
    itself by design (fp16's gradient scaler reads whether a gradient overflowed; gloo, for
    ranks sharing a GPU, copies CUDA tensors through the host in every collective)."""
    if device_kind != "cuda" or not step_s or host_s is None:
        return None
    if precision == "fp16" or backend == "gloo":
        return None
    return host_s >= HOST_BOUND_SHARE * step_s
