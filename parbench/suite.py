"""The suite: the fixed configurations that the CLI's quick comparison, the asv suite and the
pytest-benchmark suite all measure (append only: asv keeps a history for each)."""

from __future__ import annotations

import strategies
from parbench.config import Config
from parbench.devices import DeviceSet
from parbench.workloads import Workload

__all__ = ["GLOBAL_BATCH", "IMAGE_SIZE", "MODELS", "STEPS", "WARMUP", "cannot_run", "config",
           "runnable", "scaled_strategies", "workload", "world_sizes"]

# resnet18, batch 32, 128 px, 2 warm-up + 5 measured steps: about 20 s per strategy
# on two CPU cores.
MODELS = ("resnet18",)
GLOBAL_BATCH, IMAGE_SIZE, WARMUP, STEPS = 32, 128, 2, 5


def workload(model: str = MODELS[0]) -> Workload:
    return Workload(model=model, image_size=IMAGE_SIZE)


def config(strategy: str, devices: DeviceSet, model: str = MODELS[0], **options) -> Config:
    """One of the suite's configurations: `strategy` on `devices` with `options`."""
    return Config(strategy, workload(model), GLOBAL_BATCH, devices, warmup=WARMUP, steps=STEPS,
                  options=options)


def cannot_run(strategy: str, devices: DeviceSet, **options) -> str | None:
    """Why the suite's `strategy` cannot run on `devices` here (too few devices, a batch it
    cannot split, a machine that lacks what it needs), or None if it can."""
    plan = config(strategy, devices, **options).plan
    return None if plan.runs else plan.refusal.reason


def runnable(devices: DeviceSet) -> list[str]:
    """The registered strategies the suite measures on `devices` here, in registry order."""
    return [name for name in strategies.names() if cannot_run(name, devices) is None]


def world_sizes(devices: DeviceSet) -> list[int]:
    """1, 2, 4, ... up to the devices given: the data-parallel scaling curve."""
    sizes, n = [], 1
    while n <= len(devices):
        sizes.append(n)
        n *= 2
    return sizes


def scaled_strategies() -> list[str]:
    """The strategies whose number of ranks is swept (they take `world_size`)."""
    return strategies.takers("world_size")
