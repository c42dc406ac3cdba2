"""Naive model parallelism: stage k on device k, the whole batch passed from stage to stage."""

from __future__ import annotations

import torch
from torch import nn

from strategies.base import Strategy
from strategies.partition import default_balance
from strategies.stages import build_stages

__all__ = ["ModelParallel"]


class ModelParallel(Strategy):
    """The tutorial's `ModelParallelResNet50`: only one device works at any time."""

    name = "model-parallel"
    summary = "stage k on device k, whole batch through each stage in turn (one process)"
    min_devices = 2
    option_names = ("stages", "balance")

    def __init__(self, workload, devices, stages: int | None = None, balance: str | None = None,
                 **options) -> None:
        super().__init__(workload, devices, stages=stages, **options)
        self.balance = balance or default_balance(len(self.devices))
        self.options = {**self.options, "stages": len(self.devices), "balance": self.balance}

    def setup(self) -> None:
        self.partition, self.stages = build_stages(self.workload, self.devices, self.balance,
                                                   sample_batch=8)
        self.options["partition"] = self.partition.describe()
        self._model = nn.Sequential(*(stage.module for stage in self.stages))
        self.prepare_training(self._model.parameters(), self.devices[-1])

    @property
    def model(self) -> nn.Module:
        return self._model

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        activations = images
        for stage in self.stages:
            with self.workload.autocast(stage.device):
                activations = stage.forward(activations.to(stage.device))
        last = self.stages[-1].device
        with self.workload.autocast(last):
            loss = self.loss_fn(activations, labels.to(last))
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        for stage in self.stages:
            stage.release_saved()
        return loss.detach()

    @property
    def pipeline_stages(self) -> int:
        return len(self.devices)

    def logical_memory_mib(self) -> list[float]:
        return [stage.memory_mib(self.optimizer) for stage in self.stages]

    def reset_logical_memory(self) -> None:
        for stage in self.stages:
            stage.reset_peak()
