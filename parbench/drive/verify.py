"""`parbench verify`: each strategy's steps against the single-device baseline's, in loss
and parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from parbench import launch, strategies
from parbench.families.workloads import Workload
from parbench.launch.ranks import in_process_threads
from parbench.launch.worker import Trained
from parbench.machine.devices import DeviceSet
from parbench.plan.config import Config, options_for
from parbench.strategies.single import accumulating

__all__ = ["DRIFT_ALLOWANCE", "MULTI_STEP_PRECISION", "TWINS", "Verdict", "verify"]

# How much farther than the baseline's rounding twins a strategy may drift from the baseline
# (see `_Verifier.twins`): a strategy rounds differently in every operation, not in the
# gradients alone, and a few twins are a few draws of when a rounding difference flips a ReLU
# or a max-pool and jumps.
DRIFT_ALLOWANCE = 10
TWINS = 3
MULTI_STEP_PRECISION = (
    "--steps above 1 compares in --precision fp32 only: in bf16 or fp16 a strategy rounds "
    "where the baseline does not, by far more than the rounding twins' one-ulp nudges, and "
    "fp16's gradient scaler may skip different steps")


@dataclass(frozen=True)
class Verdict:
    strategy: str
    options: dict
    max_abs_difference: float  # largest |parameter - reference parameter| after the last step
    baseline_update: float  # largest |parameter change| of the reference over all its steps
    tolerance: float  # the largest max_abs_difference accepted
    error: str | None = None  # why the strategy's steps failed (then it is not ok)
    loss_scale: float | None = None  # fp16: where the gradient scaler started
    losses: tuple[float, ...] = ()  # the strategy's loss over the global batch at each step
    reference_losses: tuple[float, ...] = ()  # the reference's, on the same batches
    loss_tolerances: tuple[float, ...] = ()  # the largest |loss difference| accepted per step

    @property
    def loss_differences(self) -> list[float]:
        return [abs(a - b) for a, b in zip(self.losses, self.reference_losses, strict=True)]

    @property
    def worst_loss_step(self) -> int | None:
        """The step (from 0) whose loss difference comes nearest its tolerance, or passes it."""
        ratios = [d / t if t > 0 else math.inf
                  for d, t in zip(self.loss_differences, self.loss_tolerances, strict=True)]
        return max(range(len(ratios)), key=lambda k: (math.isnan(ratios[k]), ratios[k]),
                   default=None)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.max_abs_difference <= self.tolerance
                and all(d <= t for d, t in zip(self.loss_differences, self.loss_tolerances,
                                               strict=True)))


def _max_abs_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if len(a) != len(b):
        raise ValueError(f"parameter lists differ in length ({len(a)} vs {len(b)})")
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def verify(workload: Workload, devices: DeviceSet, names: list[str], global_batch: int,
           options: dict, tolerance: float, threads_per_device: int = 1,
           steps: int = 1) -> list[Verdict]:
    """From one seed, `steps` steps of each strategy in `names` on one batch against the
    baseline: each step's loss, and the parameters after the last.

    A strategy that splits the batch into micro-batches (pipelines) or shards (data-parallel
    replicas, unless SyncBatchNorm) is compared with the baseline accumulating gradients over
    the same parts, so BatchNorm sees the same samples in both and the comparison is exact up
    to floating-point summation order. Those rounding differences grow as training amplifies
    them; how much, the baseline's rounding twins measure (`_Verifier.twins`): a strategy may
    drift DRIFT_ALLOWANCE times as far as they do, and never less than `tolerance` (absolute for
    parameters, relative for the loss). Under a compiled workload (`Workload.compile`) every
    strategy runs its blocks compiled and the baseline stays eager; the baseline's steps in
    float64 are then one more twin (compiled code rounds otherwise in every operation).
    """
    if steps > 1 and workload.precision != "fp32":
        raise ValueError(MULTI_STEP_PRECISION)
    check = _Verifier(workload, devices, global_batch, threads_per_device, steps)
    return [check.verdict(name, options_for(name, options), tolerance) for name in names]


class _Verifier:
    """The batches and the initial parameters, and the baseline's runs (each made once)."""

    def __init__(self, workload: Workload, devices: DeviceSet, global_batch: int,
                 threads_per_device: int, steps: int) -> None:
        self.workload, self.devices, self.global_batch = workload, devices, global_batch
        self.threads_per_device = threads_per_device
        # Every step trains on the same batch: the model learns it and the loss falls
        # smoothly. On a new random batch each step (random labels), a one-ulp difference
        # grows to the loss's own size within about five steps, and nothing can be compared.
        self.batches = [workload.make_batch(global_batch, "cpu")] * steps
        self.initial = [p.detach().float() for p in workload.build_model().parameters()]
        self.runs: dict[tuple, Trained] = {}

    def config(self, name: str, workload: Workload, options: dict) -> Config:
        return Config(name, workload, self.global_batch, self.devices, options=options,
                      threads_per_device=self.threads_per_device)

    def baseline(self, split: int | None, workload: Workload,
                 nudge_seed: int | None = None) -> Trained:
        """The baseline's run, accumulating over micro-batches of `split` (None: the whole
        batch at once); with `nudge_seed`, a rounding twin of it. Always eager: a compiled
        strategy is checked against the step torch.compile must not change."""
        workload = replace(workload, compile=False)
        key = (split, workload, nudge_seed)
        if key not in self.runs:
            config = self.config(strategies.BASELINE, workload, accumulating(split))
            self.runs[key] = launch.verify_training(config, self.batches, nudge_seed)
        return self.runs[key]

    def exact(self, split: int | None) -> Trained:
        """The baseline's steps in float64 (eager, without autocast): the steps the fp32 ones
        round, to measure how far rounding alone moves them."""
        key = (split, "float64")
        if key not in self.runs:
            workload = replace(self.workload, compile=False, precision="fp32",
                               initial_loss_scale=Workload.initial_loss_scale)
            config = self.config(strategies.BASELINE, workload, accumulating(split))
            strategy = strategies.create(config.plan.training_plan)
            try:
                with in_process_threads(config):
                    strategy.setup()
                    strategy.model.double()  # the parameters the optimiser holds, in place
                    device = strategy.input_device
                    losses = [float(strategy.train_step(images.to(device, torch.float64),
                                                        labels.to(device)))
                              for images, labels in self.batches]
                self.runs[key] = Trained(losses, [p.detach().cpu() for p in
                                                  strategy.model.parameters()])
            finally:
                strategy.close()
        return self.runs[key]

    def twins(self, split: int | None, workload: Workload) -> list[Trained]:
        """The baseline again, TWINS times, with every gradient nudged one ulp at random as
        backward computes it: what another summation order does to a gradient, at every
        step, which training then amplifies as it amplifies a strategy's own rounding. How
        far they drift from the baseline (in loss at each step, in parameters at the end) is
        the drift to expect from rounding alone."""
        if len(self.batches) == 1:  # one step: `tolerance` is its rounding
            return []
        return [self.baseline(split, workload, workload.seed + i) for i in range(TWINS)]

    def skipped(self, parameters: list[torch.Tensor], workload: Workload) -> bool:
        """Whether fp16's gradient scaler skipped this step (and a lower scale is left)."""
        return (workload.precision == "fp16" and workload.initial_loss_scale > 1
                and _max_abs_difference(parameters, self.initial) == 0)

    def steps(self, name: str, kept: dict) -> tuple[Config, Trained, Trained]:
        """The strategy's run and its reference. In fp16 (one step) the gradient scaler skips
        a step whose scaled gradients overflow, and a skipped step compares nothing: both are
        taken at the largest scale, halving from torch's 2^16, at which neither was skipped
        (not lower: small gradients fall into fp16's subnormals, where they round apart)."""
        at = self.workload
        while True:
            config = self.config(name, at, kept)
            reference = self.baseline(config.plan.training_plan.reference_micro_batch, at)
            if not self.skipped(reference.parameters, at):  # once its reference stepped
                trained = launch.verify_training(config, self.batches)
                if not self.skipped(trained.parameters, at):
                    return config, reference, trained
            at = replace(at, initial_loss_scale=at.initial_loss_scale / 2)

    def verdict(self, name: str, kept: dict, tolerance: float) -> Verdict:
        strategy = strategies.lookup(name).cls
        try:
            config, reference, trained = self.steps(name, kept)
            plan = config.plan.training_plan
            # Both runs stand within about the same rounding of the fp32 run, so within
            # twice it of each other (the triangle inequality).
            rounding = (_max_abs_difference(reference.parameters, self.baseline(
                plan.reference_micro_batch, replace(self.workload, precision="fp32")).parameters)
                if strategy.verify_rounds_elsewhere(plan) else 0.0)
            twins = self.twins(plan.reference_micro_batch, config.workload)
            if config.workload.compile:
                # Compiled code rounds otherwise in every operation (inductor's fused kernels
                # sum in other orders, and the same steps compiled in float64 equal eager's
                # to 2e-14), so the exact steps are one more twin: a strategy may stand
                # DRIFT_ALLOWANCE times as far from its reference as they do (compiled
                # resnet18 in fp32 stood 1.1 to 3.4 times as far from them as eager).
                twins = [*twins, self.exact(plan.reference_micro_batch)]
        except Exception as error:  # one failing strategy is one row; the rest are checked
            return Verdict(name, kept, float("nan"), float("nan"), tolerance,
                           error=f"{error.__class__.__name__}: {error}"[:300])
        scale = (config.workload.initial_loss_scale if self.workload.precision == "fp16"
                 else None)
        update = _max_abs_difference(reference.parameters, self.initial)
        difference = _max_abs_difference(trained.parameters, reference.parameters)
        if update == 0:
            return Verdict(name, kept, difference, update, tolerance, loss_scale=scale, error=(
                "the baseline's step changed no parameter, so nothing was compared"))
        # A strategy that compresses gradients states the error it allows (relative).
        lossy = strategy.verify_relative_tolerance(plan) or 0.0
        drift = max((_max_abs_difference(t.parameters, reference.parameters) for t in twins),
                    default=0.0)
        allowed = max(tolerance, lossy * update, 2 * rounding, DRIFT_ALLOWANCE * drift)
        loss_tolerances = (_loss_tolerances(reference.losses, twins, max(tolerance, lossy))
                           if twins else (math.inf,))  # one step: its parameters are compared
        return Verdict(name, kept, difference, update, allowed, loss_scale=scale,
                       losses=tuple(trained.losses), reference_losses=tuple(reference.losses),
                       loss_tolerances=loss_tolerances)


def _loss_tolerances(reference: list[float], twins: list[Trained],
                     relative: float) -> tuple[float, ...]:
    """Per step, the largest loss difference accepted: DRIFT_ALLOWANCE times the largest
    any rounding twin has reached by then, and at least `relative` of the loss."""
    allowed, reached = [], 0.0
    for k, ours in enumerate(reference):
        reached = max([reached] + [abs(ours - twin.losses[k]) for twin in twins])
        allowed.append(max(relative * abs(ours), DRIFT_ALLOWANCE * reached))
    return tuple(allowed)
