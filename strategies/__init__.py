"""The strategies parbench compares, by name: a registry of classes and their preset options."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from strategies.base import Strategy, StrategyError
from strategies.data_parallel import DataParallel
from strategies.ddp import DDP
from strategies.fsdp import FSDP
from strategies.model_parallel import ModelParallel
from strategies.pipeline import Pipeline
from strategies.pipeline_schedules import ScheduledPipeline
from strategies.single import SingleDevice

__all__ = [
    "BASELINE", "REGISTRY", "Strategy", "StrategyError", "accepted_options", "available",
    "create", "lookup", "names", "options_for", "skip_reason",
]


@dataclass(frozen=True)
class Entry:
    """A registered name: the class that implements it and the options it presets."""

    cls: type[Strategy]
    preset: dict = field(default_factory=dict)


REGISTRY: dict[str, Entry] = {
    "single": Entry(SingleDevice),
    "model-parallel": Entry(ModelParallel),
    "pipeline": Entry(Pipeline),
    "pipeline-gpipe": Entry(ScheduledPipeline, {"schedule": "gpipe"}),
    "pipeline-1f1b": Entry(ScheduledPipeline, {"schedule": "1f1b"}),
    "data-parallel": Entry(DataParallel),
    "ddp": Entry(DDP),
    "fsdp": Entry(FSDP),
}
# What speedups and efficiencies are measured against.
BASELINE = "single"


def names() -> list[str]:
    return list(REGISTRY)


def lookup(name: str) -> Entry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise StrategyError(
            f"unknown strategy {name!r}; available: {', '.join(names())}"
        ) from None


def available(devices: Sequence[torch.device]) -> dict[str, str | None]:
    """Every strategy name -> None if it can run on `devices` here, else the reason it cannot."""
    reasons = {}
    for name, entry in REGISTRY.items():
        try:
            entry.cls.select_devices(devices)
        except StrategyError as error:
            reasons[name] = str(error)
        else:
            reasons[name] = entry.cls.unavailable_reason(devices)
    return reasons


def skip_reason(name: str, workload, devices: Sequence[torch.device]) -> str | None:
    """Why strategy `name` cannot train `workload` on `devices` here (it is then recorded as
    skipped), or None if it can."""
    cls = lookup(name).cls
    try:
        cls.check_workload(workload)
    except StrategyError as error:
        return str(error)
    return cls.unavailable_reason(devices)


def accepted_options(name: str) -> tuple[str, ...]:
    """Option names the strategy takes from a sweep (`--split-size`, `--stages`, ...)."""
    return lookup(name).cls.option_names


def options_for(name: str, options: dict) -> dict:
    """The options, out of `options`, that strategy `name` takes and that are set."""
    accepted = accepted_options(name)
    return {k: v for k, v in options.items() if k in accepted and v is not None}


def create(name: str, workload, devices: Sequence[torch.device], **options) -> Strategy:
    entry = lookup(name)
    return entry.cls(workload, devices, **{**entry.preset, **options})
