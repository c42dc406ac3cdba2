"""Which process group connects a configuration's ranks, and how many processes it takes."""

from __future__ import annotations

from parbench.config import Config
from parbench.devices import DeviceSet

__all__ = ["BACKENDS", "backend_for", "backend_problem", "process_group_backend",
           "world_size"]

BACKENDS = ("auto", "gloo", "nccl")


def process_group_backend(devices: DeviceSet, requested: str = "auto") -> str:
    """NCCL when every rank has a GPU of its own; gloo on CPU or where ranks share a GPU
    (NCCL refuses two ranks on one GPU); or what was asked for."""
    if requested != "auto":
        return requested
    return "nccl" if devices.kind == "cuda" and not devices.emulated else "gloo"


def backend_problem(devices: DeviceSet, requested: str) -> str | None:
    """Why `requested` cannot connect these devices' ranks, or None."""
    if requested not in BACKENDS:
        return f"unknown backend {requested!r}; choose from {', '.join(BACKENDS)}"
    if requested == "nccl" and devices.kind != "cuda":
        return (f"--backend nccl needs CUDA devices, got {devices.describe()}; use --backend "
                "gloo on CPU (or leave it at auto)")
    if requested == "nccl" and devices.emulated:
        return (f"--backend nccl refuses two ranks on one GPU ({devices.describe()}); use "
                "--backend gloo where ranks share a GPU (or leave it at auto)")
    return None


def backend_for(config: Config) -> str | None:
    """The process-group backend `config` runs on, or None for one-process strategies."""
    if not config.process_per_device:
        return None
    return process_group_backend(config.used_devices, config.backend)


def world_size(config: Config) -> int:
    """How many processes run `config`: one per device used, or this one alone."""
    return len(config.used_devices) if config.process_per_device else 1
