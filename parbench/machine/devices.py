"""Logical devices: parse a device list, check it exists here, map it onto physical devices."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

__all__ = ["DeviceError", "DeviceSet", "format_bytes", "host_memory_bytes", "parse_devices",
           "synchronize"]


class DeviceError(ValueError):
    """A device list that cannot be used on this machine."""


@dataclass(frozen=True)
class DeviceSet:
    """The logical devices one configuration runs on.

    A physical device may be named several times (`cpu,cpu`, `cuda:0,cuda:0`): each name is one
    logical device; the code path is the real one, only the hardware is shared, so the result is
    `emulated`.
    """

    logical: tuple[torch.device, ...]
    # The host of each logical device where they span nodes (torchrun); empty: this host.
    hosts: tuple[str, ...] = ()
    # torchrun agents (nodes) the ranks belong to; several may share one host on loopback.
    nodes: int = 1

    @property
    def physical(self) -> tuple[torch.device, ...]:
        """The distinct devices of this host (what one process can measure and synchronise)."""
        return tuple(dict.fromkeys(self.logical))

    def _places(self) -> list:
        return list(zip(self.hosts, self.logical, strict=True)) if self.hosts else list(
            self.logical)

    @property
    def emulated(self) -> bool:
        """Some physical device (on some host) is named more than once."""
        return self.physical_count < len(self.logical)

    @property
    def physical_count(self) -> int:
        """Distinct physical devices, over every host."""
        return len(set(self._places()))

    @property
    def spans_hosts(self) -> bool:
        return len(set(self.hosts)) > 1

    def take(self, count: int) -> DeviceSet:
        """The first `count` devices."""
        return DeviceSet(self.logical[:count], self.hosts[:count],
                         self.nodes if count == len(self.logical) else 1)

    @property
    def kind(self) -> str:
        return self.logical[0].type

    def __len__(self) -> int:
        return len(self.logical)

    def describe(self) -> str:
        if self.spans_hosts:
            return ",".join(f"{h}/{d}" for h, d in self._places())
        return ",".join(str(d) for d in self.logical)

    def describe_physical(self) -> str:
        places = dict.fromkeys(self._places())
        if self.spans_hosts:
            return ",".join(f"{h}/{d}" for h, d in places)
        return ",".join(str(d) for d in (p[1] if self.hosts else p for p in places))


def _normalise(name: str) -> torch.device:
    name = name.strip()
    if name == "cuda":
        name = "cuda:0"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceError(
            f"unknown device {name!r}; name devices like cpu, cuda:0 or cuda:0,cuda:1"
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise DeviceError(f"device type {device.type!r} is not supported; use cpu or cuda:N")
    if device.type == "cpu":
        return torch.device("cpu")
    return device


def parse_devices(spec: str) -> DeviceSet:
    """`cpu`, `cuda:0`, `cpu,cpu`, `cuda:0,cuda:1` -> a checked DeviceSet."""
    names = [n for n in spec.split(",") if n.strip()]
    if not names:
        raise DeviceError("no device given; use e.g. --devices cpu or --devices cuda:0")
    devices = tuple(_normalise(n) for n in names)
    if len({d.type for d in devices}) > 1:
        raise DeviceError(f"devices {spec!r} mix CPU and CUDA; give devices of one type")
    for device in devices:
        if device.type == "cuda":
            count = torch.cuda.device_count()
            if device.index >= count:
                hint = ("this machine has no CUDA device; use --devices cpu" if count == 0 else
                        f"this machine has {count} CUDA device(s): cuda:0..cuda:{count - 1}")
                raise DeviceError(f"device {device} is not available: {hint}")
    return DeviceSet(devices)


def cpu_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def host_memory_bytes() -> int | None:
    """This machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'; binary units up to PiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024:
            return f"{count:.3g} {unit}" if unit != "B" else f"{count:.0f} B"
        count /= 1024
    return f"{count:.3g} PiB"


def synchronize(devices: DeviceSet | tuple[torch.device, ...]) -> None:
    """Wait until every participating device has finished its queued work."""
    logical = devices.physical if isinstance(devices, DeviceSet) else dict.fromkeys(devices)
    for device in logical:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
