"""The operations of profiled training steps, read from torch.profiler's events: each at the
level the op counter sees (below autograd: a composite operation's parts, never the operations
a kernel calls inside itself), with its step, block and phase (the marks before it), its host
time and its device time (the GPU time of every kernel it launched, inside it included; on a
CPU, its own time)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from torch.autograd import DeviceType

from parbench.advisor.profiling.op_profile.counting import Shapes
from parbench.advisor.profiling.op_profile.labels import END, MARKER, STEP

__all__ = ["TracedOp", "TracedStep", "traced_steps"]

_US = 1e-6


@dataclass(frozen=True)
class TracedOp:
    """One call of an operation in a profiled step."""

    block: str
    phase: str
    name: str
    input_shapes: Shapes
    input_dtypes: tuple[str, ...]  # as the profiler names them ("float", "c10::BFloat16")
    device_s: float
    host_s: float

    @property
    def key(self) -> tuple[str, str, str, Shapes]:
        return self.block, self.phase, self.name, self.input_shapes


@dataclass(frozen=True)
class TracedStep:
    """One profiled step: its wall time (its start mark to its end, after the device finished),
    its operations, and the device time of kernels no kept operation launched."""

    wall_s: float
    ops: list[TracedOp]
    other_device_s: float


def traced_steps(events, counted_names: set[str], on_device: bool) -> list[TracedStep]:
    """The steps in `events` (a profile's events, each step between a STEP and an END mark):
    the operators in `counted_names` (those the counted step saw), `on_device` where the
    profile recorded a GPU's kernels."""
    # The host's marks: on a GPU each range has a twin on the device's timeline too.
    marks = sorted((event.time_range.start, event.name) for event in events
                   if event.name.startswith(MARKER) and event.device_type == DeviceType.CPU)
    times = [time for time, _ in marks]
    states = _states(marks)
    steps: list[list[TracedOp]] = [[] for _ in range(sum(name == STEP for _, name in marks))]
    for event in _kept(events, counted_names):
        at = bisect.bisect_right(times, event.time_range.start) - 1
        step, block, phase = states[at] if at >= 0 else (-1, "", "")
        if step < 0:
            continue  # before the first step: nothing of a measured one
        host_s = event.time_range.elapsed_us() * _US
        device_s = event.device_time_total * _US if on_device else host_s
        steps[step].append(TracedOp(block, phase, event.name,
                                    tuple(tuple(s) for s in event.input_shapes),
                                    tuple(event.input_dtypes), device_s, host_s))
    windows = _windows(marks)
    kernels = _kernel_time_per_window(events, windows) if on_device else [0.0] * len(windows)
    return [TracedStep((end - start) * _US, ops, max(0.0, total - sum(o.device_s for o in ops)))
            for (start, end), ops, total in zip(windows, steps, kernels, strict=True)]


def _states(marks: list[tuple[float, str]]) -> list[tuple[int, str, str]]:
    """After each mark: the step (counted from 0) and the (block, phase) it is in."""
    states, step, block, phase = [], -1, "", ""
    for _, name in marks:
        if name == STEP:
            step, block, phase = step + 1, "", ""
        elif name == END:
            block, phase = "", ""
        else:
            block, phase = name.removeprefix(MARKER).rsplit(":", 1)
        states.append((step, block, phase))
    return states


def _windows(marks: list[tuple[float, str]]) -> list[tuple[float, float]]:
    """Each step's start and end marks' times."""
    starts = [time for time, name in marks if name == STEP]
    ends = [time for time, name in marks if name == END]
    return list(zip(starts, ends, strict=True))


def _kept(events, counted_names: set[str]) -> list:
    """From each top-level event down, the first operator the counted step saw: a composite
    operator (conv2d, linear, log_softmax: CompositeImplicitAutograd) never arrives below
    autograd, the operators it calls do; and those a kernel calls inside itself are below
    the one kept."""
    kept, pending = [], [event for event in events if event.cpu_parent is None]
    while pending:
        event = pending.pop()
        if event.name in counted_names:
            kept.append(event)
        else:
            pending.extend(event.cpu_children)
    return sorted(kept, key=lambda event: event.time_range.start)


def _kernel_time_per_window(events, windows: list[tuple[float, float]]) -> list[float]:
    """The GPU time of every kernel launched from within each window."""
    starts = [start for start, _ in windows]
    totals = [0.0] * len(windows)
    for event in events:
        durations = sum(kernel.duration for kernel in event.kernels)
        at = bisect.bisect_right(starts, event.time_range.start) - 1
        if durations and at >= 0 and event.time_range.start <= windows[at][1]:
            totals[at] += durations * _US
    return totals
