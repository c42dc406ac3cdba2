"""The suite: the sweep that the CLI's quick comparison, the asv suite and the pytest-benchmark
suite all measure, as one spec (append only: asv keeps a history for each)."""

from __future__ import annotations

import dataclasses

from parbench import strategies
from parbench.families.workloads import Workload
from parbench.machine.devices import DeviceSet, parse_devices
from parbench.plan import SweepSpec
from parbench.plan.config import Config

__all__ = ["GLOBAL_BATCH", "IMAGE_SIZE", "MODELS", "REPEATS", "STEPS", "WARMUP", "cannot_run",
           "config", "runnable", "scaled_strategies", "scaling_spec", "spec", "workload",
           "world_sizes"]

# resnet18, batch 32, 128 px, 1 warm-up + 3 measured steps per trial, 3 trials: a trial takes
# 5 to 10 s on two CPU cores, of which 0 to 7 s start its processes and build the model. Trials
# rather than steps, since the spread is between trials: over 3 trials of 5 steps
# (20261124T125852Z), a trial's median step varied by 1 to 9% (coefficient of variation) where
# its steps varied by 2 to 5%, so 5 steps pin a trial's median to about 1 to 2%.
MODELS = ("resnet18",)
GLOBAL_BATCH, IMAGE_SIZE, WARMUP, STEPS, REPEATS = 32, 128, 1, 3, 3


def spec(devices: str) -> SweepSpec:
    """The quick comparison on `devices` (a logical device list): every strategy that can run
    there, on the suite's job, in REPEATS trials. `parbench run` with no --strategy measures
    it, and asv and pytest-benchmark measure exactly its sweep, baselines included."""
    return SweepSpec(strategies=None, models=MODELS, batch_sizes=(GLOBAL_BATCH,),
                     image_sizes=(IMAGE_SIZE,), devices=(devices,), warmup=WARMUP, steps=STEPS,
                     repeats=REPEATS)


def scaling_spec(devices: str) -> SweepSpec | None:
    """The data-parallel strategies that can run on `devices`, at 1, 2, 4, ... ranks up to
    them (asv's scaling curve); None where none can."""
    device_set = parse_devices(devices)
    names = tuple(name for name in scaled_strategies() if cannot_run(name, device_set) is None)
    if not names:
        return None
    ranks = world_sizes(device_set)
    return dataclasses.replace(spec(devices), strategies=names,
                               options=tuple({"world_size": n} for n in ranks))


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
    return None if plan.refusal is None else plan.refusal.reason


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


def _splits_layers(name: str) -> bool:
    layout = strategies.layout_of(name)
    return layout is not None and layout.splits_layers


def scaled_strategies() -> list[str]:
    """The data-parallel strategies, whose number of ranks is swept (they take `world_size`;
    tensor parallelism's ranks split each layer, and a ResNet, the suite's model, has none it
    splits)."""
    return [name for name in strategies.takers("world_size")
            if not _splits_layers(name)]
