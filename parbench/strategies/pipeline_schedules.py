"""Pipelines on torch.distributed.pipelining: one process per rank, each holding one stage
(GPipe, 1F1B) or several (interleaved 1F1B, looped BFS, the zero-bubble schedules); with
pipeline-fsdp's options, several pipelines side by side, each stage sharded over its copies."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.pipelining as pipelining
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage
from torch.distributed.tensor import DTensor

from parbench.strategies.base import (
    ACCUMULATED_GRADIENTS_OVERWRITTEN,
    STAGES_ACCUMULATE,
    WITHOUT_CUDA_GRAPHS,
    Layout,
    Strategy,
)
from parbench.strategies.errors import StrategyError, Unavailable, WorkloadRefused
from parbench.strategies.fsdp import reduce_by_sum_on_gloo
from parbench.strategies.partition import Partition, plan_cut, split_model
from parbench.strategies.schedule_stages import AutocastStage, ScheduleStage
from parbench.strategies.schedules import SCHEDULES, Schedule, ScheduleOptions, check_schedule
from parbench.strategies.stages import micro_batch_sizes, timing_batch

__all__ = ["SHARDED_STAGES_REFUSAL", "ScheduledPipeline"]

# What pipeline-fsdp's sharded stages add to the pipelines' refusal of CUDA graphs.
SHARDED_STAGES_REFUSAL = (
    "FSDP2 gathers each stage's parameters into new memory every step, while a CUDA graph "
    "replays at the addresses it captured, and each stage accumulates its gradients over "
    f"the micro-batches: {ACCUMULATED_GRADIENTS_OVERWRITTEN}; {WITHOUT_CUDA_GRAPHS}")

# Whether the last stage may skip merging the micro-batches' outputs (torch 2.8's step has no
# `return_outputs`, and passes unknown keywords on to the model).
_SKIPS_OUTPUTS = all("return_outputs" in inspect.signature(s.torch_class.step).parameters
                     for s in SCHEDULES.values() if s.torch_class is not None)


class ScheduledPipeline(Strategy):
    """Rank k drives devices[k] and holds its stages of the cut model; the schedule of
    torch.distributed.pipelining its registered name presets sends activations and gradients
    between ranks (gloo on CPU or a shared GPU, NCCL between GPUs).

    GPipe runs all forwards, then all backwards; 1F1B alternates once the pipeline is full, so
    at most K micro-batches' activations are alive per stage. Micro-batch losses are weighted by
    their share of the global batch (scale_grads=False), so the update equals single-device
    gradient accumulation over the same micro-batches.

    With V stages per rank (InterleavedOptions) the model is cut into K x V: rank r runs stages
    r, r+K, ... (interleaved 1F1B, looped BFS, interleaved zero bubble) or, in a V, r and
    2K-1-r (ZBV, DualPipeV), so a micro-batch passes every rank V times and the pipeline fills
    V times faster.

    With P pipelines (PipelineFSDPOptions, pp x dp on a 2-D DeviceMesh, torchtitan's
    composition) the ranks are a (dp, pp) mesh in rank order: ranks 0..K-1 are the first
    pipeline, K..2K-1 the second, and so on. Each pipeline runs its schedule over its own ranks
    on its 1/P of the batch; stage k is one FSDP2 unit sharded over the P ranks that hold it,
    whose gradients torch's PipelineStage reduce-scatters once the last micro-batch's backward
    is done.
    """

    summary = "one process per stage, torch.distributed.pipelining schedule"
    layout = Layout.SCHEDULED_PIPELINE
    process_per_device = True
    min_devices = 2
    Options = ScheduleOptions
    options: ScheduleOptions
    fp16_refusal = ("fp16 loss scaling is not coordinated across pipeline ranks; use "
                    "--precision bf16 or fp32 with process-per-stage pipelines")
    cuda_graphs_refusal = STAGES_ACCUMULATE

    def __init__(self, plan) -> None:
        super().__init__(plan)
        self._schedule: pipelining.schedules._PipelineSchedule | None = None  # on first step

    @classmethod
    def check_plan(cls, workload, global_batch, devices, options) -> None:
        schedule = SCHEDULES[options.schedule]
        if schedule.torch_class is None:
            raise Unavailable(f"this PyTorch ({torch.__version__}) has no "
                              f"torch.distributed.pipelining.{schedule.torch_name}")
        if workload.compile and schedule.splits_backward:
            raise WorkloadRefused(f"{schedule.torch_name} splits backward into input and weight "
                                  "gradients, which torch.compile does not support; drop --compile")
        batch, ranks = cls.one_pipeline(global_batch, devices, options)
        if batch < ranks:
            raise StrategyError(f"a batch of {batch} cannot fill {ranks} "
                                f"stages (the schedules need at least one micro-batch per "
                                f"stage); use --batch-size {ranks} or more")
        resolved = options.resolved(global_batch, devices)
        split = resolved.split_size
        sizes = micro_batch_sizes(batch, split)
        if len(set(sizes)) > 1:
            lower = batch - batch % split
            raise StrategyError(
                f"batch {batch} in micro-batches of {split} gives unequal "
                f"sizes ({max(sizes)} and {min(sizes)}), and torch.distributed.pipelining "
                f"needs equal ones; use --batch-size {lower or split} or {lower + split}, or a "
                f"--split-size that divides {batch}")
        check_schedule(schedule, ranks, resolved.pieces(devices) // ranks, len(sizes), batch)

    @classmethod
    def one_pipeline(cls, global_batch: int, devices, options) -> tuple[int, int]:
        """(the images one pipeline trains on per step, the ranks it spans): the whole batch
        over every device here; a replica's share over its stages where pipelines are
        replicated."""
        pipelines = options.pipeline_count
        return global_batch // pipelines, len(devices) // pipelines

    @classmethod
    def smallest_slice(cls, global_batch, devices, options) -> int:
        # A forward pass computes on a micro-batch of one pipeline's share of the batch.
        share, _ = cls.one_pipeline(global_batch, devices, options)
        return super().smallest_slice(share, devices, options)

    @classmethod
    def cuda_graphs_refusal_for(cls, options) -> str | None:
        if options is not None and options.pipeline_count > 1:
            return SHARDED_STAGES_REFUSAL
        return cls.cuda_graphs_refusal

    @classmethod
    def check_backend(cls, backend, devices, options) -> None:
        if devices[0].type == "cuda" and backend == "gloo":
            raise Unavailable("stages on GPUs over gloo (which stages sharing a GPU need: NCCL "
                              "refuses two ranks on one GPU) cannot send CUDA tensors point to "
                              "point; give each stage a GPU of its own with --backend auto or "
                              "nccl, or use the one-process `pipeline` to emulate stages on "
                              "one GPU")

    @property
    def schedule(self) -> Schedule:
        return SCHEDULES[self.options.schedule]

    @property
    def partition(self) -> str:
        return self._partition.describe()

    @property
    def pipeline_stages(self) -> int:
        return self.stage_ranks

    @property
    def pipelines(self) -> int:
        """The pipelines side by side (P): 1 unless the options replicate it."""
        return self.options.pipeline_count

    @property
    def stage_ranks(self) -> int:
        """The ranks one pipeline spans (K): every rank, unless pipelines are replicated."""
        return len(self.devices) // self.pipelines

    @property
    def stage_rank(self) -> int:
        """This rank's place in its pipeline (0 .. K-1)."""
        return self.rank % self.stage_ranks

    @property
    def data_shard(self) -> tuple[int, int]:
        return self.rank // self.stage_ranks, self.pipelines

    @property
    def micro_batches(self) -> int:
        split = self.options.micro_batch_size()
        assert split is not None  # resolved by the plan
        return len(micro_batch_sizes(self.plan.global_batch // self.pipelines, split))

    def bubble_fraction(self) -> float | None:
        ranks = self.stage_ranks
        return self.schedule.bubble(ranks, self.micro_batches, self._pieces // ranks)

    @property
    def model(self) -> nn.Module:
        return self._local[0] if len(self._local) == 1 else nn.ModuleList(self._local)

    def placed_modules(self) -> list[list[nn.Module]]:
        return [self._forwards]

    def _stage_indices(self) -> list[int]:
        """The stages this rank holds: r, r+K, r+2K, ... or, in a V, r and 2K-1-r."""
        ranks, rank = self.stage_ranks, self.stage_rank
        if self.schedule.v_shape:
            return [rank, 2 * ranks - 1 - rank]
        return list(range(rank, self._pieces, ranks))

    def setup(self) -> None:
        self.check_processes("stages")
        if self.pipelines > 1:  # the sub-groups on the backend of the ranks' own group
            self._mesh = DeviceMesh(self.input_device.type,
                                    torch.arange(len(self.devices)).view(self.pipelines, -1),
                                    mesh_dim_names=("dp", "pp"))
        self._reduce = True  # off in `without_communication`
        device = self.input_device
        balance = self.options.balance
        assert balance is not None  # resolved by the plan
        self._pieces = self.options.pieces(self.devices)
        model = self.workload.build_model()
        # Every rank must cut in the same place: rank 0 plans (timing blocks if asked) and
        # broadcasts the cut.
        cut: list[Partition | None] = [None]
        if self.rank == 0:
            sample = None
            if balance == "time":
                sample_batch = timing_batch(self.options.micro_batch_size(),
                                            self.plan.global_batch)
                sample, _ = self.workload.make_batch(sample_batch, device)
                model = model.to(device)
            cut[0] = plan_cut(self.workload, model, self._pieces, balance, sample)
        dist.broadcast_object_list(cut, src=0)
        assert cut[0] is not None  # rank 0 planned it
        self._partition = cut[0]
        modules = split_model(self.workload, model, self._partition)
        self._stage_sizes = [sum(p.numel() for p in module.parameters()) for module in modules]
        self._indices = self._stage_indices()
        self._local = [self.workload.prepare_model(modules[i].to(device)).train()
                       for i in self._indices]
        self._forwards = [self.workload.compiled(module) for module in self._local]
        self._stages = [
            ScheduleStage(self.replicated(AutocastStage(forward, device, self.workload)),
                          index, self._pieces, device, group=self.pipeline_group())
            for forward, index in zip(self._forwards, self._indices, strict=True)]
        self.optimizer = self.workload.make_optimizer(
            [p for module in self._local for p in module.parameters()])
        self.loss_fn = self.workload.loss_fn()
        for stage in self._stages:
            self._mark_actions(stage)

    def trained_parameters(self) -> list[torch.Tensor]:
        """Every stage's parameters in model order, gathered to rank 0 (a rank's stages are
        not contiguous in the model when it holds several)."""
        local = {index: self.whole_parameters(module)
                 for index, module in zip(self._indices, self._local, strict=True)}
        gathered: list[Any] = [None] * dist.get_world_size()  # each rank's `local`
        dist.all_gather_object(gathered, local)
        if self.rank != 0:
            return []
        # The first pipeline's (ranks 0 .. K-1; a replicated pipeline's copies equal it).
        stages = {index: params for part in gathered[:self.stage_ranks]
                  for index, params in part.items()}
        return [p for index in sorted(stages) for p in stages[index]]

    def whole_parameters(self, module: nn.Module) -> list[torch.Tensor]:
        """A stage's parameters, whole, on the CPU: where it is sharded over its copies,
        gathered within them (every copy calls it)."""
        if self.pipelines > 1:
            return [cast(DTensor, p).full_tensor().detach().cpu() for p in module.parameters()]
        return [p.detach().cpu() for p in module.parameters()]

    def pipeline_group(self) -> dist.ProcessGroup | None:
        """The ranks that exchange this rank's activations and gradients (None: all)."""
        return self._mesh.get_group("pp") if self.pipelines > 1 else None

    def replicated(self, stage: nn.Module) -> nn.Module:
        """The stage module as the schedule runs it: sharded over its P copies where
        pipelines are replicated. Not resharded after forward, as torchtitan shards under
        pipeline parallelism (`reshard_after_forward=not pp_enabled`): a stage runs several
        micro-batches' forwards before their backwards, and resharding would all-gather it
        again for each backward. A stage is its own root unit, which FSDP2 keeps gathered by
        default anyway; said here so that it holds whatever the default. It is resharded after
        the step's last backward (PipelineStage sets that), its gradient reduce-scattered once."""
        if self.pipelines == 1:
            return stage
        unit = fully_shard(stage, mesh=self._mesh["dp"], reshard_after_forward=False)
        reduce_by_sum_on_gloo([unit])
        return cast(nn.Module, unit)

    def action(self, stage, micro_batch, phase, model_stage=None):
        # The first pipeline's actions stand for all (the others run the same schedule).
        if self.pipelines > 1 and self.rank >= self.stage_ranks:
            return contextlib.nullcontext()
        return super().action(stage, micro_batch, phase, model_stage)

    def _mark_actions(self, stage: PipelineStage) -> None:
        """Each micro-batch's forward and backward that the schedule runs on this stage goes
        through `action` (its compute only: sends and receives are the schedule's own)."""
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk
        weight = stage.backward_weight_one_chunk
        model_stage = stage.stage_index if self.schedule.multi_stage else None

        def forward_one_chunk(chunk: int, *args, **kwargs):
            with self.action(self.stage_rank, chunk, "F", model_stage):
                return forward(chunk, *args, **kwargs)

        def backward_one_chunk(chunk: int, *args, full_backward: bool = True, **kwargs):
            with self.action(self.stage_rank, chunk, "B" if full_backward else "I",
                             model_stage):
                return backward(chunk, *args, **{**kwargs, "full_backward": full_backward})

        def weight_one_chunk(chunk: int, *args, **kwargs):
            with self.action(self.stage_rank, chunk, "W", model_stage):
                return weight(chunk, *args, **kwargs)

        # This stage's own methods, wrapped: the schedule calls them on the instance.
        stage.forward_one_chunk = forward_one_chunk  # type: ignore[method-assign,assignment]
        stage.backward_one_chunk = backward_one_chunk  # type: ignore[method-assign,assignment]
        stage.backward_weight_one_chunk = weight_one_chunk  # type: ignore[method-assign,assignment]
        if self.pipelines > 1:
            reduce = stage.perform_reduce_grad

            def perform_reduce_grad(grad_scale_factor: int) -> None:
                if self._reduce:
                    reduce(grad_scale_factor)

            stage.perform_reduce_grad = perform_reduce_grad  # type: ignore[method-assign]

    def _make_schedule(self, global_batch: int, count: int):
        def weighted_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            with self.workload.autocast(self.input_device):
                return self.loss_fn(output, target) * (len(target) / global_batch)

        # Single-stage schedules take this rank's stage, the others the list of its stages.
        stages = self._stages if self.schedule.multi_stage else self._stages[0]
        try:
            return self.schedule.torch_class(stages, n_microbatches=count,
                                             loss_fn=weighted_loss, scale_grads=False)
        except ValueError as error:
            raise StrategyError(str(error)) from None

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        global_batch = len(images)
        if self._schedule is None:
            self._schedule = self._make_schedule(global_batch, self.micro_batches)

        self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        # The whole batch, split by the schedule itself into its (equal, see check_plan)
        # micro-batches: the one calling convention every supported release shares (2.14 also
        # takes pre-split `arg_mbs`; 2.8 to 2.13 pass such keywords on to the model). The rank
        # holding the first stage feeds the images, the one holding the last the labels (in a
        # V, rank 0 holds both).
        inputs = (images,) if 0 in self._indices else ()
        last: dict[str, Any] = {}
        if self._pieces - 1 in self._indices:
            last = dict(target=labels, losses=losses)
            if _SKIPS_OUTPUTS:
                last["return_outputs"] = False
        self._schedule.step(*inputs, **last)
        self.optimizer.step()
        if losses:
            return torch.stack([loss.detach().float() for loss in losses]).sum()
        return torch.tensor(float("nan"))

    def without_communication(self):
        """Replicated pipelines: the same steps without reducing gradients across the
        pipelines (`_unreduced`); None for one pipeline, whose ranks exchange only what the
        step needs."""
        return self._unreduced() if self.pipelines > 1 else None

    @contextlib.contextmanager
    def _unreduced(self):
        """Each stage stays gathered after the first of these steps (no all-gather either) and
        its sharded parameters get no gradient, so the optimiser updates nothing, as fsdp's
        compute-only steps; the pipelines still send activations from stage to stage."""
        self._reduce = False
        try:
            yield
        finally:
            self._reduce = True

    def communication(self) -> dict[str, float | int | None]:
        """Replicated pipelines' bytes per step on the ranks of the largest stage: its fp32
        gradient reduced (reduce-scattered over its copies) and its parameters all-gathered
        once (a stage is FSDP's root unit, kept gathered from forward to backward)."""
        if self.pipelines == 1:
            return {}
        largest = max(self._stage_sizes) * torch.float32.itemsize
        return dict(allreduce_bytes=largest, allgather_bytes=largest)
