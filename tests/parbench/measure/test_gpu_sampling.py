"""The GPU sampler's choice of source (NVML, else GPUtil, else a reason) and its arithmetic,
checked with stand-ins for nvidia-ml-py and GPUtil (the real ones run in tests/gpu)."""

import sys
import time
import types

import pytest
import torch

from parbench.drive.runner import _gpu_fields
from parbench.measure.measurement import Measurement, merge
from parbench.measure.sampling import MIN_UTILISATION_SAMPLES, GpuSampler

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
        sampler.start_measuring()
        deadline = time.monotonic() + 5
        while len(sampler.samples) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        if isinstance(sys.modules.get("pynvml"), _FakeNvml):
            nvml = sys.modules["pynvml"]
            nvml.energy_mj = [mj + 250_000.0 * (1 + i) for i, mj in enumerate(nvml.energy_mj)]
        sampler.stop_measuring()


def test_nvml_is_preferred_and_gives_utilisation_memory_and_energy(monkeypatch):
    nvml = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    sampler = GpuSampler(GPUS, interval_s=0.01)
    _sample(sampler)
    assert sampler.source == "nvml"
    assert sampler.mean_utilisation() == [40.0, 50.0]
    assert sampler.max_memory_used_mib() == [1024.0, 2048.0]
    # 250 J and 500 J between start_measuring and stop_measuring (NVML counts mJ).
    assert sampler.energy_j == {"GPU-0": 250.0, "GPU-1": 500.0}
    # One call per reading: utilisation and memory, per GPU, per sample (and one at start).
    assert nvml.calls == 2 * len(GPUS) * (len(sampler.samples) + 1)
    assert nvml.shut_down
    assert sampler.per_gpu() == {
        "GPU-0": dict(utilisation_pct=40.0, memory_used_mib=1024.0, energy_j=250.0),
        "GPU-1": dict(utilisation_pct=50.0, memory_used_mib=2048.0, energy_j=500.0)}


def test_ranks_sharing_a_gpu_count_it_once():
    def rank(gpus):
        return Measurement(
            step_times_s=[1.0], total_s=1.0, warmup_step_times_s=[], losses=[0.5],
            host_step_times_s=[0.5], traced_step_s=None,
            peak_memory_mib=[1.0], physical_peak_memory_mib=[1.0], memory_after_step_mib=[1.0],
            memory_source="x", torch_threads=1, partition=None, timeline=[], bubble_fraction=0.0,
            micro_batches=1, pipeline_stages=1, gpu_sampling="nvml", gpus=gpus,
            compute_step_times_s=[], communication={})

    def recorded(*ranks):  # what the record gets from the ranks' merged measurement
        return types.SimpleNamespace(**_gpu_fields(merge(list(ranks)).gpus, images=300))

    gpu = lambda pct, joules: dict(utilisation_pct=pct, memory_used_mib=10.0 * pct,  # noqa: E731
                                   energy_j=joules)
    shared = recorded(rank({"GPU-0": gpu(80.0, 100.0)}), rank({"GPU-0": gpu(80.0, 100.0)}))
    assert shared.gpu_utilisation_pct == [80.0] and shared.gpu_energy_j == 100.0
    assert shared.images_per_joule == 3.0
    apart = recorded(rank({"GPU-0": gpu(80.0, 100.0)}), rank({"GPU-1": gpu(60.0, 50.0)}))
    assert apart.gpu_utilisation_pct == [80.0, 60.0]
    assert apart.gpu_memory_used_mib == [800.0, 600.0]
    assert apart.gpu_energy_j == 150.0
    unreported = recorded(rank({"GPU-0": gpu(80.0, 100.0)}), rank({"GPU-1": gpu(60.0, None)}))
    assert unreported.gpu_energy_j is None  # a total of some GPUs would mislead
    assert unreported.images_per_joule is None


def test_a_gpu_nvml_cannot_read_falls_back_to_gputil(monkeypatch):
    nvml = _FakeNvml()

    def unsupported(handle):
        raise nvml.NVMLError("Not Supported")

    nvml.nvmlDeviceGetUtilizationRates = unsupported
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpus = [types.SimpleNamespace(id=i, load=0.5, memoryUsed=100.0) for i in range(2)]
    monkeypatch.setitem(sys.modules, "GPUtil", types.SimpleNamespace(getGPUs=lambda: gpus))
    assert GpuSampler(GPUS).source == "GPUtil (nvidia-smi per sample)"


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


def test_utilisation_is_the_measured_steps_and_needs_enough_samples(monkeypatch):
    """The warm-up's samples (the GPU idle while cuDNN searches) are left out, and the
    window's first (NVML averages each reading over up to a second, so it reads the warm-up
    too); fewer than MIN_UTILISATION_SAMPLES left give none (5.7% for a 0.2 s window on an
    H200 before this)."""
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    sampler = GpuSampler(GPUS[:1])  # the thread is never started: samples are given by hand
    sampler.samples.extend([[(0.0, 100.0)]] * 5)  # warm-up
    sampler.start_measuring()
    sampler.samples.extend([[(90.0, 200.0)]] * MIN_UTILISATION_SAMPLES)  # one too few
    sampler.stop_measuring()
    sampler.samples.append([(0.0, 300.0)])  # after the window
    assert sampler.mean_utilisation() == []
    assert sampler.max_memory_used_mib() == [300.0]  # memory: every sample
    sampler.start_measuring()
    sampler.samples.extend([[(10.0, 200.0)], [(90.0, 200.0)], [(70.0, 200.0)], [(80.0, 200.0)]])
    sampler.stop_measuring()
    assert sampler.mean_utilisation() == [80.0]
