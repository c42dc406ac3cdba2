"""Naive model parallelism: stage k on device k, the whole batch passed from stage to stage."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from typing_extensions import Self  # typing's from Python 3.11

from parbench.strategies.base import Layout, Strategy
from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError, Unavailable
from parbench.strategies.options import Options, option
from parbench.strategies.partition import BALANCES, Partition, default_balance, plan_cut
from parbench.strategies.stages import Stage, build_stages, timing_batch

__all__ = ["ModelParallel", "StageOptions", "place_stages"]


@dataclass(frozen=True)
class StageOptions(Options):
    """How the model is cut into stages, one per device."""

    stages: int | None = option(minimum=2, label="K", help="pipeline stages, using the first "
                                "N devices (default: one per device)")
    balance: str | None = option(
        choices=BALANCES, label="cut", help="where to cut the model: tutorial (the 2 stages "
        "its family declares, e.g. conv1..layer2 | layer3..fc), time (equal measured time), "
        "params (equal parameter counts) (default: tutorial for 2 stages, else time)")

    def device_count(self) -> int | None:
        return self.stages

    def device_count_text(self) -> str:
        return f"{self.stages} stages need"

    def pieces(self, devices) -> int:
        """How many stages the model is cut into: one per device."""
        return len(devices)

    def parallel_dims(self, devices) -> ParallelDims:
        return ParallelDims(stages=len(devices))

    def check(self, workload, global_batch, devices) -> None:
        if self.balance == "tutorial" and self.pieces(devices) != 2:
            raise StrategyError(f"--balance tutorial cuts into 2 stages only, not "
                                f"{self.pieces(devices)}; use --balance time or params")
        # The cut is planned on a meta-device model (no memory, no compute); timing needs real
        # data, and the structural checks are the same for every balance.
        with torch.device("meta"):
            model = workload.build_model()
        blocks, pieces = len(workload.family.blocks(model)), self.pieces(devices)
        if pieces > blocks:  # the device list is what cannot be run: skipped in a comparison
            most = blocks * len(devices) // pieces
            raise Unavailable(f"{pieces} stages on {len(devices)} devices, but {workload.model} "
                              f"has {blocks} blocks to cut; use at most {most} devices "
                              f"(--devices, or --stages {most})")
        plan_cut(workload, model, pieces,
                 "params" if self.balance in (None, "time") else self.balance)

    def resolved(self, global_batch, devices) -> Self:
        return replace(self, stages=len(devices),
                       balance=self.balance or default_balance(self.pieces(devices)))


class ModelParallel(Strategy):
    """The tutorial's naive model parallelism: only one device works at any time."""

    summary = "stage k on device k, whole batch through each stage in turn (one process)"
    layout = Layout.STAGES_IN_TURN
    min_devices = 2
    Options = StageOptions
    options: StageOptions

    def setup(self) -> None:
        self._partition, self.stages, self._model = place_stages(self)

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def partition(self) -> str:
        return self._partition.describe()

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        # Stage by stage, forward then backward in reverse, across detached boundaries: the
        # same update as one autograd pass, with each stage's part marked (`action`).
        inputs: list[torch.Tensor] = []
        outputs: list[torch.Tensor] = []
        activations = images
        for k, stage in enumerate(self.stages):
            with self.action(k, 0, "F"), self.workload.autocast(stage.device):
                x = activations.to(stage.device)
                if k:
                    x = x.detach().requires_grad_()
                inputs.append(x)
                activations = stage.module(x)
                if k == len(self.stages) - 1:
                    loss = self.loss_fn(activations, labels.to(stage.device))
            outputs.append(activations)
        for k in reversed(range(len(self.stages))):
            with self.action(k, 0, "B"):
                if k == len(self.stages) - 1:
                    self.scaler.scale(loss).backward()
                else:
                    grad = _gradient(inputs[k + 1]).to(self.stages[k].device)
                    torch.autograd.backward(outputs[k], grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    @property
    def pipeline_stages(self) -> int:
        return len(self.devices)

    def placed_modules(self) -> list[nn.Module]:
        return [stage.module for stage in self.stages]


def place_stages(strategy: Strategy) -> tuple[Partition, list[Stage], nn.Module]:
    """The model cut as the strategy's options ask (timing its blocks if balanced by time),
    a stage on each of its devices, and the training over them, the loss on the last device:
    (the cut, the stages, the whole model as one Sequential)."""
    options = strategy.options
    assert isinstance(options, StageOptions) and options.balance is not None  # resolved
    sample_batch = timing_batch(options.micro_batch_size(), strategy.plan.global_batch)
    partition, stages = build_stages(strategy.workload, strategy.devices, options.balance,
                                     sample_batch)
    model = nn.Sequential(*(stage.module for stage in stages))
    strategy.prepare_training(model.parameters(), strategy.devices[-1])
    return partition, stages, model


def _gradient(boundary: torch.Tensor) -> torch.Tensor:
    """The gradient backward left on a stage's detached input, for the stage before it."""
    if boundary.grad is None:
        raise RuntimeError("backward reached no stage boundary: the stage's output is unused")
    return boundary.grad
