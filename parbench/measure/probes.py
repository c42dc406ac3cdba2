"""What a worker reads around its steps: the allocator's peaks, the tensors each logical device
holds, the memory left after each step, and the GPUs' utilisation and energy."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from parbench.machine.devices import DeviceSet
from parbench.measure.memory import PeakMemory, allocated_mib
from parbench.measure.sampling import GpuSampler
from parbench.measure.tensors import SOURCE as TENSORS_SOURCE
from parbench.measure.tensors import DeviceLimit, TensorMemory

__all__ = ["Probes"]


@dataclass
class Probes:
    """The probes of one worker's devices, opened once its strategy is set up."""

    devices: DeviceSet
    memory: PeakMemory
    tensors: TensorMemory | None  # where a device's share is counted tensor by tensor
    sampler: GpuSampler | None  # on GPUs
    after_step_mib: list[float | None] = field(default_factory=list)  # after each measured step

    @classmethod
    def open(cls, devices: DeviceSet, placed_modules, limit: DeviceLimit | None = None
             ) -> Probes:
        """`limit`: each logical device's memory for its counted tensors (None: no limit)."""
        tensors = None
        if placed_modules is not None and (devices.kind == "cpu" or devices.emulated):
            # A CPU process's resident set includes the interpreter and libraries, and
            # logical devices sharing a physical one cannot be told apart by its counters:
            # count what each logical device holds instead.
            tensors = TensorMemory(placed_modules, limit)
        elif limit is not None:
            raise ValueError("--device-memory-mib counts each logical device's tensors, and "
                             "this strategy's devices cannot be told apart (nn.DataParallel); "
                             "give --memory-cap-mib instead")
        sampler = GpuSampler(devices.physical) if devices.kind == "cuda" else None
        return cls(devices, PeakMemory(devices), tensors, sampler)

    def start_measuring(self) -> None:
        """Peaks (of the measured steps, not of building the model) and energy count from
        here: the warm-up is done on every device."""
        self.memory.reset()
        if self.tensors is not None:
            self.tensors.reset()
        if self.sampler is not None:
            self.sampler.start_measuring()

    def drop_limit(self) -> None:
        """The devices' memory limit off: what follows is the harness's, not training's."""
        if self.tensors is not None:
            self.tensors.drop_limit()

    def step_done(self, measured: bool) -> None:
        if self.tensors is not None:
            self.tensors.after_step()  # what backward saved and did not use is freed now
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

    def read_memory(self, optimizer, buffer_bytes: list[int] | None = None
                    ) -> tuple[list[float], str, list[float]]:
        """(peak MiB per logical device, how it was obtained, peak MiB per physical device);
        `buffer_bytes`: what the strategy holds besides its tensors, per logical device
        (Strategy.buffer_bytes), added to the counted tensors."""
        physical = self.memory.read_mib()
        if self.tensors is not None:
            return (self.tensors.read_mib(optimizer, buffer_bytes),
                    f"{TENSORS_SOURCE}; physical: {self.memory.source}", physical)
        source = self.memory.source
        if self.devices.emulated:
            source += f", shared by {len(self.devices)} logical devices"
        return physical, source, physical

    @property
    def gpu_sampling(self) -> str:
        return self.sampler.source if self.sampler else "not a GPU run"

    def per_gpu(self) -> dict[str, dict]:
        return self.sampler.per_gpu() if self.sampler else {}

    def close(self) -> None:
        if self.tensors is not None:
            self.tensors.close()
