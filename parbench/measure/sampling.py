"""GPU utilisation, memory and energy sampled during a run: NVML where it is installed, GPUtil
(nvidia-smi) otherwise."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch

from parbench.measure.memory import MIB

__all__ = ["GpuSampler", "MIN_UTILISATION_SAMPLES"]

MIN_UTILISATION_SAMPLES = 3


def _nvml_index(device: torch.device) -> int:
    """NVML's (and nvidia-smi's) index of a CUDA device, which differs from torch's under
    CUDA_VISIBLE_DEVICES."""
    try:
        return torch.cuda._get_nvml_device_index(device)
    except Exception:  # a private helper: fall back to torch's own numbering
        return device.index or 0


class _Nvml:
    """NVML through nvidia-ml-py: one library call per reading, no process started."""

    source = "nvml"

    def __init__(self, indices: Sequence[int]) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.uuids = [self._text(pynvml.nvmlDeviceGetUUID(h)) for h in self._handles]
        self._read()  # raises here, not in the sampling thread, where NVML cannot read (vGPU)

    @staticmethod
    def _text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _read(self) -> list[tuple[float, float]]:
        nvml = self._nvml
        return [(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                 nvml.nvmlDeviceGetMemoryInfo(h).used / MIB) for h in self._handles]

    def read(self) -> list[tuple[float, float]]:
        try:
            return self._read()
        except self._nvml.NVMLError:  # a reading that fails is skipped, not the sampling
            return []

    def energy_mj(self) -> list[float] | None:
        """Energy each GPU used since its driver loaded, in mJ (None: not reported, as on GPUs
        before Volta)."""
        try:
            return [float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h))
                    for h in self._handles]
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class _Gputil:
    """GPUtil (what the project's design first named): it starts nvidia-smi for every
    reading, so it costs more than NVML; the fallback where nvidia-ml-py is missing."""

    source = "GPUtil (nvidia-smi per sample)"

    def __init__(self, indices: Sequence[int]) -> None:
        import GPUtil

        self._gputil = GPUtil
        self._indices = list(indices)
        self.uuids = [f"nvidia-smi:{i}" for i in self._indices]
        if not self.read():
            raise RuntimeError("no GPU reported by nvidia-smi")

    def read(self) -> list[tuple[float, float]]:
        try:
            gpus = {gpu.id: gpu for gpu in self._gputil.getGPUs()}
        except Exception:  # nvidia-smi missing or failing: GPUtil raises or returns []
            return []
        if not all(i in gpus for i in self._indices):
            return []
        return [(gpus[i].load * 100.0, float(gpus[i].memoryUsed)) for i in self._indices]

    def energy_mj(self) -> None:
        return None

    def close(self) -> None:
        pass


def _open_reader(indices: Sequence[int]):
    """NVML if nvidia-ml-py is installed and answers, else GPUtil; (reader, None) or (None,
    why neither can sample)."""
    reasons = []
    for reader in (_Nvml, _Gputil):
        try:
            return reader(indices), None
        except Exception as error:  # ImportError, NVMLError, distutils missing on 3.12, ...
            reasons.append(f"{reader.__name__.strip('_')}: {error.__class__.__name__}"
                           + (f" {error}" if str(error) else ""))
    return None, "no GPU sampling (" + "; ".join(reasons) + ")"


class GpuSampler:
    """Samples the given GPUs' utilisation and used memory in a background thread, and where
    NVML reports it, the energy they used between `start_measuring()` and `stop_measuring()`.
    Utilisation is averaged over the samples taken between those two calls alone (the warm-up
    idles the GPU while cuDNN searches and memory is allocated), less the first of them: NVML
    averages each reading over its own period (1/6 s to 1 s by GPU), so the first reads the
    warm-up too. None where fewer than MIN_UTILISATION_SAMPLES remain.

    `source` says how: "nvml", "GPUtil (nvidia-smi per sample)", or why nothing was sampled
    (then `per_gpu()` is empty).
    """

    def __init__(self, devices: Sequence[torch.device], interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.samples: list[list[tuple[float, float]]] = []  # per sample: (util %, MiB) per GPU
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader, why_not = _open_reader([_nvml_index(d) for d in devices])
        self.source = self._reader.source if self._reader else why_not
        self._energy_start: list[float] | None = None
        self._window: tuple[int, int | None] | None = None  # samples[start:end] measured
        self.energy_j: dict[str, float] = {}  # GPU uuid -> joules over the energy window

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            sample = self._reader.read()
            if sample:
                self.samples.append(sample)

    def __enter__(self) -> GpuSampler:
        if self._reader is not None:
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._reader is not None:
            self._reader.close()

    def start_measuring(self) -> None:
        """Open the window of the measured steps: utilisation and energy count from here."""
        self._window = (len(self.samples), None)
        self._energy_start = self._reader.energy_mj() if self._reader else None

    def stop_measuring(self) -> None:
        """Close the window: `energy_j` per GPU, empty where it is not reported."""
        if self._window is not None:
            self._window = (self._window[0], len(self.samples))
        end = self._reader.energy_mj() if self._reader else None
        if self._energy_start is None or end is None:
            return
        self.energy_j = {uuid: (stop - start) / 1000.0 for uuid, start, stop
                         in zip(self._reader.uuids, self._energy_start, end, strict=True)}

    def mean_utilisation(self) -> list[float]:
        """Mean utilisation % per GPU over the samples of the measured window but its first
        (empty where fewer than MIN_UTILISATION_SAMPLES remain, or it was never opened)."""
        if self._window is None:
            return []
        start, end = self._window
        measured = self.samples[start + 1:end]  # the first averages what ran before
        if len(measured) < MIN_UTILISATION_SAMPLES:
            return []
        return [float(np.mean([sample[i][0] for sample in measured]))
                for i in range(len(measured[0]))]

    def max_memory_used_mib(self) -> list[float]:
        if not self.samples:
            return []
        return [float(max(s[i][1] for s in self.samples)) for i in range(len(self.samples[0]))]

    def per_gpu(self) -> dict[str, dict]:
        """{GPU uuid: mean utilisation %, max used MiB, joules (each None where not sampled or
        reported)}: what processes sharing or splitting GPUs merge, each GPU once."""
        if self._reader is None:
            return {}
        missing = [None] * len(self._reader.uuids)
        return {uuid: dict(utilisation_pct=utilisation, memory_used_mib=memory,
                           energy_j=self.energy_j.get(uuid))
                for uuid, utilisation, memory in zip(
                    self._reader.uuids, self.mean_utilisation() or missing,
                    self.max_memory_used_mib() or missing, strict=True)}
