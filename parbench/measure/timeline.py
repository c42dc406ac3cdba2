"""A measured pipeline timeline: when each stage ran each micro-batch's forward and backward in
one step (wall clock on a CPU, CUDA events on a GPU), its idle share per stage, and the Chrome
trace that shows it (open it in Perfetto or chrome://tracing)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import torch

__all__ = ["PHASES", "Timeline", "bubble_fractions", "chrome_trace", "in_flight", "span_label"]

# F: forward; B: the whole backward; I and W: its input- and weight-gradient halves, where a
# schedule splits them (zero bubble).
PHASES = {"F": "forward", "B": "backward", "I": "backward (input gradient)",
          "W": "backward (weight gradient)"}


class Timeline:
    """Spans `[stage, micro_batch, phase, start_s, end_s]` of one step, relative to `start()`,
    with a sixth item, the model stage, where a rank (the row, `stage`) holds several.

    Strategies mark their actions with `span` (a no-op until the worker starts a timeline);
    on CUDA each span is a pair of events, read once the step is synchronised."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._lock = threading.Lock()
        self._pending: list = []
        self._origin = None

    def start(self) -> None:
        with self._lock:
            self._pending = []
        if self._cuda:
            self._origin = torch.cuda.Event(enable_timing=True)
            self._origin.record()
        else:
            self._origin = time.perf_counter()

    @contextlib.contextmanager
    def span(self, stage: int, micro_batch: int, phase: str,
             model_stage: int | None = None) -> Iterator[None]:
        if self._cuda:
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            begin.record()
            yield
            end.record()
        else:
            begin = time.perf_counter()
            yield
            end = time.perf_counter()
        extra = () if model_stage is None else (model_stage,)
        with self._lock:
            self._pending.append((stage, micro_batch, phase, begin, end, *extra))

    def spans(self) -> list[list]:
        """The step's spans in seconds from its start (call after the step is synchronised)."""
        def seconds(mark) -> float:
            if self._cuda:
                return self._origin.elapsed_time(mark) / 1e3
            return mark - self._origin

        return sorted([stage, micro_batch, phase, seconds(begin), seconds(end), *extra]
                      for stage, micro_batch, phase, begin, end, *extra in self._pending)


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
