"""The baseline: the whole model on one device."""

from __future__ import annotations

import torch
from torch import nn

from strategies.base import Strategy

__all__ = ["SingleDevice"]


class SingleDevice(Strategy):
    name = "single"
    summary = "whole model on one device (the first one given)"
    max_devices = 1

    def setup(self) -> None:
        device = self.devices[0]
        self._model = self.workload.prepare_model(self.workload.build_model().to(device))
        self._model.train()
        self.loss_fn = self.workload.loss_fn()
        self.optimizer = self.workload.make_optimizer(self._model.parameters())
        self.scaler = self.workload.make_grad_scaler(device)

    @property
    def model(self) -> nn.Module:
        return self._model

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.workload.autocast(self.devices[0]):
            loss = self.loss_fn(self._model(images), labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()
