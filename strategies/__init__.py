"""The strategies parbench compares, by name: a registry of classes and their preset options."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from strategies.base import Strategy, StrategyError
from strategies.single import SingleDevice

__all__ = ["REGISTRY", "Strategy", "StrategyError", "available", "create", "lookup", "names"]


@dataclass(frozen=True)
class Entry:
    """A registered name: the class that implements it and the options it presets."""

    cls: type[Strategy]
    preset: dict = field(default_factory=dict)


REGISTRY: dict[str, Entry] = {
    "single": Entry(SingleDevice),
}


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


def create(name: str, workload, devices: Sequence[torch.device], **options) -> Strategy:
    entry = lookup(name)
    return entry.cls(workload, devices, **{**entry.preset, **options})
