"""The Strategy interface: how one global batch becomes one optimiser update on some devices."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from parbench.workloads import Workload

__all__ = ["Strategy", "StrategyError"]


class StrategyError(ValueError):
    """A strategy asked to run where or how it cannot."""


class Strategy(ABC):
    """One way to train a workload on a list of logical devices.

    A strategy builds its model and optimiser in `setup` and performs exactly one optimiser
    update of the whole global batch per `train_step`. It never times, samples or writes
    anything: the harness does that around it.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    min_devices: ClassVar[int] = 1
    # How many of the given devices the strategy uses; None = all of them.
    max_devices: ClassVar[int | None] = None

    def __init__(self, workload: Workload, devices: Sequence[torch.device], **options) -> None:
        self.workload = workload
        self.devices = self.select_devices(devices)
        self.options = options

    @classmethod
    def select_devices(cls, devices: Sequence[torch.device]) -> tuple[torch.device, ...]:
        """The devices this strategy uses out of those given (refused if too few)."""
        if len(devices) < cls.min_devices:
            raise StrategyError(
                f"strategy {cls.name} needs at least {cls.min_devices} devices, "
                f"got {len(devices)} ({','.join(map(str, devices))}); "
                f"give more with --devices, e.g. --devices {','.join(['cpu'] * cls.min_devices)}"
            )
        return tuple(devices[: cls.max_devices] if cls.max_devices else devices)

    @classmethod
    def unavailable_reason(cls, devices: Sequence[torch.device]) -> str | None:
        """Why this machine cannot run the strategy on these devices (it is then recorded as
        skipped), or None if it can. Too few devices is a usage error, see `select_devices`."""
        return None

    @property
    def input_device(self) -> torch.device:
        """Where the harness creates each global batch."""
        return self.devices[0]

    @property
    def micro_batches(self) -> int:
        return 1

    @abstractmethod
    def setup(self) -> None:
        """Build the model, place it on the devices and create the optimiser."""

    @abstractmethod
    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimiser update over the global batch; returns the detached loss."""

    @property
    @abstractmethod
    def model(self) -> nn.Module:
        """The trained model (its parameters are what `parbench verify` compares)."""
