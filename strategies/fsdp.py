"""Fully sharded data parallel (FSDP2, `fully_shard`): parameters, gradients and optimiser
state sharded over ranks, each residual block gathered only while it runs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import DTensor

from strategies.base import Layout
from strategies.errors import StrategyError
from strategies.options import option
from strategies.rank_parallel import RankDataParallel, ReplicaOptions

__all__ = ["FSDP", "FSDPOptions", "gathered_through_cpu", "reduce_by_sum_on_gloo"]


@dataclass(frozen=True)
class FSDPOptions(ReplicaOptions):
    """fully_shard's own settings."""

    reshard_after_forward: str | None = option(choices=("yes", "no"), label="reshard", help=(
        "free each block's gathered parameters after its forward and gather them again for "
        "backward (yes, FSDP2's default: less memory), or keep them until backward (no: one "
        "all-gather per block per step)"))
    mixed_precision: bool = option(False, label="mp", help=(
        "FSDP2's MixedPrecisionPolicy in the --precision dtype (bf16 or fp16): parameters "
        "all-gathered in it (half the bytes), gradients reduce-scattered in fp32, BatchNorm "
        "gathered and computed in fp32 (FSDP1's default); autocast runs as for every strategy"))

    def check(self, workload, global_batch, devices) -> None:
        if self.mixed_precision and workload.autocast_dtype is None:
            raise StrategyError("--mixed-precision gathers parameters in the --precision dtype; "
                                "give --precision bf16 or fp16")


class FSDP(RankDataParallel):
    """One process per device; each residual block is its own FSDP unit, then the whole model
    (stem and head), so at most one block's parameters are gathered at a time (unless
    `reshard_after_forward` is "no")."""

    summary = "one process per device, fully_shard (FSDP2) per block of the model family"
    layout = Layout.SHARDED_REPLICAS
    Options = FSDPOptions
    options: FSDPOptions

    @classmethod
    def verify_rounds_elsewhere(cls, plan) -> bool:
        # Under the policy, the layers after each BatchNorm compute in fp32.
        return plan.options.mixed_precision or super().verify_rounds_elsewhere(plan)

    def wrap(self, model: nn.Module) -> nn.Module:
        reshard = self.options.reshard_after_forward != "no"
        self._mesh = self.device_mesh()
        policy = MixedPrecisionPolicy()
        # Units from the innermost out: a parameter belongs to the first unit that holds it.
        self._float32_units: list[FSDPModule] = []
        if self.options.mixed_precision:  # gradients reduced in fp32: gloo has no bf16 sum
            policy = MixedPrecisionPolicy(param_dtype=self.workload.autocast_dtype,
                                          reduce_dtype=torch.float32)
            self._float32_units = self._batchnorm_units(model, reshard)
        # The family's blocks but the stem and the head (the root unit holds those).
        units = [*self._float32_units,
                 *(fully_shard(block, mesh=self._mesh, reshard_after_forward=reshard,
                               mp_policy=policy)
                   for block in self.workload.family.sharded_blocks(model)),
                 fully_shard(model, mesh=self._mesh, mp_policy=policy)]
        reduce_by_sum_on_gloo(units)
        self._units = units
        # fully_shard's result is its module, of a class deriving from FSDPModule and the
        # module's own; typed as FSDPModule alone.
        return units[-1]  # type: ignore[return-value]

    def device_mesh(self) -> DeviceMesh:
        """Every rank shards the model (HSDP lays them out in two dimensions). On the devices
        asked for: without a mesh fully_shard builds one on the default accelerator, so
        `--devices cpu,cpu` on a GPU host would have trained on CUDA. Over the process group
        the ranks already have (init_device_mesh may start another, on NCCL for CUDA tensors,
        which refuses two ranks on one GPU)."""
        ranks = dist.group.WORLD
        assert ranks is not None  # the launcher initialised it
        return DeviceMesh.from_group(ranks, self.input_device.type)

    def gathered_shards(self) -> int:
        """The ranks whose shards (in rank order) make up one whole copy of the parameters."""
        return dist.get_world_size()

    def _batchnorm_units(self, model: nn.Module, reshard: bool) -> list[FSDPModule]:
        """Under the mixed-precision policy, each BatchNorm a unit of its own in fp32, its
        input cast up, as FSDP1 did by default: with its weight in bf16 the CPU kernel refuses
        fp32 running statistics, and statistics kept in bf16 would round every update of them
        to 8 significant bits. Autocast casts the output back down for the next
        convolution."""
        float32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
        return [fully_shard(module, mesh=self._mesh, reshard_after_forward=reshard,
                            mp_policy=float32)
                for module in model.modules()
                if isinstance(module, nn.modules.batchnorm._BatchNorm)]

    def prepare_training(self, parameters, loss_device: torch.device) -> None:
        super().prepare_training(parameters, loss_device)
        # The scaler for sharded models: it all-reduces whether any rank's shard overflowed,
        # so that every rank skips the same fp16 steps, and it accepts a step with no
        # gradient on this rank (the compute-only steps), where torch.amp's raises.
        self.scaler = ShardedGradScaler(loss_device.type,
                                        init_scale=self.workload.initial_loss_scale,
                                        enabled=self.workload.precision == "fp16")

    @contextlib.contextmanager
    def without_communication(self):
        """FSDP2's equivalent of DDP's no_sync, and more: gradients are not reduce-scattered,
        and parameters stay gathered after the first step, so later steps all-gather nothing
        either: forward and backward as a DDP replica's. The sharded parameters then get no
        gradient, so the optimiser step updates nothing: fsdp's compute time leaves out the
        update."""
        root = self._units[-1]
        root.set_requires_gradient_sync(False)
        root.set_reshard_after_forward(False)
        root.set_reshard_after_backward(False)
        try:
            yield
        finally:
            root.set_requires_gradient_sync(True)
            root.set_reshard_after_backward(True)
            reshard = self.options.reshard_after_forward != "no"
            for block in self._units[:-1]:  # the root stays gathered after forward, as it was
                block.set_reshard_after_forward(reshard, recurse=False)
            for unit in self._units:
                unit.reshard()

    def communication(self) -> dict[str, float | int | None]:
        """Bytes per step counted from the model's FSDP units: the whole gradient is
        reduce-scattered in fp32 (`allreduce_bytes`, the payload an all-reduce of it would
        carry); each unit's own parameters are all-gathered for forward and again for
        backward (once where they are not resharded after forward), the root's (stem and
        head) once, as FSDP2 keeps the root gathered between the two; in the autocast dtype
        under the mixed-precision policy, BatchNorm's in fp32."""
        gathers = 1 if self.options.reshard_after_forward == "no" else 2
        mixed = self.workload.autocast_dtype if self.options.mixed_precision else None
        counted: set[int] = set()
        reduced = gathered = 0
        for unit in self._units:  # innermost first
            own = [p for p in unit.parameters()  # type: ignore[attr-defined]  # a Module too
                   if id(p) not in counted]
            counted |= {id(p) for p in own}
            values = sum(p.numel() for p in own)
            gather_dtype = (mixed if mixed is not None and unit not in self._float32_units
                            else torch.float32)
            times = 1 if unit is self._units[-1] else gathers
            reduced += values * torch.float32.itemsize
            gathered += times * values * gather_dtype.itemsize
        return dict(allreduce_bytes=reduced, allgather_bytes=gathered)

    def trained_parameters(self):
        # Each parameter is a DTensor, sharded over the ranks; full_tensor() is a collective.
        parameters = [cast(DTensor, parameter) for parameter in self.model.parameters()]
        if dist.get_backend() == "gloo" and self.input_device.type == "cuda":
            return gathered_through_cpu(parameters, self.rank, self.gathered_shards())
        full = [parameter.full_tensor() for parameter in parameters]
        return full if self.rank == 0 else []


