"""The baseline: the whole model on one device."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from parbench.strategies.base import (
    ACCUMULATED_GRADIENTS_OVERWRITTEN,
    WITHOUT_CUDA_GRAPHS,
    Layout,
    Strategy,
)
from parbench.strategies.errors import StrategyError
from parbench.strategies.options import Options, option
from parbench.strategies.stages import micro_batch_sizes

__all__ = ["SingleDevice", "SingleOptions", "accumulating"]


def accumulating(split: int | None) -> dict:
    """The baseline's options to accumulate gradients over micro-batches of `split` (None:
    the whole batch at once)."""
    return {"accumulation_split": split} if split else {}


@dataclass(frozen=True)
class SingleOptions(Options):
    """Whether the one device accumulates gradients over micro-batches."""

    accumulation_split: int | None = option(
        minimum=1, label="accumulate", help="accumulate gradients over micro-batches of this "
        "size before the one update: the pipelines' same-micro-batch baseline (default: the "
        "whole batch at once)")

    def micro_batch_size(self) -> int | None:
        return self.accumulation_split

    def check(self, workload, global_batch, devices) -> None:
        split = self.accumulation_split
        if split is not None and split > global_batch:
            raise StrategyError(f"--accumulation-split {split} is larger than "
                                f"--batch-size {global_batch}")
        if split and split < global_batch and workload.captures_cuda_graphs:
            raise StrategyError(f"--accumulation-split {split} accumulates gradients over "
                                f"micro-batches, and under --compile-mode "
                                f"{workload.compile_mode} {ACCUMULATED_GRADIENTS_OVERWRITTEN}; "
                                f"{WITHOUT_CUDA_GRAPHS}, or drop --accumulation-split")


class SingleDevice(Strategy):
    """The whole model on the first device given.

    With `--accumulation-split` the global batch is split into the same micro-batches a pipeline
    uses and their gradients are accumulated before the one update: the exact reference for
    pipelined strategies (BatchNorm sees the same micro-batches).
    """

    summary = "whole model on one device (the first one given)"
    layout = Layout.ONE_DEVICE
    max_devices = 1
    Options = SingleOptions
    options: SingleOptions

    def setup(self) -> None:
        device = self.devices[0]
        # Under --compile, each of its blocks compiled in place (the model is what it was), or
        # the model whole.
        self._model = self.workload.compiled(self.workload.build_model_on(device))
        self.prepare_training(self._model.parameters(), device)

    @property
    def model(self) -> nn.Module:
        return self._model

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        global_batch = len(images)
        split = self.options.accumulation_split
        sizes = micro_batch_sizes(global_batch, split) if split else [global_batch]
        total = torch.zeros((), device=self.devices[0])
        for chunk, chunk_labels in zip(images.split(sizes), labels.split(sizes), strict=True):
            with self.workload.autocast(self.devices[0]):
                loss = self.loss_fn(self._model(chunk), chunk_labels)
                loss = loss * (len(chunk) / global_batch) if len(sizes) > 1 else loss
            self.scaler.scale(loss).backward()
            total += loss.detach().float()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return total

    def placed_modules(self) -> list[nn.Module]:
        return [self._model]
