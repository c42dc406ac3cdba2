"""Fully sharded data parallel (FSDP2, `fully_shard`): parameters, gradients and optimiser
state sharded over ranks, each unit (a layer group or a block of the model family) gathered
only while it runs, configured as torchtitan configures it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import DTensor
from typing_extensions import Self  # typing's from Python 3.11

from parbench.strategies.base import WITHOUT_CUDA_GRAPHS, Layout, Strategy
from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError
from parbench.strategies.options import option
from parbench.strategies.rank_parallel import (
    TORCH_SETTINGS,
    ReplicaOptions,
    replica_rounds_elsewhere,
    replica_setup,
    replica_step,
    tuning_option,
)

if TYPE_CHECKING:
    from parbench.families.workloads import Workload

__all__ = ["FSDP", "FSDPOptions", "RESHARD", "Unit", "gathered_through_cpu", "mesh_of_groups",
           "reduce_by_sum_on_gloo", "resharded_after_forward", "shard_units"]

UNITS = ("block", "group")
RESHARD = ("yes", "no", "except-last")


@dataclass(frozen=True)
class FSDPOptions(ReplicaOptions):
    """fully_shard's own settings: its units, when they reshard, its mixed precision."""

    tuning: str = tuning_option()

    fsdp_units: str | None = option(choices=UNITS, label="units", help=(
        "the FSDP units besides the root (which holds the stem and the head): block, each "
        "block of the model family (a ResNet's residual block, a ViT's encoder layer), or "
        "group, the family's layer groups (a ResNet's layer1..layer4; a ViT's encoder layers "
        "in four runs); default: the family's, group for ResNets (a few large all-gathers), "
        "block for ViTs (as torchtitan shards each transformer block)"))
    reshard_after_forward: str = option("except-last", choices=RESHARD, label="reshard", help=(
        "which units free their gathered parameters after forward and gather them again for "
        "backward: except-last (the default, torchtitan's: all but the last unit of the "
        "forward, which backward needs at once), yes (all: FSDP2's default, the least "
        "memory) or no (none: each unit gathered once a step, the most memory); the root is "
        "kept gathered from forward to backward, as FSDP2 does by default"))
    mixed_precision: bool | None = option(label="mp", help=(
        "FSDP2's MixedPrecisionPolicy in the --precision dtype: parameters all-gathered and "
        "used in it (half the bytes), gradients reduce-scattered in fp32, the sharded "
        "parameters kept in fp32, BatchNorm gathered and computed in fp32 (FSDP1's default); "
        "autocast runs as for every strategy. Default: on under --precision bf16 or fp16 "
        "(torchtitan's bf16 parameters with fp32 reduction), off in fp32"))

    def implied(self) -> dict:
        return ({name: TORCH_SETTINGS[name] for name in ("fsdp_units", "reshard_after_forward",
                                                         "mixed_precision")}
                if self.tuning == "torch" else {})

    def check(self, workload, global_batch, devices) -> None:
        if self.mixed_precision and workload.autocast_dtype is None:
            raise StrategyError("--mixed-precision gathers parameters in the --precision dtype; "
                                "give --precision bf16 or fp16, or drop --mixed-precision")

    def for_workload(self, workload: Workload) -> Self:
        """The defaults that depend on the workload resolved: the family's units, and the
        mixed-precision policy on where the workload computes in bf16 or fp16 (None, off, in
        fp32, where off is all there is)."""
        mixed = self.mixed_precision
        if workload.autocast_dtype is None:
            mixed = None if mixed is False else mixed  # True is refused by `check`
        elif mixed is None:
            mixed = True
        return replace(self, fsdp_units=self.fsdp_units or workload.family.fsdp_units,
                       mixed_precision=mixed)

    def settings(self, devices) -> dict:
        return {**super().settings(devices), "world_size": self.world_size or len(devices),
                "mixed_precision": bool(self.mixed_precision)}

    def parallel_dims(self, devices) -> ParallelDims:
        return ParallelDims(shards=len(devices))

    def mesh_shape(self, ranks: int) -> tuple[int, ...]:
        """The ranks' mesh: one dimension, every rank a shard (hsdp's options make it two)."""
        return (ranks,)


