"""What training one global batch costs with each strategy: throughput, memory, scaling.

Every benchmark reads the one measurement `common.Measured.setup_cache` makes (a geometric
mean over parbench's trials): asv starts a fresh interpreter for every parameter combination
(launch_method spawn), which imports nothing heavier than this module; a combination that
cannot run here is skipped with the reason its plan gives.
"""

from types import SimpleNamespace

from asv_runner.benchmarks.mark import SkipNotImplemented

from . import common


def _record(cache, strategy, model, world_size=None):
    figures = cache.get((strategy, model, world_size))
    if figures is None or figures["status"] != "ok":
        raise SkipNotImplemented(figures["reason"] if figures else "not measured here")
    return SimpleNamespace(**figures)


class Throughput(common.Measured):
    """Images per second of each strategy on the same global batch."""

    params = (common.STRATEGIES, common.MODELS)
    param_names = ("strategy", "model")

    def track_throughput(self, cache, strategy, model):
        return _record(cache, strategy, model).throughput_ips

    track_throughput.unit = "images/s"  # type: ignore[attr-defined]  # asv reads it


class MemoryImbalance(common.Measured):
    """How unevenly a strategy loads its devices: the fullest device's peak over the mean."""

    params = (common.STRATEGIES, common.MODELS)
    param_names = ("strategy", "model")

    def track_memory_imbalance(self, cache, strategy, model):
        return _record(cache, strategy, model).memory_imbalance

    track_memory_imbalance.unit = "max/mean"  # type: ignore[attr-defined]  # asv reads it


class MemoryPerDevice(common.Measured):
    """Peak memory of each logical device the strategy uses."""

    params = (common.STRATEGIES, common.MODELS, list(range(common.device_count())))
    param_names = ("strategy", "model", "device")

    def track_peak_memory(self, cache, strategy, model, device):
        peaks = _record(cache, strategy, model).peak_memory_mib
        if device >= len(peaks):
            raise SkipNotImplemented(f"{strategy} uses {len(peaks)} device(s)")
        return peaks[device]

    track_peak_memory.unit = "MiB"  # type: ignore[attr-defined]  # asv reads it


class DataParallelScaling(common.Measured):
    """How data-parallel throughput grows with ranks: the efficiency T(N) / (N x T(1))."""

    params = (common.DATA_PARALLEL, common.MODELS, common.world_sizes())
    param_names = ("strategy", "model", "world_size")

    def track_scaling_efficiency(self, cache, strategy, model, world_size):
        return _record(cache, strategy, model, world_size).scaling_efficiency

    track_scaling_efficiency.unit = "T(N)/(N*T(1))"  # type: ignore[attr-defined]  # asv reads it
