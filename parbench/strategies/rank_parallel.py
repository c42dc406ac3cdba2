"""Data parallelism: replicas each train on an equal share of the batch; ddp and fsdp run one
rank per device."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from parbench.strategies.base import ProcessPerDevice, Strategy
from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError
from parbench.strategies.options import Options, option

__all__ = ["TORCH_SETTINGS", "TUNINGS", "RankDataParallel", "ReplicaOptions", "SplitBatch",
           "tuning_option", "with_tuning"]

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


class SplitBatch(Strategy):
    """Replicas each train on an equal 1/N of the global batch, N = the devices used."""

    Options = ReplicaOptions

    @classmethod
    def check_plan(cls, workload, global_batch, devices, options) -> None:
        # Equal shards: equal work per replica, and the average of the replicas' gradients is
        # the gradient of the global batch.
        replicas = len(devices)
        if global_batch % replicas:
            lower = global_batch - global_batch % replicas
            raise StrategyError(
                f"batch {global_batch} does not divide over {replicas} replicas; "
                f"use a multiple of {replicas}, e.g. --batch-size {lower or replicas} or "
                f"{lower + replicas}")

    @classmethod
    def smallest_slice(cls, global_batch, devices, options) -> int:
        return super().smallest_slice(global_batch, devices, options) // len(devices)

    @classmethod
    def reference_split(cls, plan) -> int | None:
        # Each replica's BatchNorm normalises over its own shard: single accumulating over the
        # same shards makes the same update.
        return plan.global_batch // len(plan.devices)


class RankDataParallel(SplitBatch, ProcessPerDevice):
    """Rank k drives devices[k] with a whole (or sharded) model and 1/N of the global batch.

    Subclasses wrap the model (`wrap`); this class shards the data and hands the verifier the
    full parameters from rank 0.
    """

    @classmethod
    def verify_rounds_elsewhere(cls, plan) -> bool:
        # A rank backpropagates its whole shard's loss and the gradients are averaged after;
        # the baseline scales each shard's loss before. Exact in binary, except for fp16's
        # subnormal gradients (the tutorial's model at 128 px: 6e-4 apart, a 400th of the step).
        return plan.workload.precision == "fp16"

    @property
    def data_shard(self) -> tuple[int, int]:
        return self.rank, len(self.devices)

    @property
    def model(self) -> nn.Module:
        return self._module

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """The model with the layers this strategy changes (before --compile compiles it or
        its blocks); by default the model itself."""
        return model

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as trained by this strategy (placed on `input_device` already)."""
        raise NotImplementedError

    def setup(self) -> None:
        self.check_processes("replicas")
        device = self.input_device
        # Under --compile each block is compiled in place before it is wrapped, as torchtitan
        # compiles each transformer block before FSDP2 shards it or DDP replicates it: the
        # wrapper's hooks and collectives run around compiled blocks, and DDP's buckets still
        # overlap backward. Compiled whole (--compile model), the model is compiled on its
        # first call, inside DDP's forward, where dynamo's DDPOptimizer cuts the graph at
        # DDP's buckets so that each bucket's all-reduce still overlaps the rest of backward;
        # under FSDP2 the graph breaks at each unit's hooks, which run eager.
        model = self.prepare_model(self.workload.build_model_on(device))
        self._module = self.workload.compiled(model)
        self._wrapped = self.wrap(self._module)
        self.prepare_training(self._wrapped.parameters(), device)

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One update from this rank's shard; gradients are averaged over ranks in backward."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.workload.autocast(self.input_device):
            loss = self.loss_fn(self._wrapped(images), labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def placed_modules(self) -> list[nn.Module]:
        return [self._wrapped]
