"""A configuration trained one step per call from an external timer (pytest-benchmark), with
parbench's own measurement of the same steps at the end."""

from __future__ import annotations

import contextlib
import threading

from parbench import launch
from parbench.measure.measurement import Measurement
from parbench.plan.config import Config

__all__ = ["PacedRun"]


class PacedRun:
    """Runs `config` exactly as `parbench run` does (same launcher, processes, barriers and
    synchronisation), in a background thread that waits for `step()` before each of its
    warm-up and measured steps. `step()` returns once that step is done on every device and
    rank, so timing the call times the step. This process plays rank 0 of multi-process
    strategies; the other ranks are spawned and follow.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.calls_needed = config.warmup_steps + config.steps
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._result: Measurement | None = None
        self._error: BaseException | None = None
        self._finished = False
        self._thread = threading.Thread(target=self._run, name="parbench-paced", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def _pace(self, index: int):
        self._go.acquire()
        try:
            yield
        finally:
            self._done.release()

    def _run(self) -> None:
        try:
            self._result = launch.measure(self.config, pace=self._pace)
        except BaseException as error:  # handed to the caller of step() / finish()
            self._error = error
        finally:
            self._finished = True
            self._done.release()  # a step() waiting on a run that failed

    def step(self) -> None:
        """One training step of the whole configuration, synchronised."""
        if self._finished:
            raise RuntimeError(f"{self.config.strategy}: no step left (warm-up + measured = "
                               f"{self.calls_needed}), or the run failed: {self._error}")
        self._go.release()
        self._done.acquire()
        if self._error is not None:
            raise self._error

    def finish(self) -> Measurement:
        """parbench's measurement, once all `calls_needed` steps were called."""
        self._thread.join(timeout=self.config.timeout_s)
        # Handed over, not kept: its traceback holds the failed strategy and its tensors,
        # which the runner frees once it has made the record.
        error, self._error = self._error, None
        if error is not None:
            raise error
        if self._result is None:
            raise RuntimeError(f"{self.config.strategy}: finish() before its "
                               f"{self.calls_needed} steps were called")
        return self._result
