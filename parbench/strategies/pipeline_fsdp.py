"""Data parallelism over pipelines (pp x dp on a 2-D DeviceMesh): P 1F1B pipelines side by
side, each on 1/P of the batch, every stage sharded with FSDP2 over its P copies (torchtitan's
composition of pipelining with FSDP)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from typing_extensions import Self  # typing's from Python 3.11

from parbench.strategies.base import ACCUMULATED_GRADIENTS_OVERWRITTEN, WITHOUT_CUDA_GRAPHS, Layout
from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError
from parbench.strategies.fsdp import reduce_by_sum_on_gloo
from parbench.strategies.options import option
from parbench.strategies.partition import default_balance
from parbench.strategies.pipeline_schedules import ScheduledPipeline, ScheduleOptions
from parbench.strategies.stages import micro_batch_sizes, resolve_split

__all__ = ["PipelineFSDP", "PipelineFSDPOptions"]


@dataclass(frozen=True)
class PipelineFSDPOptions(ScheduleOptions):
    """The pipeline's cut and micro-batches, and how many pipelines run side by side."""

    pipelines: int | None = option(minimum=2, label="P", help=(
        "pipelines side by side (the data-parallel dimension): N devices make P pipelines of "
        "N/P stages, each on 1/P of the batch (default 2)"))

    @property
    def count(self) -> int:
        """The pipelines side by side, the default resolved."""
        return self.pipelines or 2

    def pieces(self, devices) -> int:
        return len(devices) // self.count

    def device_count(self) -> int | None:
        return self.stages * self.count if self.stages else None

    def device_count_text(self) -> str:
        return f"{self.count} pipelines of {self.stages} stages need"

    def check(self, workload, global_batch, devices) -> None:
        pipelines = self.count
        if len(devices) % pipelines or len(devices) // pipelines < 2:
            raise StrategyError(f"{len(devices)} devices do not make {pipelines} pipelines of 2 "
                                f"stages or more; give {2 * pipelines} devices or a multiple, "
                                "or another --pipelines")
        if global_batch % pipelines:
            lower = global_batch - global_batch % pipelines
            raise StrategyError(f"batch {global_batch} does not divide over {pipelines} "
                                f"pipelines; use a multiple of {pipelines}, e.g. --batch-size "
                                f"{lower or pipelines} or {lower + pipelines}")
        super().check(workload, global_batch // pipelines, devices)

    def parallel_dims(self, devices) -> ParallelDims:
        return replace(super().parallel_dims(devices), stages=len(devices) // self.count,
                       shards=self.count)

    def resolved(self, global_batch, devices) -> Self:
        pipelines = self.count
        stages = len(devices) // pipelines
        split, _ = resolve_split(global_batch // pipelines, self.split_size, stages)
        return replace(self, pipelines=pipelines, stages=stages, split_size=split,
                       balance=self.balance or default_balance(stages))


class PipelineFSDP(ScheduledPipeline):
    """Ranks in a (dp, pp) mesh in rank order: ranks 0..K-1 are the first pipeline, K..2K-1
    the second, and so on. Each pipeline runs 1F1B over its own ranks on its share of the
    batch; stage k is one FSDP2 unit sharded over the P ranks that hold it, whose gradients
    torch's PipelineStage reduce-scatters once the last micro-batch's backward is done."""

    summary = ("P pipelines side by side (pp x dp), each stage sharded over its copies with "
               "FSDP2; one process per device")
    layout = Layout.SHARDED_PIPELINES
    Options = PipelineFSDPOptions
    options: PipelineFSDPOptions
    min_devices = 4  # two pipelines of two stages
    cuda_graphs_refusal = (
        "FSDP2 gathers each stage's parameters into new memory every step, while a CUDA graph "
        "replays at the addresses it captured, and each stage accumulates its gradients over "
        f"the micro-batches: {ACCUMULATED_GRADIENTS_OVERWRITTEN}; {WITHOUT_CUDA_GRAPHS}")

    @classmethod
    def one_pipeline(cls, global_batch, devices, options) -> tuple[int, int]:
        return global_batch // options.count, len(devices) // options.count

    @classmethod
    def smallest_slice(cls, global_batch, devices, options) -> int:
        # A forward pass computes on a micro-batch of one pipeline's share of the batch.
        share, _ = cls.one_pipeline(global_batch, devices, options)
        return super().smallest_slice(share, devices, options)

    @property
    def pipelines(self) -> int:
        return self.options.count

    @property
    def stage_ranks(self) -> int:
        return len(self.devices) // self.pipelines

    @property
    def stage_rank(self) -> int:
        return self.rank % self.stage_ranks

    @property
    def data_shard(self) -> tuple[int, int]:
        return self.rank // self.stage_ranks, self.pipelines

    @property
    def micro_batches(self) -> int:
        split = self.options.micro_batch_size()
        assert split is not None  # resolved by the plan
        return len(micro_batch_sizes(self.plan.global_batch // self.pipelines, split))

    def setup(self) -> None:
        # The sub-groups on the backend of the ranks' own group.
        self._mesh = DeviceMesh(self.input_device.type,
                                torch.arange(len(self.devices)).view(self.pipelines, -1),
                                mesh_dim_names=("dp", "pp"))
        self._reduce = True
        super().setup()

    def pipeline_group(self) -> dist.ProcessGroup:
        return self._mesh.get_group("pp")

    def replicated(self, stage: nn.Module) -> nn.Module:
        # Not resharded after forward, as torchtitan shards under pipeline parallelism
        # (`reshard_after_forward=not pp_enabled`): a stage runs several micro-batches' forwards
        # before their backwards, and resharding would all-gather it again for each backward.
        # A stage is its own root unit, which FSDP2 keeps gathered by default anyway; said
        # here so that it holds whatever the default. It is resharded after the step's last
        # backward (PipelineStage sets that), its gradient reduce-scattered once.
        unit = fully_shard(stage, mesh=self._mesh["dp"], reshard_after_forward=False)
        reduce_by_sum_on_gloo([unit])
        return cast(nn.Module, unit)

    def whole_parameters(self, module: nn.Module) -> list[torch.Tensor]:
        # Sharded over the stage's copies: gathered within them (every copy calls it).
        return [cast(DTensor, p).full_tensor().detach().cpu() for p in module.parameters()]

    def action(self, stage, micro_batch, phase, model_stage=None):
        # The first pipeline's actions stand for all (the others run the same schedule).
        if self.rank >= self.stage_ranks:
            return contextlib.nullcontext()
        return super().action(stage, micro_batch, phase, model_stage)

    def _mark_actions(self, stage) -> None:
        super()._mark_actions(stage)
        reduce = stage.perform_reduce_grad

        def perform_reduce_grad(grad_scale_factor: int) -> None:
            if self._reduce:  # off in `without_communication`
                reduce(grad_scale_factor)

        stage.perform_reduce_grad = perform_reduce_grad

    @contextlib.contextmanager
    def without_communication(self):
        """The same steps without reducing gradients across the pipelines: each stage stays
        gathered after the first of them (no all-gather either) and its sharded parameters
        get no gradient, so the optimiser updates nothing, as fsdp's compute-only steps; the
        pipelines still send activations from stage to stage."""
        self._reduce = False
        try:
            yield
        finally:
            self._reduce = True

    def communication(self) -> dict[str, float | int | None]:
        """Bytes per step on the ranks of the largest stage: its fp32 gradient reduced
        (reduce-scattered over its copies) and its parameters all-gathered once (a stage is
        FSDP's root unit, kept gathered from forward to backward)."""
        largest = max(self._stage_sizes) * torch.float32.itemsize
        return dict(allreduce_bytes=largest, allgather_bytes=largest)
