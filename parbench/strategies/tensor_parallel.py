"""Tensor parallelism (torch's parallelize_module): each layer's matrices split over the ranks
of a mesh dimension, column- then row-wise as the model family plans it; alone (`tp`) or
composed with FSDP2 over a second dimension (`fsdp-tp`), in torchtitan's order: split, compile,
shard."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from parbench.strategies.base import WITHOUT_CUDA_GRAPHS, Layout, Strategy
from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import ModelRefused, StrategyError
from parbench.strategies.fsdp import mesh_of_groups, resharded_after_forward, shard_units
from parbench.strategies.options import option
from parbench.strategies.rank_parallel import ReplicaOptions

__all__ = ["TensorParallel", "TensorParallelOptions", "apply_fully_shard",
           "apply_tensor_parallel"]

STYLES: dict[str, type[ParallelStyle]] = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
SHARD_WITH = ("none", "fsdp")


def apply_tensor_parallel(plans: list[tuple[nn.Module, dict[str, str]]],
                          mesh: DeviceMesh) -> None:
    """Split each block's submodules over `mesh` as its plan says (colwise, rowwise), block
    by block as torchtitan's apply_tp does."""
    for block, plan in plans:
        parallelize_module(block, mesh, {name: STYLES[style]() for name, style in plan.items()})


def apply_fully_shard(model: nn.Module, blocks: list[nn.Module], mesh: DeviceMesh) -> None:
    """fully_shard each block, then the root, over `mesh`, each block but the last resharded
    after forward (torchtitan's apply_fsdp), as fsdp's units are, with no mixed precision."""
    shard_units(model, [[block] for block in blocks], mesh,
                resharded_after_forward("except-last", len(blocks)), MixedPrecisionPolicy())


@dataclass(frozen=True)
class TensorParallelOptions(ReplicaOptions):
    """The mesh: how many ranks split each layer, and what the other dimension does."""

    tp_size: int | None = option(minimum=2, label="tp", help=(
        "ranks that split each layer (the tensor-parallel degree); it must divide the model's "
        "attention heads and the ranks. tp: all its ranks (the default); fsdp-tp: default 2, "
        "the other N/tp ranks FSDP's data-parallel dimension"))
    shard_with: str = option("none", choices=SHARD_WITH, preset=True, help=(
        "what the second mesh dimension does: none (tp alone) or fsdp (fsdp-tp)"))

    def mesh_shape(self, ranks: int) -> tuple[int, int]:
        """(data-parallel ranks, tensor-parallel ranks)."""
        ways = self.tp_size or (ranks if self.shard_with == "none" else 2)
        return ranks // ways, ways

    def check(self, workload, global_batch, devices) -> None:
        if workload.family.tensor_parallel_refusal:
            raise ModelRefused(workload.family.tensor_parallel_refusal)
        ranks = len(devices)
        replicas, ways = self.mesh_shape(ranks)
        heads = workload.family.tensor_parallel_ways(workload.model)
        if heads % ways:
            fits = [d for d in range(2, heads + 1) if heads % d == 0]
            if self.shard_with == "none":  # tp: its ranks are the tensor-parallel ones
                hint = " or ".join(f"--world-size {d}" for d in fits if d <= ranks) or (
                    f"at least {fits[0]} devices")
            else:
                hint = " or ".join(f"--tp-size {d} on a multiple of {2 * d} devices"
                                   for d in fits if 2 * d <= ranks) or (
                    f"at least {2 * fits[0]} devices")
            raise StrategyError(f"{ways} tensor-parallel ranks do not divide {workload.model}'s "
                                f"{heads} attention heads; give {hint}")
        if self.shard_with == "none" and ways != ranks:
            raise StrategyError(f"tp splits each layer over all its {ranks} ranks, not "
                                f"--tp-size {ways}; give --world-size {ways}, or fsdp-tp to "
                                "shard over the rest")
        if self.shard_with == "fsdp" and (replicas * ways != ranks or replicas < 2):
            raise StrategyError(f"{ranks} ranks as {replicas} x {ways} (fsdp x tp): fsdp-tp "
                                f"needs at least 2 of each and --tp-size dividing the ranks; "
                                f"give {2 * ways} devices or a multiple of {ways}")
        if global_batch % replicas:
            raise StrategyError(f"batch {global_batch} does not divide over {replicas} "
                                f"data-parallel ranks; use a multiple of {replicas}")

    def settings(self, devices) -> dict:
        return {**super().settings(devices), "world_size": self.world_size or len(devices)}

    def parallel_dims(self, devices) -> ParallelDims:
        groups, ways = self.mesh_shape(len(devices))
        return ParallelDims(shards=groups, tensor_parallel=ways)

    def resolved(self, global_batch, devices) -> TensorParallelOptions:
        return dataclasses.replace(self, tp_size=self.mesh_shape(len(devices))[1])


