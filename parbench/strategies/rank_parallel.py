"""Data parallelism's shared parts: the replicas' options and tuning, and the model and step of
a rank that trains a whole (or sharded) replica on its share of the batch (ddp, fsdp)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from parbench.strategies.base import Strategy, TrainingPlan
from parbench.strategies.dims import ParallelDims
from parbench.strategies.options import Options, option

__all__ = ["TORCH_SETTINGS", "TUNINGS", "ReplicaOptions", "replica_rounds_elsewhere",
           "replica_setup", "replica_step", "tuning_option", "with_tuning"]

# What `--tuning torch` sets: torch's own defaults for the DDP and FSDP2 settings parbench
# tunes by default (bucket views, a static graph, layer-group units resharded all but the last,
# parameters gathered in bf16 under bf16). A setting given beside it is kept as given.
TORCH_SETTINGS = dict(gradient_as_bucket_view=False, static_graph=False, fsdp_units="block",
                      reshard_after_forward="yes", mixed_precision=False)
TUNINGS = ("tuned", "torch")


def tuning_option():
    """The `tuning` field of the data-parallel strategies whose settings parbench tunes."""
    return option("tuned", choices=TUNINGS, label="tuning", help=(
        "tuned (the default): parbench's settings, as torchtitan configures DDP and FSDP2; "
        "torch: torch's own defaults for every setting not given beside it "
        "(gradient_as_bucket_view off, static_graph off, fsdp_units block, "
        "reshard_after_forward yes, mixed_precision off); `--tuning tuned,torch` measures "
        "both in the same rounds"))


def with_tuning(values: dict) -> dict:
    """Option values with torch's own defaults filled in for the settings not given (None or
    absent), where `tuning` is torch; the values as they are otherwise."""
    if values.get("tuning") != "torch":
        return values
    return {**TORCH_SETTINGS, **{k: v for k, v in values.items() if v is not None}}


@dataclass(frozen=True)
class ReplicaOptions(Options):
    """How many replicas train, one per device."""

    world_size: int | None = option(
        minimum=1, label="N", help="ranks, one per device, using the first N devices (a list "
        "gives the scaling curve and efficiency T(N)/(N*T(1)); default: one per device)")

    def device_count(self) -> int | None:
        return self.world_size

    def parallel_dims(self, devices) -> ParallelDims:
        return ParallelDims(replicas=len(devices))

    def device_count_text(self) -> str:
        return f"world size {self.world_size} needs"


def replica_setup(strategy: Strategy, wrap: Callable[[nn.Module], nn.Module],
                  prepare: Callable[[nn.Module], nn.Module] | None = None,
                  ) -> tuple[nn.Module, nn.Module]:
    """This rank's whole model on its device, with the layers the strategy changes changed
    (`prepare`, before --compile compiles it or its blocks), compiled as the workload asks,
    then wrapped (DDP, FSDP2), and the training over the wrapped model's parameters: (the
    model, the wrapped model).

    Under --compile each block is compiled in place before it is wrapped, as torchtitan
    compiles each transformer block before FSDP2 shards it or DDP replicates it: the wrapper's
    hooks and collectives run around compiled blocks, and DDP's buckets still overlap backward.
    Compiled whole (--compile model), the model is compiled on its first call, inside DDP's
    forward, where dynamo's DDPOptimizer cuts the graph at DDP's buckets so that each bucket's
    all-reduce still overlaps the rest of backward; under FSDP2 the graph breaks at each
    unit's hooks, which run eager."""
    strategy.check_processes("replicas")
    model = strategy.workload.build_model_on(strategy.input_device)
    module = strategy.workload.compiled(prepare(model) if prepare else model)
    wrapped = wrap(module)
    strategy.prepare_training(wrapped.parameters(), strategy.input_device)
    return module, wrapped


def replica_step(strategy: Strategy, wrapped: nn.Module, images: torch.Tensor,
                 labels: torch.Tensor) -> torch.Tensor:
    """One update from this rank's shard through `wrapped` (DDP, FSDP2), which averages the
    gradients over the ranks in backward."""
    strategy.optimizer.zero_grad(set_to_none=True)
    with strategy.workload.autocast(strategy.input_device):
        loss = strategy.loss_fn(wrapped(images), labels)
    strategy.scaler.scale(loss).backward()
    strategy.scaler.step(strategy.optimizer)
    strategy.scaler.update()
    return loss.detach()


def replica_rounds_elsewhere(plan: TrainingPlan) -> bool:
    """`Strategy.verify_rounds_elsewhere` of replicas: a rank backpropagates its whole shard's
    loss and the gradients are averaged after; the baseline scales each shard's loss before.
    Exact in binary, except for fp16's subnormal gradients (the tutorial's model at 128 px:
    6e-4 apart, a 400th of the step)."""
    return plan.workload.precision == "fp16"