def resharded_after_forward(policy: str, units: int) -> list[bool]:
    """Whether each of `units` units (in forward order, the root left out) reshards after
    forward under `policy` (--reshard-after-forward). torchtitan's apply_fsdp keeps the last
    unit of the forward gathered: FSDP would prefetch it again at once for backward."""
    if policy == "except-last":
        return [index < units - 1 for index in range(units)]
    return [policy == "yes"] * units


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: the modules fully_shard grouped (their parameters not held by a unit
    inside), whether it reshards after forward, and whether it gathers in fp32 under the
    mixed-precision policy (BatchNorm's)."""

    handle: FSDPModule  # the first module: every module of a unit shares its state
    modules: tuple[nn.Module, ...]
    reshard: bool
    float32: bool = False


def _shard(modules: list[nn.Module], mesh: DeviceMesh, reshard: bool,
           policy: MixedPrecisionPolicy, float32: bool = False) -> Unit:
    """fully_shard one module, or several as one unit (one all-gather for them all)."""
    sharded = fully_shard(modules[0] if len(modules) == 1 else modules, mesh=mesh,
                          reshard_after_forward=reshard, mp_policy=policy)
    handle = sharded[0] if isinstance(sharded, list) else sharded
    return Unit(handle, tuple(modules), reshard, float32)


def shard_units(model: nn.Module, groups: list[list[nn.Module]], mesh: DeviceMesh,
                reshard: list[bool], policy: MixedPrecisionPolicy,
                first: list[Unit] | None = None) -> list[Unit]:
    """fully_shard each group of modules as a unit (resharded after forward as `reshard`
    says), then the root, over `mesh`, after the units `first` made (innermost first: a
    parameter belongs to the first unit that holds it); gradients summed where gloo's average
    is wrong. The root (stem and head) is kept gathered from forward to backward, as FSDP2
    keeps a root by default and torchtitan's `fully_shard(model)` does."""
    units = [*(first or []),
             *(_shard(group, mesh, flag, policy)
               for group, flag in zip(groups, reshard, strict=True)),
             _shard([model], mesh, False, policy)]
    reduce_by_sum_on_gloo([unit.handle for unit in units])
    return units


class FSDP(Strategy):
    """One process per device; each of the family's layer groups (or blocks: `fsdp_units`) is
    an FSDP unit, then the whole model (stem and head), so that a unit's parameters are
    gathered only while it runs, except where `reshard_after_forward` keeps them.

    The ranks' mesh is its options' `mesh_shape`: every rank a shard (fsdp), or, with hsdp's
    options, (replicate, shard) in rank order: ranks 0..S-1 shard the first replica, S..2S-1
    the second, and so on (HSDP: gradients reduce-scattered within a group and all-reduced
    across the groups)."""

    summary = ("one process per device, fully_shard (FSDP2) per layer group or block of the "
               "model family")
    layout = Layout.SHARDED_REPLICAS
    process_per_device = True
    splits_batch = True
    Options = FSDPOptions
    options: FSDPOptions
    cuda_graphs_refusal = ("FSDP2 gathers each unit's parameters into new memory every step "
                           "and frees them after, while a CUDA graph replays at the addresses "
                           f"it captured; {WITHOUT_CUDA_GRAPHS}")

    @classmethod
    def make_plan(cls, name, workload, global_batch, used, options, backend=None):
        assert isinstance(options, FSDPOptions)
        return super().make_plan(name, workload, global_batch, used,
                                 options.for_workload(workload), backend)

    @classmethod
    def verify_rounds_elsewhere(cls, plan) -> bool:
        # Under the policy, the layers after each BatchNorm compute in fp32.
        return bool(plan.options.mixed_precision) or replica_rounds_elsewhere(plan)

    def setup(self) -> None:
        self._module, self._wrapped = replica_setup(self, self.wrap)

    @property
    def model(self) -> nn.Module:
        return self._module

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return replica_step(self, self._wrapped, images, labels)

    def placed_modules(self) -> list[nn.Module]:
        return [self._wrapped]

    def unit_groups(self, model: nn.Module) -> list[list[nn.Module]]:
        """The modules of each unit besides the root, in forward order, as `fsdp_units` asks."""
        family = self.workload.family
        if self.options.fsdp_units == "group":
            return family.layer_groups(model)
        return [[block] for block in family.sharded_blocks(model)]

    def wrap(self, model: nn.Module) -> nn.Module:
        options = self.options
        self._mesh = self.device_mesh()
        groups = self.unit_groups(model)
        reshard = resharded_after_forward(options.reshard_after_forward, len(groups))
        policy = MixedPrecisionPolicy()
        # Units from the innermost out: a parameter belongs to the first unit that holds it.
        units: list[Unit] = []
        if options.mixed_precision:  # gradients reduced in fp32: gloo has no bf16 sum
            policy = MixedPrecisionPolicy(param_dtype=self.workload.autocast_dtype,
                                          reduce_dtype=torch.float32)
            units += self._batchnorm_units(model, groups, reshard)
        self._units = shard_units(model, groups, self._mesh, reshard, policy, units)
        # fully_shard's result is its module, of a class deriving from FSDPModule and the
        # module's own; typed as FSDPModule alone.
        return self._units[-1].handle  # type: ignore[return-value]

    def device_mesh(self) -> DeviceMesh:
        """The options' mesh (`mesh_of_groups`): every rank a shard, or HSDP's (replicate,
        shard); on the devices asked for, so `--devices cpu,cpu` on a GPU host trains on CPU."""
        return mesh_of_groups(self.input_device.type,
                              self.options.mesh_shape(dist.get_world_size()),
                              ("replicate", "shard"))

    def gathered_shards(self) -> int:
        """The ranks whose shards (in rank order) make up one whole copy of the parameters:
        every rank, or HSDP's first sharding group."""
        return self.options.mesh_shape(dist.get_world_size())[-1]

    def _batchnorm_units(self, model: nn.Module, groups: list[list[nn.Module]],
                         reshard: list[bool]) -> list[Unit]:
        """Under the mixed-precision policy, BatchNorm in fp32 units of their own, its input
        cast up, as FSDP1 did by default: with its weight in bf16 the CPU kernel refuses fp32
        running statistics, and statistics kept in bf16 would round every update of them to
        8 significant bits (verify needs them in fp32). Autocast casts the output back down
        for the next convolution. Each unit's BatchNorms are one fp32 unit, resharded as that
        unit is, and the root's (the stem's) another: not one unit per BatchNorm, which would
        add two or three small collectives a step for each of resnet50's 53 where a few
        layer-group units are the point (a unit of several modules is gathered before the
        first of them runs and freed after the last)."""
        float32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)

        def batchnorms(modules) -> list[nn.Module]:
            return [m for module in modules for m in module.modules()
                    if isinstance(m, nn.modules.batchnorm._BatchNorm)]

        inside = [batchnorms(group) for group in groups]
        held = {id(m) for norms in inside for m in norms}
        root = [m for m in batchnorms([model]) if id(m) not in held]
        root_reshard = self.options.reshard_after_forward != "no"
        return [_shard(norms, self._mesh, flag, float32, float32=True)
                for norms, flag in [*zip(inside, reshard, strict=True), (root, root_reshard)]
                if norms]

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
        root = self._units[-1].handle
        root.set_requires_gradient_sync(False)
        root.set_reshard_after_forward(False)
        root.set_reshard_after_backward(False)
        try:
            yield
        finally:
            root.set_requires_gradient_sync(True)
            root.set_reshard_after_backward(True)
            for unit in self._units[:-1]:  # the root stays gathered after forward, as it was
                unit.handle.set_reshard_after_forward(unit.reshard, recurse=False)
            for unit in self._units:
                unit.handle.reshard()

    def communication(self) -> dict[str, float | int | None]:
        """Bytes per step counted from the model's FSDP units: the whole gradient is
        reduce-scattered in fp32 (`allreduce_bytes`, the payload an all-reduce of it would
        carry); each unit's own parameters are all-gathered for forward and again for
        backward where it reshards after forward, else once (the root, stem and head, is
        kept gathered between the two); in the autocast dtype under the mixed-precision
        policy, BatchNorm's in fp32."""
        mixed = self.workload.autocast_dtype if self.options.mixed_precision else None
        counted: set[int] = set()
        reduced = gathered = 0
        for unit in self._units:  # innermost first
            own = [p for module in unit.modules for p in module.parameters()
                   if id(p) not in counted]
            counted |= {id(p) for p in own}
            values = sum(p.numel() for p in own)
            gather_dtype = mixed if mixed is not None and not unit.float32 else torch.float32
            reduced += values * torch.float32.itemsize
            gathered += (2 if unit.reshard else 1) * values * gather_dtype.itemsize
        return dict(allreduce_bytes=reduced, allgather_bytes=gathered)

    def trained_parameters(self):
        # Each parameter is a DTensor, sharded over the ranks; full_tensor() is a collective.
        parameters = [cast(DTensor, parameter) for parameter in self.model.parameters()]
        if dist.get_backend() == "gloo" and self.input_device.type == "cuda":
            return gathered_through_cpu(parameters, self.rank, self.gathered_shards())
        full = [parameter.full_tensor() for parameter in parameters]
        return full if self.rank == 0 else []