class TensorParallel(Strategy):
    """Ranks in a (dp, tp) mesh in rank order: ranks 0..T-1 split every layer of the first
    model copy between them and train on the same images; with fsdp, each group of T trains
    on its 1/D of the batch and FSDP2 shards every block over the D groups."""

    summary = ("one process per device, each layer's matrices split over the ranks "
               "(parallelize_module): alone (tp), or FSDP2 over a second mesh dimension (fsdp-tp)")
    Options = TensorParallelOptions
    options: TensorParallelOptions
    layout = Layout.TENSOR_PARALLEL
    process_per_device = True
    fp16_refusal = ("parbench's tensor parallelism keeps no fp16 loss scale; use --precision "
                    "bf16 or fp32")
    # On ranks sharing a GPU (gloo) it has not been run: verify's full_tensor() is the
    # all-gather of CUDA tensors over gloo that killed an fsdp rank (fsdp.gathered_through_cpu).
    cuda_graphs_refusal = ("tensor parallelism's DTensor collectives are not captured in CUDA "
                           f"graphs here; {WITHOUT_CUDA_GRAPHS}")

    @classmethod
    def verify_rounds_elsewhere(cls, plan) -> bool:
        # A row-wise layer's partial sums are added across ranks in the autocast dtype, where
        # single adds the same products inside one matmul.
        return plan.workload.autocast_dtype is not None

    @property
    def mesh_shape(self) -> tuple[int, int]:
        return self.options.mesh_shape(len(self.devices))

    @property
    def data_shard(self) -> tuple[int, int]:
        replicas, ways = self.mesh_shape
        return self.rank // ways, replicas

    @property
    def model(self) -> nn.Module:
        return self._model

    def setup(self) -> None:
        self.check_processes("ranks")
        device = self.input_device
        model = self.workload.build_model_on(device)
        family = self.workload.family
        # torchtitan's order: split, compile, shard (fsdp-tp: split within a group of the
        # (dp, tp) mesh, shard across the groups).
        mesh = self.device_mesh()
        sharded = self.options.shard_with == "fsdp"
        apply_tensor_parallel(family.tensor_parallel(model), mesh["tp"] if sharded else mesh)
        self.workload.compiled(model)  # each block compiled in place, after it is split
        if sharded:
            apply_fully_shard(model, family.sharded_blocks(model), mesh["dp"])
        self._model = model
        self.prepare_training(model.parameters(), device)

    def device_mesh(self) -> DeviceMesh:
        """The ranks' mesh (`mesh_of_groups`, as fsdp's): every rank splits each layer (tp
        alone), or a (dp, tp) mesh (fsdp-tp)."""
        shape = (len(self.devices),) if self.options.shard_with == "none" else self.mesh_shape
        return mesh_of_groups(self.input_device.type, shape, ("dp", "tp"))

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.workload.autocast(self.input_device):
            loss = self.loss_fn(self._model(images), labels)
        loss.backward()
        self.optimizer.step()
        # The ranks of a tensor-parallel group compute the same loss: the first gives it, so
        # that each image's loss is counted once.
        return loss.detach() if self.rank % self.mesh_shape[1] == 0 else torch.tensor(math.nan)

    def placed_modules(self) -> list[nn.Module]:
        return [self._model]

    def trained_parameters(self) -> list[torch.Tensor]:
        # full_tensor() is a collective: every rank gathers, rank 0 gives them back. torch
        # warns that fsdp-tp's (strided shard, shard) takes two all-gathers: not timed here.
        quiet = logging.getLogger("torch.distributed.tensor._redistribute")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            named = [(name, cast(DTensor, p).full_tensor() if isinstance(p, DTensor)
                      else p.detach()) for name, p in self._model.named_parameters()]
        finally:
            quiet.setLevel(level)
        return self.workload.family.unsplit(named) if self.rank == 0 else []
