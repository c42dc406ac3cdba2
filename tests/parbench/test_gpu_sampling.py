"""The GPU sampler's choice of source (NVML, else GPUtil, else a reason) and its arithmetic,
checked with stand-ins for nvidia-ml-py and GPUtil (the real ones run in tests/gpu)."""

import sys
import time
import types

import pytest
import torch

from parbench.gpu_sampling import GpuSampler

GPUS = (torch.device("cuda", 0), torch.device("cuda", 1))


class _FakeNvml(types.ModuleType):
    """pynvml's calls that the sampler makes, for two GPUs; counts every call."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy_supported: bool = True) -> None:
        super().__init__("pynvml")
        self.calls = 0
        self.energy_mj = [1_000_000.0, 5_000_000.0]
        self.energy_supported = energy_supported
        self.shut_down = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.calls += 1
        return types.SimpleNamespace(gpu=40 + 10 * handle)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.calls += 1
        return types.SimpleNamespace(used=(1 + handle) * 2**30)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy_supported:
            raise self.NVMLError("Not Supported")
        return self.energy_mj[handle]


def _sample(sampler: GpuSampler) -> None:
    with sampler:
        sampler.start_energy()
        deadline = time.monotonic() + 5
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        if isinstance(sys.modules.get("pynvml"), _FakeNvml):
            nvml = sys.modules["pynvml"]
            nvml.energy_mj = [mj + 250_000.0 * (1 + i) for i, mj in enumerate(nvml.energy_mj)]
        sampler.stop_energy()


def test_nvml_is_preferred_and_gives_utilisation_memory_and_energy(monkeypatch):
    nvml = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    sampler = GpuSampler(GPUS, interval_s=0.01)
    _sample(sampler)
    assert sampler.source == "nvml"
    assert sampler.mean_utilisation() == [40.0, 50.0]
    assert sampler.max_memory_used_mib() == [1024.0, 2048.0]
    # 250 J and 500 J between start_energy and stop_energy (NVML counts mJ).
    assert sampler.energy_j == {"GPU-0": 250.0, "GPU-1": 500.0}
    # One call per reading: utilisation and memory, per GPU, per sample.
    assert nvml.calls == 2 * len(GPUS) * len(sampler.samples)
    assert nvml.shut_down


def test_energy_is_left_out_where_nvml_does_not_report_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(energy_supported=False))
    sampler = GpuSampler(GPUS, interval_s=0.01)
    _sample(sampler)
    assert sampler.source == "nvml"
    assert sampler.samples
    assert sampler.energy_j == {}


def test_gputil_is_the_fallback_and_says_how_it_samples(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as when not installed
    gpus = [types.SimpleNamespace(id=i, load=0.25 * (i + 1), memoryUsed=100.0 * (i + 1))
            for i in range(3)]
    monkeypatch.setitem(sys.modules, "GPUtil", types.SimpleNamespace(getGPUs=lambda: gpus))
    sampler = GpuSampler(GPUS, interval_s=0.01)
    _sample(sampler)
    assert sampler.source == "GPUtil (nvidia-smi per sample)"
    assert sampler.mean_utilisation() == [25.0, 50.0]  # the run's two GPUs, not the third
    assert sampler.max_memory_used_mib() == [100.0, 200.0]
    assert sampler.energy_j == {}


def test_without_nvml_or_gputil_nothing_is_sampled_and_the_record_says_why(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "GPUtil", None)
    sampler = GpuSampler(GPUS, interval_s=0.01)
    with sampler:
        time.sleep(0.05)
    assert sampler.source.startswith("no GPU sampling (")
    assert "Nvml" in sampler.source and "Gputil" in sampler.source
    assert sampler.mean_utilisation() == []
    assert sampler.energy_j == {}
