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
    images, labels = workload.make_batch(global_batch, "cpu")
    initial = [p.detach().float() for p in workload.build_model().parameters()]
    baselines: dict[tuple, list[torch.Tensor]] = {}

    def baseline(split: int | None, of: Workload) -> list[torch.Tensor]:
        key = (split, of)
        if key not in baselines:
            config = Config(strategies.BASELINE, of, global_batch, devices,
                            threads_per_device=threads_per_device, options=accumulating(split))
            baselines[key] = launch.verify_parameters(config, images, labels)
        return baselines[key]

    def steps(name: str, kept: dict) -> tuple[Config, list, list]:
        """The strategy's step and its reference. In fp16 the gradient scaler skips a step
        whose scaled gradients overflow, and a skipped step compares nothing: both are taken
        at the largest scale, halving from torch's 2^16, at which neither was skipped (not
        lower: small gradients fall into fp16's subnormals, where they round apart)."""
        at = workload

        def skipped(step: list[torch.Tensor]) -> bool:  # and a lower scale is left to try
            return (at.precision == "fp16" and at.initial_loss_scale > 1
                    and _max_abs_difference(step, initial) == 0)

        while True:
            config = Config(name, at, global_batch, devices, options=kept,
                            threads_per_device=threads_per_device)
            reference = baseline(config.plan.reference_split, at)
            if not skipped(reference):  # the strategy's step, only once its reference stepped
                parameters = launch.verify_parameters(config, images, labels)
                if not skipped(parameters):
                    return config, reference, parameters
            at = replace(at, initial_loss_scale=at.initial_loss_scale / 2)

    verdicts = []
    for name in names:
        kept = options_for(name, options)
        strategy = strategies.lookup(name).cls
        try:
            config, reference, parameters = steps(name, kept)
            # Both steps stand within about the same rounding of the fp32 step, so within
            # twice it of each other (the triangle inequality).
            rounding = (_max_abs_difference(reference, baseline(
                config.plan.reference_split, replace(workload, precision="fp32")))
                if strategy.verify_rounds_elsewhere(config.plan) else 0.0)
        except Exception as error:  # one failing strategy is one row; the rest are checked
            verdicts.append(Verdict(name, kept, float("nan"), float("nan"), tolerance,
                                    error=f"{error.__class__.__name__}: {error}"[:300]))
            continue
        scale = config.workload.initial_loss_scale if workload.precision == "fp16" else None
        update = _max_abs_difference(reference, initial)
        difference = _max_abs_difference(parameters, reference)
        if update == 0:
            verdicts.append(Verdict(name, kept, difference, update, tolerance, error=(
                "the baseline's step changed no parameter, so nothing was compared"),
                loss_scale=scale))
            continue
        # A strategy that compresses gradients states the error it allows (relative).
        lossy = strategy.verify_relative_tolerance(config.plan)
        allowed = max(tolerance, (lossy or 0.0) * update, 2 * rounding)
        verdicts.append(Verdict(name, kept, difference, update, allowed, loss_scale=scale))
    return verdicts
