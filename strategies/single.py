"""The baseline: the whole model on one device."""

from __future__ import annotations

import torch
from torch import nn

from strategies.base import Strategy
from strategies.stages import Stage, micro_batch_sizes

__all__ = ["SingleDevice"]


class SingleDevice(Strategy):
    """The whole model on the first device given.

    With `accumulation_split` the global batch is split into the same micro-batches a pipeline
    uses and their gradients are accumulated before the one update: the exact reference for
    pipelined strategies (BatchNorm sees the same micro-batches).
    """

    name = "single"
    summary = "whole model on one device (the first one given)"
    max_devices = 1

    def __init__(self, workload, devices, accumulation_split: int | None = None,
                 **options) -> None:
        super().__init__(workload, devices, accumulation_split=accumulation_split, **options)
        self.accumulation_split = accumulation_split

    def setup(self) -> None:
        device = self.devices[0]
        self._model = self.workload.build_model_on(device)
        self._stage = Stage(0, self.workload.compiled(self._model), device)
        self.prepare_training(self._model.parameters(), device)

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def micro_batches(self) -> int:
        return getattr(self, "_micro_batches", 1)

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        global_batch = len(images)
        sizes = (micro_batch_sizes(global_batch, self.accumulation_split)
                 if self.accumulation_split else [global_batch])
        self._micro_batches = len(sizes)
        total = torch.zeros((), device=self.devices[0])
        for chunk, chunk_labels in zip(images.split(sizes), labels.split(sizes), strict=True):
            with self.workload.autocast(self.devices[0]):
                loss = self.loss_fn(self._stage.forward(chunk), chunk_labels)
                loss = loss * (len(chunk) / global_batch) if len(sizes) > 1 else loss
            self.scaler.scale(loss).backward()
            total += loss.detach().float()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._stage.release_saved()
        return total

    def logical_memory_mib(self) -> list[float]:
        return [self._stage.memory_mib(self.optimizer)]

    def reset_logical_memory(self) -> None:
        self._stage.reset_peak()