def mesh_of_groups(device_type: str, shape: tuple[int, ...],
                   names: tuple[str, ...]) -> DeviceMesh:
    """A DeviceMesh of every rank in rank order laid out as `shape` (row-major), on the
    devices asked for (without a mesh fully_shard and parallelize_module build one on the
    default accelerator). One dimension is the process group the ranks already have (no new
    group; unnamed); more are built from process groups made on the ranks' own backend:
    `DeviceMesh(...)` and init_device_mesh may make theirs on the device type's default backend
    (NCCL for CUDA), which refuses ranks that share a GPU, where those ranks run gloo. Every
    rank makes every group, in the same order, as `dist.new_group` requires."""
    if len(shape) == 1:
        world = dist.group.WORLD
        assert world is not None  # the launcher initialised it
        return DeviceMesh.from_group(world, device_type)
    backend = dist.get_backend()
    layout = torch.arange(dist.get_world_size()).view(shape)
    rank = dist.get_rank()
    mine: list[dist.ProcessGroup] = []
    for dim, size in enumerate(shape):
        for ranks in layout.movedim(dim, -1).reshape(-1, size).tolist():  # the other dims fixed
            group = dist.new_group(ranks, backend=backend)
            if rank in ranks:  # a member gets the group itself (others a placeholder)
                mine.append(cast(dist.ProcessGroup, group))
    return DeviceMesh.from_group(mine, device_type, mesh=layout, mesh_dim_names=names)


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
