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

__all__ = ["VERIFY_LOSS_SCALE", "Verdict", "verify"]

# fp16's initial loss scale in verify: where torch's scaler settled after skipping the first 4
# steps of fsdp resnet18 at 32 px (from 2^16). Lower, small gradients fall into fp16's
# subnormals, where the baseline (each shard's loss halved before backward) and the ranks (the
# gradient halved after) round apart: 1.2e-5 at 2^8 on resnet18 at 64 px, 7e-12 at 2^12.
VERIFY_LOSS_SCALE = 2.0**12


@dataclass(frozen=True)
class Verdict:
    strategy: str
    options: dict
    max_abs_difference: float  # largest |parameter - baseline parameter| after one step
    baseline_update: float  # largest |parameter change| of the baseline's own step
    tolerance: float
    error: str | None = None  # why the strategy's step failed (then it is not ok)

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
    if workload.precision == "fp16":
        # At torch's initial scale, 2^16, a first step's scaled gradients overflow and the
        # scaler skips it (on resnet18 here): one step would then compare nothing.
        workload = replace(workload, initial_loss_scale=VERIFY_LOSS_SCALE)
    images, labels = workload.make_batch(global_batch, "cpu")
    initial = [p.detach().float() for p in workload.build_model().parameters()]
    baselines: dict[tuple, list[torch.Tensor]] = {}

    def baseline(split: int | None, precision: str = workload.precision) -> list[torch.Tensor]:
        if (split, precision) not in baselines:
            config = Config(strategies.BASELINE, replace(workload, precision=precision),
                            global_batch, devices, threads_per_device=threads_per_device,
                            options=accumulating(split))
            baselines[split, precision] = launch.verify_parameters(config, images, labels)
        return baselines[split, precision]

    verdicts = []
    for name in names:
        kept = options_for(name, options)
        config = Config(name, workload, global_batch, devices, options=kept,
                        threads_per_device=threads_per_device)
        strategy = strategies.lookup(name).cls
        try:
            reference = baseline(config.plan.reference_split)
            parameters = launch.verify_parameters(config, images, labels)
            # Both steps stand within about the same rounding of the fp32 step, so within
            # twice it of each other (the triangle inequality).
            rounding = (_max_abs_difference(
                reference, baseline(config.plan.reference_split, "fp32"))
                if strategy.verify_rounds_elsewhere(config.plan) else 0.0)
        except Exception as error:  # one failing strategy is one row; the rest are checked
            verdicts.append(Verdict(name, kept, float("nan"), float("nan"), tolerance,
                                    error=f"{error.__class__.__name__}: {error}"[:300]))
            continue
        update = _max_abs_difference(reference, initial)
        difference = _max_abs_difference(parameters, reference)
        if update == 0:
            verdicts.append(Verdict(name, kept, difference, update, tolerance, error=(
                "the baseline's step changed no parameter, so nothing was compared (in fp16 "
                "the gradient scaler skips a step whose scaled gradients overflow)")))
            continue
        # A strategy that compresses gradients states the error it allows (relative).
        lossy = strategy.verify_relative_tolerance(config.plan)
        allowed = max(tolerance, (lossy or 0.0) * update, 2 * rounding)
        verdicts.append(Verdict(name, kept, difference, update, allowed))
    return verdicts
