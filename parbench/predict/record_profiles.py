"""The profiles a record's predictions need (its workload, device and threads at a micro-batch
size), each read from the cache, or measured, once per process."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from parbench.predict.profile import Profile, load_or_profile
from parbench.workloads import Workload

__all__ = ["DEFAULT_CACHE", "profiles_for"]

DEFAULT_CACHE = Path.home() / ".cache" / "parbench" / "profiles"


def profiles_for(record_like: dict, cache: Path | None = None,
                 device_kind: str | None = None) -> Callable[[int], Profile]:
    """The profiles of `record_like`'s workload on its device (`device_kind`: another) with its
    threads per device, by micro-batch size; a ValueError where that device is not here."""
    kind = device_kind or record_like["device_kind"]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("the run was measured on cuda and this machine has no GPU: predict "
                         "it on a machine with one (the profile is taken on the device)")
    workload = Workload(model=record_like["model"], image_size=int(record_like["image_size"]),
                        precision=record_like["precision"],
                        num_classes=int(record_like.get("num_classes") or 1000),
                        channels_last=bool(record_like.get("channels_last")),
                        compile=bool(record_like.get("compile")))
    threads = int(record_like.get("threads_per_device") or 1)
    return functools.partial(_profile, cache or DEFAULT_CACHE, workload, kind=kind,
                             threads=threads)


@functools.cache
def _profile(cache: Path, workload: Workload, micro_batch: int, kind: str, threads: int):
    """A profile read (or measured) once per process, however many records and sweep rows
    ask for it."""
    print(f"profile: {workload.model} {workload.image_size}px {workload.precision} "
          f"micro-batch {micro_batch} on {kind} ({threads} threads; cached in {cache})",
          file=sys.stderr, flush=True)
    return load_or_profile(cache, workload, micro_batch, kind, threads)
