"""Memory: peaks per device over the measured steps, what is held after each step and whether
it keeps rising, imbalance across devices, and caps to run out of memory under."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import resource
from collections.abc import Sequence

import numpy as np
import torch

from parbench.machine.allocator import unpad_heap
from parbench.machine.devices import DeviceSet

__all__ = ["MEMORY_KINDS", "MIB", "PeakMemory", "allocated_mib", "imbalance", "memory_cap",
           "memory_growth", "memory_kind"]

MIB = 2**20


@contextlib.contextmanager
def memory_cap(mib: int | None, devices: DeviceSet | None = None):
    """Let this process allocate at most `mib` MiB more than it holds now, until exit; None:
    no cap. On CUDA devices, each GPU's caching allocator is capped
    (`torch.cuda.set_per_process_memory_fraction`: beyond it allocations raise
    torch.OutOfMemoryError), so a card of 80 GB can run out at a size a test chooses; on CPU,
    the process's data segment (Linux RLIMIT_DATA: beyond it allocations fail as out of
    memory, as on a GPU), the heap no longer padded (`unpad_heap`).

    Yields `lifted`: a context in which the cap is off (what the harness does besides
    training, such as its compute-only steps, must not run out where training would not)."""
    if mib and devices is not None and devices.kind == "cuda":
        with _cuda_memory_cap(mib, devices.physical) as uncapped:
            yield uncapped
        return
    if mib:
        unpad_heap()  # before reading what the process holds
    data_kib = _read_status_kib("VmData") if mib else None
    if not mib or data_kib is None:
        yield contextlib.nullcontext
        return
    before = resource.getrlimit(resource.RLIMIT_DATA)
    capped = (data_kib * 1024 + mib * MIB, before[1])

    @contextlib.contextmanager
    def lifted():
        resource.setrlimit(resource.RLIMIT_DATA, before)
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_DATA, capped)

    resource.setrlimit(resource.RLIMIT_DATA, capped)
    try:
        yield lifted
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, before)


@contextlib.contextmanager
def _cuda_memory_cap(mib: int, gpus: Sequence[torch.device]):
    torch.cuda.empty_cache()  # what the allocator caches unused is not held
    fractions = {}
    for gpu in gpus:
        total = torch.cuda.get_device_properties(gpu).total_memory
        held = torch.cuda.memory_reserved(gpu)
        fractions[gpu] = min(1.0, (held + mib * MIB) / total)

    def set_fractions(capped: bool) -> None:
        for gpu, fraction in fractions.items():
            torch.cuda.set_per_process_memory_fraction(fraction if capped else 1.0, gpu)

    @contextlib.contextmanager
    def lifted():
        set_fractions(False)
        try:
            yield
        finally:
            set_fractions(True)

    set_fractions(True)
    try:
        yield lifted
    finally:
        torch.cuda.empty_cache()
        set_fractions(False)


def imbalance(values: Sequence[float]) -> float:
    """max / mean: 1.0 is perfectly balanced; 2.0 means the fullest device holds twice the mean."""
    values = [v for v in values if v is not None]
    if not values or sum(values) == 0:
        return float("nan")
    return max(values) / (sum(values) / len(values))


def _read_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            match = re.search(rf"{field}:\s+(\d+) kB", status.read())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _read_vm_hwm_kib() -> int | None:
    return _read_status_kib("VmHWM")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@functools.cache
def _mallinfo2():
    """glibc's mallinfo2, looked up once (it is read after every measured step); None off
    glibc."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    return mallinfo2


def _heap_in_use_bytes() -> int | None:
    """Bytes glibc's malloc has handed out and not taken back (torch's CPU tensors among
    them); unlike the resident set it falls as soon as memory is freed. None off glibc."""
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return None
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def allocated_mib(devices: DeviceSet) -> float | None:
    """Memory held right now: CUDA tensors on these GPUs; on CPU, malloc's bytes in use (or
    the resident set where that cannot be read)."""
    if devices.kind == "cuda":
        return sum(torch.cuda.memory_allocated(d) for d in devices.physical) / MIB
    in_use = _heap_in_use_bytes()
    if in_use is not None:
        return in_use / MIB
    rss = _read_status_kib("VmRSS")
    return rss / 1024 if rss is not None else None


def memory_growth(after_step_mib: Sequence[float | None], min_slope_mib: float = 1.0
                  ) -> tuple[float | None, bool]:
    """(least-squares growth in MiB per step, whether it is a steady rise: a leak, such as a
    loss accumulated as a tensor that keeps every step's graph alive).

    A rise is steady when memory grows by at least `min_slope_mib` per step, rises between at
    least half of the consecutive steps (a resident set grows in chunks, with plateaus) and
    falls between at most one pair; 3 steps at least are needed to say.
    """
    values = [v for v in after_step_mib if v is not None]
    if len(values) < 3:
        return None, False
    slope = float(np.polyfit(np.arange(len(values)), values, 1)[0])
    pairs = list(zip(values[:-1], values[1:], strict=True))
    rises = sum(b > a for a, b in pairs)
    falls = sum(b < a for a, b in pairs)
    return slope, slope >= min_slope_mib and 2 * rises >= len(pairs) and falls <= 1


# What a record's `memory_source` counted (its first words), for labels and for comparing
# like with like: counted tensors leave out what allocator peaks hold besides them (cuDNN's
# workspace, the input batch, gradients freed within backward), and a process's resident set
# holds the interpreter and libraries too.
MEMORY_KINDS = {"tensors per logical device": "tensors counted",
                "cuda max_memory_allocated": "allocator peaks",
                "process peak RSS": "process RSS"}


def memory_kind(source: str | None) -> str:
    """What `source` (a record's `memory_source`) counted, in two words: one of
    MEMORY_KINDS' values, or "unknown"."""
    return next((kind for prefix, kind in MEMORY_KINDS.items()
                 if str(source or "").startswith(prefix)), "unknown")


class PeakMemory:
    """Peak memory of each physical device over a window opened by `reset()`.

    CUDA: the caching allocator's peak allocated bytes per device.
    CPU: the process's peak resident set size (Linux VmHWM, reset through /proc/self/clear_refs
    at the start of the window); it includes the Python interpreter and libraries, so it is an
    upper bound on what the training itself needs.
    """

    def __init__(self, devices: DeviceSet) -> None:
        self.devices = devices.physical
        self._can_reset_rss = True

    @property
    def source(self) -> str:
        if self.devices[0].type == "cuda":
            return "cuda max_memory_allocated per physical device"
        if self._can_reset_rss:
            return "process peak RSS (VmHWM) over the measured steps"
        return "process peak RSS since start (VmHWM could not be reset)"

    def reset(self) -> None:
        for device in self.devices:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
        if any(d.type == "cpu" for d in self.devices):
            try:
                with open("/proc/self/clear_refs", "w") as clear_refs:
                    clear_refs.write("5")
            except OSError:
                self._can_reset_rss = False

    def read_mib(self) -> list[float]:
        """Peak MiB per physical device, in device order."""
        peaks = []
        for device in self.devices:
            if device.type == "cuda":
                peaks.append(torch.cuda.max_memory_allocated(device) / MIB)
            else:
                kib = _read_vm_hwm_kib()
                peaks.append(kib / 1024 if kib is not None else float("nan"))
        return peaks
