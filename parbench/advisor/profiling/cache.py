"""What a prediction measures once and keeps: JSON files read back while their version is
current, measured and written otherwise, each named by the settings it was measured at."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from parbench.results.folder import atomic_write_text

__all__ = ["cached", "settings_key"]


def settings_key(what, device: str, threads: int, micro_batch: int) -> str:
    """A file name's stem for what was measured of `what` (a Workload or a Profile: its model,
    image size, classes, precision and memory format) on `device` with `threads` threads at
    `micro_batch` images."""
    layout = "-channels-last" if what.channels_last else ""
    return (f"{what.model}-{what.image_size}px-{what.num_classes}cls-{what.precision}"
            f"{layout}-{device}-{threads}t-b{micro_batch}")


def cached(path: Path, version: int, measure: Callable[[], dict]) -> dict:
    """What `path` holds if it was measured at `version`; else `measure()`'s fields, written
    there first (with the version)."""
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("version") == version:
            return stored
    fresh = {"version": version, **measure()}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(fresh, indent=1))
    return fresh
