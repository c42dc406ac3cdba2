"""The Strategy interface: how one global batch becomes one optimiser update on some devices."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:
    from parbench.workloads import Workload

__all__ = ["ProcessPerDevice", "Strategy", "StrategyError"]


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
    # True: the launcher starts one process per device, each building the strategy with the
    # process group already initialised (rank k drives devices[k]).
    process_per_device: ClassVar[bool] = False
    # Options a sweep may set (`--split-size` -> split_size); others are not passed.
    option_names: ClassVar[tuple[str, ...]] = ()
    # Why the strategy cannot train in fp16 or under --compile (torch.compile), or None.
    fp16_refusal: ClassVar[str | None] = None
    compile_refusal: ClassVar[str | None] = None

    def __init__(self, workload: Workload, devices: Sequence[torch.device], **options) -> None:
        self.check_workload(workload)
        self.workload = workload
        self.devices = self.select_devices(devices, **options)
        self.options = {k: v for k, v in options.items() if v is not None}

    @classmethod
    def select_devices(cls, devices: Sequence[torch.device],
                       **options) -> tuple[torch.device, ...]:
        """The devices this strategy uses out of those given (refused if too few).

        The option `stages` (pipelines) or `world_size` (data parallel), where a strategy takes
        it, uses the first that many devices.
        """
        stages, ranks = options.get("stages"), options.get("world_size")
        needed = max(cls.min_devices, stages or ranks or 0)
        if len(devices) < needed:
            what = (f"{stages} stages need" if stages else
                    f"world size {ranks} needs" if ranks else "needs")
            example = ",".join([devices[0].type if devices else "cpu"] * needed)
            raise StrategyError(
                f"{what} at least {needed} devices, got {len(devices)} "
                f"({','.join(map(str, devices))}); list more with --devices, e.g. "
                f"--devices {example}"
            )
        count = stages or ranks or cls.max_devices
        return tuple(devices[:count] if count else devices)

    @classmethod
    def check_workload(cls, workload: Workload) -> None:
        """Refuse a workload this strategy cannot train (raise StrategyError saying why)."""
        if workload.precision == "fp16" and cls.fp16_refusal:
            raise StrategyError(cls.fp16_refusal)
        if workload.compile and cls.compile_refusal:
            raise StrategyError(cls.compile_refusal)

    @classmethod
    def check_config(cls, global_batch: int, devices: Sequence[torch.device],
                     **options) -> None:
        """Refuse, before anything runs, what this strategy cannot do with these devices, batch
        and options (raise StrategyError saying how to fix it)."""

    @classmethod
    def equivalent_accumulation(cls, global_batch: int, devices: Sequence[torch.device],
                                **options) -> int | None:
        """The micro-batch size over which `single`, accumulating gradients, makes exactly this
        strategy's update (BatchNorm normalises per micro-batch or per replica); None: the
        plain single-device step is the reference."""
        return options.get("split_size")

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
    def data_shard(self) -> tuple[int, int]:
        """(index, count): this process trains on part `index` of the global batch cut into
        `count` near-equal parts (data-parallel ranks); (0, 1) is the whole batch."""
        return 0, 1

    def trained_parameters(self) -> list[torch.Tensor]:
        """The parameters this process contributes to the model's parameter list, in order
        (a replica's rank 0 gives them all; a pipeline stage gives its own)."""
        return list(self.model.parameters())

    @property
    def micro_batches(self) -> int:
        """How many micro-batches each global batch is split into."""
        return 1

    @property
    def pipeline_stages(self) -> int:
        """How many sequential stages the model is cut into (1 = not cut)."""
        return 1

    def logical_memory_mib(self) -> list[float] | None:
        """Peak memory held per logical device since `reset_logical_memory`, where the strategy
        can attribute it itself (needed when logical devices share a physical one); else None."""
        return None

    def reset_logical_memory(self) -> None:
        """Start a new window for `logical_memory_mib`."""

    def prepare_training(self, parameters, loss_device: torch.device) -> None:
        """The workload's loss, its optimiser over `parameters`, and its gradient scaler for
        the device the loss is computed on: the same training for every strategy."""
        self.loss_fn = self.workload.loss_fn()
        self.optimizer = self.workload.make_optimizer(parameters)
        self.scaler = self.workload.make_grad_scaler(loss_device)

    def close(self) -> None:
        """Release what `setup` started (threads, process groups)."""

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


class ProcessPerDevice(Strategy):
    """A strategy run as one process per device: rank k drives devices[k] and is built with
    the process group already initialised."""

    process_per_device = True

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def input_device(self) -> torch.device:
        return self.devices[self.rank]
