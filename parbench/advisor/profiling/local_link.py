"""The link between the devices at hand, as `parbench collectives` measures it (every world size
a layout on them uses), measured once and kept beside the profiles."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from parbench import launch
from parbench.advisor.models.links import MeasuredLink
from parbench.families.workloads import Workload
from parbench.machine.devices import DeviceSet
from parbench.measure.collectives import COLLECTIVES
from parbench.plan.config import Config

__all__ = ["LINK_SIZES", "measured_link"]

# 4 KiB to 64 MiB by 4: a ResNet-50's gradient (98 MiB) is all-reduced in 25 MiB buckets, and
# the larger sizes on a CPU take seconds each.
LINK_SIZES = tuple(4096 * 4**i for i in range(8))
_VERSION = 1


def _world_sizes(devices: int) -> list[int]:
    """2 (a pipeline's transfer), every group a layout on `devices` forms, and all of them."""
    return sorted({2, devices, *(size for size in range(2, devices) if devices % size == 0)})


def measured_link(devices: DeviceSet, cache: Path, threads: int = 1,
                  sizes: Sequence[int] = LINK_SIZES) -> MeasuredLink:
    """The collectives of every world size a layout on `devices` uses, on their first ranks
    and the backend ddp would take, read from `cache` or measured there once."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"collectives-{devices.describe().replace(',', '+')}-t{threads}.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    if stored.get("version") != _VERSION or stored.get("sizes") != list(sizes):
        rows = []
        for world in _world_sizes(len(devices)):
            config = Config("ddp", Workload(), world, devices.take(world),
                            threads_per_device=threads)
            measured = launch.measure_collectives(config, list(COLLECTIVES), sizes, iterations=3,
                                                  warmup=1)
            rows += [dict(row, world_size=world, backend=config.plan.backend)
                     for row in measured]
        stored = dict(version=_VERSION, sizes=list(sizes), rows=rows)
        path.write_text(json.dumps(stored, indent=1) + "\n")
    return MeasuredLink(f"measured on {devices.describe()}", tuple(stored["rows"]))
