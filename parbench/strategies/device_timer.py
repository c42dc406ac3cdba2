"""Points in the work queued on a device, timed by the device: CUDA events on the stream (no
host sync until asked), else the host's clock. Strategies time their blocks with it (the
`time` balance), and parbench's profiles do."""

from __future__ import annotations

import time
from collections.abc import Hashable

import torch

__all__ = ["StepClock"]


class StepClock:
    """Points in the work queued on `device`, timed by the device: CUDA events on the current
    stream (no host sync until `synchronize`), else the host's perf_counter."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._events: dict[Hashable, torch.cuda.Event] = {}
        self._times: dict[Hashable, float] = {}

    def mark(self, key: Hashable) -> None:
        """Mark `key` here (marked again, the latest mark counts)."""
        if self.device.type == "cuda":
            # In a backward hook too: autograd runs each backward node, hooks included, with
            # the stream of its forward set current on its own thread.
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            self._events[key] = event
        else:
            self._times[key] = time.perf_counter()

    def synchronize(self) -> None:
        """Wait until the device has reached every mark."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def seconds(self, start: Hashable, end: Hashable) -> float:
        """From mark `start` to mark `end` (once synchronised)."""
        if self.device.type == "cuda":
            return self._events[start].elapsed_time(self._events[end]) / 1e3
        return self._times[end] - self._times[start]
