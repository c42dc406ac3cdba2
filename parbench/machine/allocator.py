"""glibc malloc held to one behaviour in every process parbench measures or profiles in: its
thresholds fixed, so that a step's large tensors reuse freed memory rather than being mapped
and faulted in anew each step, however much or little the process allocated before."""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["SETTINGS", "allocator_description", "pin_cpu_allocator", "unpad_heap"]

# glibc's own names for them (read from the environment when a process starts; mallopt's
# parameter numbers for this one). By default the mmap threshold moves with what a process has
# freed, so the same step faults in from 0.35 to 0.08 million pages depending on its history
# (resnet50, batch 32, on the CI VM: 2.15 s against 1.60 s a step).
SETTINGS = {"MALLOC_MMAP_THRESHOLD_": (-3, 32 * 2**20),  # glibc's largest on 64 bits
            "MALLOC_TRIM_THRESHOLD_": (-1, 2**31 - 1),
            "MALLOC_TOP_PAD_": (-2, 2**30)}
UNPADDED_TOP_PAD = 128 * 2**10  # glibc's default, under a memory cap (`unpad_heap`)


def _glibc():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _values() -> dict[str, int]:
    """The thresholds pinned: the environment's where the user set them, else parbench's."""
    return {name: int(os.environ.get(name, value)) for name, (_, value) in SETTINGS.items()}


def pin_cpu_allocator() -> None:
    """Fix malloc's thresholds in this process, and through the environment in every process
    it starts. Every measurement and profile calls it first; a no-op without glibc."""
    libc = _glibc()
    if libc is None:
        return
    for name, value in _values().items():
        os.environ[name] = str(value)
        libc.mallopt(SETTINGS[name][0], value)


def unpad_heap() -> None:
    """Give back the heap's unused top and grow it by what is asked only (glibc's default
    128 KiB pad) from now on, not by the pinned 1 GiB: a memory cap counts what a process
    holds, so the pad held already would raise the cap by a GiB, and one taken later would
    fail a small allocation (even torch's error-file write) in place of the one that exceeds
    it."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(SETTINGS["MALLOC_TOP_PAD_"][0], UNPADDED_TOP_PAD)
        libc.malloc_trim(0)


def allocator_description() -> str:
    """What a record says of the CPU allocator its measurement ran with."""
    if _glibc() is None:
        return "the platform's default (not glibc: thresholds not fixed)"
    return "glibc malloc, thresholds fixed: " + ", ".join(
        f"{name}={value}" for name, value in _values().items()) + (
        f"; under a memory cap MALLOC_TOP_PAD_={UNPADDED_TOP_PAD}")