def reduce_by_sum_on_gloo(units: list[FSDPModule]) -> None:
    """Over gloo, each unit reduces its gradients by SUM and FSDP divides: torch 2.8's gloo
    reduce-scatter silently sums for ReduceOp.AVG (pytorch#162338), giving N times the
    gradient, as gloo's own AVG does where it works (verify catches the difference)."""
    if dist.get_backend() == "gloo":
        for unit in units:
            unit.set_force_sum_reduction_for_comms(True)


def gathered_through_cpu(parameters: list[DTensor], rank: int,
                         group_size: int | None = None) -> list[torch.Tensor]:
    """The full parameters on rank 0 (none elsewhere), each rank's shards sent as CPU tensors:
    full_tensor()'s all-gather of CUDA tensors over gloo (ranks sharing a GPU) killed rank 0
    with SIGSEGV on torch 2.11 + H200. FSDP2 shards dim 0 in rank order (Shard(0), torch.chunk's
    sizes), so the shards of the first `group_size` ranks (one sharding group; default: every
    rank) concatenate to the parameter."""
    shards = [parameter.to_local().detach().cpu() for parameter in parameters]
    everyone: list[list[torch.Tensor] | None] | None = (
        [None] * dist.get_world_size() if rank == 0 else None)
    dist.gather_object(shards, everyone, dst=0)  # to rank 0 alone, which compares them
    if everyone is None:
        return []
    group = everyone[:group_size] if group_size else everyone
    return [torch.cat([cast(list, ranks)[i] for ranks in group])
            for i in range(len(parameters))]
