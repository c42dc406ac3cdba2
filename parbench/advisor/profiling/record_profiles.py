"""The profiles a record's predictions need (its workload, device and threads at a micro-batch
size, slowed as much as its emulated devices slow each other computing at once on one CPU: in
lock-step where its ranks wait for the slowest every step, as data parallel's do), each read
from the cache, or measured, once per process."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from parbench.advisor.profiling.contention import Sharing, load_or_measure_slowdown
from parbench.advisor.profiling.profile import Profile, load_or_profile
from parbench.families.workloads import Workload
from parbench.machine.devices import cpu_cores
from parbench.strategies import Layout, layout_of

__all__ = ["DEFAULT_CACHE", "profiles_for", "workload_of"]

DEFAULT_CACHE = Path.home() / ".cache" / "parbench" / "profiles"


def profiles_for(record_like: dict, cache: Path | None = None,
                 device_kind: str | None = None) -> Callable[[int], Profile]:
    """The profiles of `record_like`'s workload on its device (`device_kind`: another) with its
    threads per device, by micro-batch size; a ValueError where that device is not here."""
    kind = device_kind or record_like["device_kind"]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("the run was measured on cuda and this machine has no GPU: predict "
                         "it on a machine with one (the profile is taken on the device)")
    workload = workload_of(record_like)
    threads = int(record_like.get("threads_per_device") or 1)
    at_once = _devices_computing_at_once(record_like) if kind == "cpu" else 1
    layout = layout_of(str(record_like.get("strategy")))
    return functools.partial(_profile, cache or DEFAULT_CACHE, workload, kind=kind,
                             threads=threads, at_once=at_once,
                             lockstep=layout is not None and layout.data_parallel)


def workload_of(record_like: dict) -> Workload:
    """What a record trained: its model, images, classes, precision and memory format."""
    return Workload(model=record_like["model"], image_size=int(record_like["image_size"]),
                    precision=record_like["precision"],
                    num_classes=int(record_like.get("num_classes") or 1000),
                    channels_last=bool(record_like.get("channels_last")),
                    compile=bool(record_like.get("compile")))


def _devices_computing_at_once(record: dict) -> int:
    """How many of the record's logical devices compute at the same time on its one CPU: all
    of them, but for single and model-parallel (one stage after the other)."""
    if not record.get("emulated") or layout_of(str(record.get("strategy"))) in (
            Layout.ONE_DEVICE, Layout.STAGES_IN_TURN):
        return 1
    return len(str(record.get("devices") or "cpu").split(","))


@functools.cache
def _profile(cache: Path, workload: Workload, micro_batch: int, kind: str, threads: int,
             at_once: int = 1, lockstep: bool = False) -> Profile:
    """A profile read (or measured) once per process, however many records and sweep rows
    ask for it; where `at_once` devices share the CPU, slowed by what that costs each (with
    `lockstep`, every step waiting for the slowest of them)."""
    print(f"profile: {workload.model} {workload.image_size}px {workload.precision} "
          f"micro-batch {micro_batch} on {kind} ({threads} threads; cached in {cache})",
          file=sys.stderr, flush=True)
    profile = load_or_profile(cache, workload, micro_batch, kind, threads)
    if at_once == 1:
        return profile
    slowdown = load_or_measure_slowdown(cache, workload, micro_batch, at_once, threads,
                                        lockstep)
    print(f"contention: {at_once} processes computing at once on this CPU each take "
          f"{slowdown:.3f}x as long{' in lock-step' if lockstep else ''} (micro-batch "
          f"{micro_batch}; measured once, cached)",
          file=sys.stderr, flush=True)
    sharing = Sharing(at_once, cpu_cores(), threads, slowdown)
    return replace(profile.scaled_to(profile.step_compute_s * slowdown), sharing=sharing)
