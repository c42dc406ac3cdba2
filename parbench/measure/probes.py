"""What a worker reads around its timed steps, never inside them: the allocator's peaks, the
memory left after each step, the GPUs' utilisation and energy; and, in extra steps of their own,
the tensors each logical device holds."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from parbench.machine.devices import DeviceSet
from parbench.measure.memory import PeakMemory, allocated_mib
from parbench.measure.sampling import GpuSampler
from parbench.measure.tensors import SOURCE as TENSORS_SOURCE
from parbench.measure.tensors import DeviceLimit, TensorMemory

__all__ = ["Probes", "count_tensors", "counted_source", "counts_tensors"]


def counts_tensors(devices: DeviceSet, placed_modules) -> bool:
    """Whether each logical device's memory is counted tensor by tensor: a CPU process's
    resident set includes the interpreter and libraries, and logical devices sharing a
    physical one cannot be told apart by its counters."""
    return placed_modules is not None and (devices.kind == "cpu" or devices.emulated)


@dataclass
class Probes:
    """The probes of one worker's devices, opened once its strategy is set up. Nothing here
    runs inside a timed step: peaks are reset before the measured steps and read after them,
    the memory held is read between steps, and tensors are counted in a step of their own
    (`count_tensors`)."""

    devices: DeviceSet
    memory: PeakMemory
    sampler: GpuSampler | None  # on GPUs
    after_step_mib: list[float | None] = field(default_factory=list)  # after each measured step

    @classmethod
    def open(cls, devices: DeviceSet) -> Probes:
        sampler = GpuSampler(devices.physical) if devices.kind == "cuda" else None
        return cls(devices, PeakMemory(devices), sampler)

    def start_measuring(self) -> None:
        """Peaks (of the measured steps, not of building the model) and energy count from
        here: the warm-up is done on every device."""
        self.memory.reset()
        if self.sampler is not None:
            self.sampler.start_measuring()

    def step_done(self, measured: bool) -> None:
        """After a step, its clock stopped."""
        if measured:
            self.after_step_mib.append(allocated_mib(self.devices))

    @contextlib.contextmanager
    def sampling(self):
        """GPU utilisation and memory sampled while the steps run; utilisation and energy counted
        over the measured ones."""
        if self.sampler is None:
            yield
            return
        with self.sampler:
            yield
            self.sampler.stop_measuring()

    def read_peaks(self) -> tuple[list[float], str]:
        """(peak MiB per physical device since `start_measuring`, how it was obtained)."""
        source = self.memory.source
        if self.devices.emulated:
            source += f", shared by {len(self.devices)} logical devices"
        return self.memory.read_mib(), source

    @property
    def gpu_sampling(self) -> str:
        return self.sampler.source if self.sampler else "not a GPU run"

    def per_gpu(self) -> dict[str, dict]:
        return self.sampler.per_gpu() if self.sampler else {}


def count_tensors(placed_modules: Sequence, step: Callable[[], None], optimizer,
                  buffer_bytes: Callable[[], list[int] | None],
                  limit: DeviceLimit | None = None) -> list[float]:
    """Peak MiB per logical device over one step of its own (`step`, untimed), counted from
    its tensors: parameters, gradients and optimiser state after the step, the activations
    saved for backward at their most during it (saved-tensor hooks, installed for this step
    alone), and `buffer_bytes()` (what the strategy's library holds besides: DDP's buckets).
    With `limit`, a device whose count goes over it runs out (torch.OutOfMemoryError)."""
    tensors = TensorMemory(placed_modules, limit)
    try:
        step()
        tensors.after_step()
        return tensors.read_mib(optimizer, buffer_bytes())
    finally:
        tensors.close()


def counted_source(physical_source: str) -> str:
    """A record's `memory_source` where tensors were counted (`count_tensors`)."""
    return (f"{TENSORS_SOURCE}, counted in a step after the measured ones; physical: "
            f"{physical_source}")
