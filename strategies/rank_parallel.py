"""Data parallelism across processes: one rank per device, each training on its batch shard."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from strategies.base import Strategy, StrategyError
from strategies.stages import Stage

__all__ = ["RankDataParallel", "check_divisible"]


def check_divisible(name: str, global_batch: int, replicas: int) -> None:
    """Every replica trains on the same number of images, so the work is equal and the average
    of the replicas' gradients is the gradient of the global batch."""
    if global_batch % replicas:
        lower = global_batch - global_batch % replicas
        raise StrategyError(
            f"{name}: batch {global_batch} does not divide over {replicas} replicas; use a "
            f"multiple of {replicas}, e.g. --batch-size {lower or replicas} or "
            f"{lower + replicas}")


class RankDataParallel(Strategy):
    """Rank k drives devices[k] with a whole (or sharded) model and 1/N of the global batch.

    Subclasses wrap the model (`wrap`); this class shards the data, accounts memory per rank
    and hands the verifier the full parameters from rank 0.
    """

    min_devices = 1
    process_per_device = True

    @classmethod
    def check_config(cls, global_batch, devices, **options) -> None:
        check_divisible(cls.name, global_batch, len(cls.select_devices(devices, **options)))

    @classmethod
    def equivalent_accumulation(cls, global_batch, devices, **options) -> int | None:
        # Each replica's BatchNorm normalises over its own shard: single accumulating over the
        # same shards makes the same update.
        return global_batch // len(cls.select_devices(devices, **options))

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def input_device(self) -> torch.device:
        return self.devices[self.rank]

    @property
    def data_shard(self) -> tuple[int, int]:
        return self.rank, len(self.devices)

    @property
    def model(self) -> nn.Module:
        return self._module

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as trained by this strategy (placed on `input_device` already)."""
        raise NotImplementedError

    def setup(self) -> None:
        if dist.get_world_size() != len(self.devices):
            raise StrategyError(f"{len(self.devices)} replicas need {len(self.devices)} "
                                f"processes, got {dist.get_world_size()}")
        device = self.input_device
        self._module = self.workload.prepare_model(self.workload.build_model().to(device))
        self._module.train()
        self._wrapped = self.wrap(self._module)
        self._stage = Stage(self.rank, self._wrapped, device)
        self.loss_fn = self.workload.loss_fn()
        self.optimizer = self.workload.make_optimizer(self._wrapped.parameters())
        self.scaler = self.workload.make_grad_scaler(device)

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One update from this rank's shard; gradients are averaged over ranks in backward."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.workload.autocast(self.input_device):
            loss = self.loss_fn(self._stage.forward(images), labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._stage.release_saved()
        return loss.detach()

    def logical_memory_mib(self) -> list[float]:
        return [self._stage.memory_mib(self.optimizer)]

    def reset_logical_memory(self) -> None:
        self._stage.reset_peak()
