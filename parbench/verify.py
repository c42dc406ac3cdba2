"""`parbench verify`: one optimiser step of each strategy against the single-device baseline."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

import strategies
from parbench import launch
from parbench.config import Config, options_for
from parbench.devices import DeviceSet
from parbench.workloads import Workload
from strategies.single import accumulating

__all__ = ["Verdict", "verify"]

@dataclass(frozen=True)
class Verdict:
    strategy: str
    options: dict
    max_abs_difference: float  # largest |parameter - baseline parameter| after one step
    baseline_update: float  # largest |parameter change| of the baseline's own step
    tolerance: float
    error: str | None = None  # why the strategy's step failed (then it is not ok)
    loss_scale: float | None = None  # fp16: where the gradient scaler started

    @property
    def ok(self) -> bool:
        return self.error is None and self.max_abs_difference <= self.tolerance


def _max_abs_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if len(a) != len(b):
        raise ValueError(f"parameter lists differ in length ({len(a)} vs {len(b)})")
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def verify(workload: Workload, devices: DeviceSet, names: list[str], global_batch: int,
           options: dict, tolerance: float, threads_per_device: int = 1) -> list[Verdict]:
    """From one seed and one batch, one step of each strategy in `names` against the baseline.

    A strategy that splits the batch into micro-batches (pipelines) or shards (data-parallel
    replicas, unless SyncBatchNorm) is compared with the baseline accumulating gradients over
    the same parts, so BatchNorm sees the same samples in both and the comparison is exact up
    to floating-point summation order.
    """
    check = _Verifier(workload, devices, global_batch, threads_per_device)
    return [check.verdict(name, options_for(name, options), tolerance) for name in names]


class _Verifier:
    """One batch and the initial parameters, and the baseline's steps (each computed once)."""

    def __init__(self, workload: Workload, devices: DeviceSet, global_batch: int,
                 threads_per_device: int) -> None:
        self.workload, self.devices, self.global_batch = workload, devices, global_batch
        self.threads_per_device = threads_per_device
        self.images, self.labels = workload.make_batch(global_batch, "cpu")
        self.initial = [p.detach().float() for p in workload.build_model().parameters()]
        self.baselines: dict[tuple, list[torch.Tensor]] = {}

    def config(self, name: str, workload: Workload, options: dict) -> Config:
        return Config(name, workload, self.global_batch, self.devices, options=options,
                      threads_per_device=self.threads_per_device)

    def baseline(self, split: int | None, workload: Workload) -> list[torch.Tensor]:
        """The baseline's parameters after one step, accumulating over micro-batches of
        `split` (None: the whole batch at once)."""
        key = (split, workload)
        if key not in self.baselines:
            config = self.config(strategies.BASELINE, workload, accumulating(split))
            self.baselines[key] = launch.verify_parameters(config, self.images, self.labels)
        return self.baselines[key]

    def skipped(self, step: list[torch.Tensor], workload: Workload) -> bool:
        """Whether fp16's gradient scaler skipped this step (and a lower scale is left)."""
        return (workload.precision == "fp16" and workload.initial_loss_scale > 1
                and _max_abs_difference(step, self.initial) == 0)

    def steps(self, name: str, kept: dict) -> tuple[Config, list, list]:
        """The strategy's step and its reference. In fp16 the gradient scaler skips a step
        whose scaled gradients overflow, and a skipped step compares nothing: both are taken
        at the largest scale, halving from torch's 2^16, at which neither was skipped (not
        lower: small gradients fall into fp16's subnormals, where they round apart)."""
        at = self.workload
        while True:
            config = self.config(name, at, kept)
            reference = self.baseline(config.plan.strategy_plan.reference_split, at)
            if not self.skipped(reference, at):  # the strategy's step, once its reference stepped
                parameters = launch.verify_parameters(config, self.images, self.labels)
                if not self.skipped(parameters, at):
                    return config, reference, parameters
            at = replace(at, initial_loss_scale=at.initial_loss_scale / 2)

    def verdict(self, name: str, kept: dict, tolerance: float) -> Verdict:
        strategy = strategies.lookup(name).cls
        try:
            config, reference, parameters = self.steps(name, kept)
            plan = config.plan.strategy_plan
            # Both steps stand within about the same rounding of the fp32 step, so within
            # twice it of each other (the triangle inequality).
            rounding = (_max_abs_difference(reference, self.baseline(
                plan.reference_split, replace(self.workload, precision="fp32")))
                if strategy.verify_rounds_elsewhere(plan) else 0.0)
        except Exception as error:  # one failing strategy is one row; the rest are checked
            return Verdict(name, kept, float("nan"), float("nan"), tolerance,
                           error=f"{error.__class__.__name__}: {error}"[:300])
        scale = (config.workload.initial_loss_scale if self.workload.precision == "fp16"
                 else None)
        update = _max_abs_difference(reference, self.initial)
        difference = _max_abs_difference(parameters, reference)
        if update == 0:
            return Verdict(name, kept, difference, update, tolerance, loss_scale=scale, error=(
                "the baseline's step changed no parameter, so nothing was compared"))
        # A strategy that compresses gradients states the error it allows (relative).
        lossy = strategy.verify_relative_tolerance(plan)
        allowed = max(tolerance, (lossy or 0.0) * update, 2 * rounding)
        return Verdict(name, kept, difference, update, allowed, loss_scale=scale)
