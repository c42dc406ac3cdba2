"""A measured pipeline timeline: when each stage ran each micro-batch's forward and backward in
one step (wall clock on a CPU, CUDA events on a GPU), its idle share per stage, and the Chrome
trace that shows it (open it in Perfetto or chrome://tracing)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence

import torch

__all__ = ["PHASES", "Timeline", "bubble_fractions", "chrome_trace", "in_flight", "span_label"]

# F: forward; B: the whole backward; I and W: its input- and weight-gradient halves, where a
# schedule splits them (zero bubble).
PHASES = {"F": "forward", "B": "backward", "I": "backward (input gradient)",
          "W": "backward (weight gradient)"}


class Timeline:
    """Spans `[stage, micro_batch, phase, start_s, end_s]` of one step, relative to `start()`,
    with a sixth item, the model stage, where a rank (the row, `stage`) holds several.

    Strategies mark their actions with `span`, naming the device the action ran on (a no-op
    until the worker starts a timeline). On CUDA each span is a pair of events recorded on
    that device's current stream, read once the step is synchronised against an origin event
    of the same device (CUDA times events of one device only)."""

    def __init__(self, devices: Sequence[torch.device]) -> None:
        """`devices`: those this process drives (a span runs on one of them)."""
        self._devices = tuple(dict.fromkeys(_indexed(d) for d in devices))
        self._cuda = self._devices[0].type == "cuda"
        self._lock = threading.Lock()
        self._pending: list = []
        self._origins: dict[torch.device, torch.cuda.Event] = {}
        self._origin = 0.0

    def start(self) -> None:
        with self._lock:
            self._pending = []
        if self._cuda:
            # Every device is idle here (the harness synchronises them after each step), so
            # origins recorded one after the other on each device mark the same instant.
            self._origins = {}
            for device in self._devices:
                origin = torch.cuda.Event(enable_timing=True)
                origin.record(torch.cuda.current_stream(device))
                self._origins[device] = origin
        else:
            self._origin = time.perf_counter()

    @contextlib.contextmanager
    def span(self, stage: int, micro_batch: int, phase: str, model_stage: int | None = None,
             device: torch.device | None = None) -> Iterator[None]:
        """Time what runs inside on `device` (by default the first this process drives)."""
        extra = () if model_stage is None else (model_stage,)
        if self._cuda:
            device = _indexed(device) if device is not None else self._devices[0]
            if device not in self._origins:
                raise ValueError(f"a span on {device}, which this timeline does not drive "
                                 f"({', '.join(map(str, self._devices))})")
            stream = torch.cuda.current_stream(device)  # where this thread queues its work
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            begin.record(stream)
            yield
            end.record(stream)
            marks: tuple = (device, begin, end)
        else:
            start = time.perf_counter()
            yield
            marks = (None, start, time.perf_counter())
        with self._lock:
            self._pending.append((stage, micro_batch, phase, *marks, *extra))

    def spans(self) -> list[list]:
        """The step's spans in seconds from its start (call after the step is synchronised)."""
        def seconds(device, mark) -> float:
            if self._cuda:
                return self._origins[device].elapsed_time(mark) / 1e3
            return mark - self._origin

        return sorted([stage, micro_batch, phase, seconds(device, begin),
                       seconds(device, end), *extra]
                      for stage, micro_batch, phase, device, begin, end, *extra
                      in self._pending)


def _indexed(device: torch.device) -> torch.device:
    """`cuda` as the device it means (`cuda:N`, the current one), so that names compare."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (a stage's own spans never overlap, but be safe)."""
    total, reach = 0.0, float("-inf")
    for begin, end in sorted(intervals):
        if end > reach:
            total += end - max(begin, reach)
            reach = end
    return total


def bubble_fractions(spans: list[list], stages: int, step_s: float) -> list[float]:
    """Per stage, the share of the step it spent in none of its spans: idle, waiting for a
    neighbour or for its data (the measured bubble, communication included)."""
    return [1 - _busy([(s[3], s[4]) for s in spans if s[0] == stage]) / step_s
            for stage in range(stages)]


def in_flight(spans: list[list], stages: int) -> list[int]:
    """Per stage, the most micro-batches held at once: forwards ended whose backward (B, or
    its input-gradient half I, which frees most of the activations) had not ended yet. GPipe
    holds all M; 1F1B at most K."""
    most = []
    for stage in range(stages):
        # At equal times a backward's end comes first: it frees before the next forward holds.
        events = sorted((s[4], 0 if s[2] in "BI" else 1) for s in spans
                        if s[0] == stage and s[2] in "FBI")
        held = peak = 0
        for _, is_forward in events:
            held += 1 if is_forward else -1
            peak = max(peak, held)
        most.append(peak)
    return most


def span_label(span: list) -> str:
    """"F3" (forward of micro-batch 3), "F3 s2" where the rank holds several model stages."""
    label = f"{span[2]}{span[1]}"
    return f"{label} s{span[5]}" if len(span) > 5 else label


def chrome_trace(spans: list[list], name: str) -> str:
    """The spans as Chrome trace events: one row (thread) per stage, microseconds."""
    events = [{"name": span_label(span), "cat": PHASES[phase], "ph": "X",
               "pid": 0, "tid": stage, "ts": begin * 1e6, "dur": (end - begin) * 1e6,
               "args": {"micro_batch": micro_batch, "phase": PHASES[phase],
                        **({"model_stage": extra[0]} if extra else {})}}
              for span in spans for stage, micro_batch, phase, begin, end, *extra in [span]]
    events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": stage,
                "args": {"name": f"stage {stage}"}} for stage in sorted({s[0] for s in spans})]
    events.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": name}})
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, indent=1)
