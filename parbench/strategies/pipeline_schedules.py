"""Pipelines on torch.distributed.pipelining: one process per rank, each holding one stage
(GPipe, 1F1B) or several (interleaved 1F1B, looped BFS, the zero-bubble schedules)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.pipelining as pipelining
from torch import nn
from torch.distributed.pipelining import PipelineStage
from typing_extensions import Self  # typing's from Python 3.11

from parbench.strategies.base import STAGES_ACCUMULATE, Layout, ProcessPerDevice
from parbench.strategies.errors import StrategyError, Unavailable, WorkloadRefused
from parbench.strategies.options import option
from parbench.strategies.partition import Partition, plan_cut, split_model
from parbench.strategies.pipeline import PipelineOptions
from parbench.strategies.stages import bubble_fraction, micro_batch_sizes, timing_batch

__all__ = ["SCHEDULES", "InterleavedOptions", "InterleavedPipeline", "Schedule",
           "ScheduleOptions", "ScheduledPipeline"]


@dataclass(frozen=True)
class Schedule:
    """A schedule of torch.distributed.pipelining as parbench runs it."""

    torch_name: str  # its class in torch.distributed.pipelining
    multi_stage: bool  # several stages per rank
    v_shape: bool  # rank r holds stages r and 2K-1-r (else r, r+K, r+2K, ...)
    splits_backward: bool  # input- and weight-gradient halves (zero bubble): no torch.compile
    # Theoretical idle share of a step from K ranks, M micro-batches and V stages per rank
    # (None: no closed form used here).
    bubble: Callable[[int, int, int], float | None]

    @property
    def torch_class(self):
        return getattr(pipelining, self.torch_name, None)


SCHEDULES = {
    "gpipe": Schedule("ScheduleGPipe", False, False, False, bubble_fraction),
    "1f1b": Schedule("Schedule1F1B", False, False, False, bubble_fraction),
    "interleaved-1f1b": Schedule("ScheduleInterleaved1F1B", True, False, False, bubble_fraction),
    "looped-bfs": Schedule("ScheduleLoopedBFS", True, False, False, bubble_fraction),
    # ZB-H1 (Qi et al. 2024): a third of 1F1B's bubble over the ideal time when F, B and W
    # take equal time (as if three times the micro-batches).
    "zero-bubble": Schedule("ScheduleInterleavedZeroBubble", True, False, True,
                            lambda k, m, v: bubble_fraction(k, 3 * m, v)),
    # ZB-V: no bubble once M >= 2K, F, B and W taking equal time.
    "zbv": Schedule("ScheduleZBVZeroBubble", True, True, True,
                    lambda k, m, v: 0.0 if m >= 2 * k else None),
    "dualpipev": Schedule("ScheduleDualPipeV", True, True, True, lambda k, m, v: None),
}
# Whether the last stage may skip merging the micro-batches' outputs (torch 2.8's step has no
# `return_outputs`, and passes unknown keywords on to the model).
_SKIPS_OUTPUTS = all("return_outputs" in inspect.signature(s.torch_class.step).parameters
                     for s in SCHEDULES.values() if s.torch_class is not None)


@dataclass(frozen=True)
class ScheduleOptions(PipelineOptions):
    """A pipeline's cut and micro-batches, and the schedule its registered name presets."""

    schedule: str = option("gpipe", choices=tuple(SCHEDULES), preset=True,
                           help="the torch.distributed.pipelining schedule")


@dataclass(frozen=True)
class InterleavedOptions(ScheduleOptions):
    """Several stages per rank: the model is cut into K x V stages."""

    stages_per_rank: int | None = option(minimum=2, label="V", help="stages each rank holds "
                                         "(V): the model is cut into K x V stages (default 2)")

    def pieces(self, devices) -> int:
        return len(devices) * (self.stages_per_rank or 2)

    def resolved(self, global_batch, devices) -> Self:
        return replace(super().resolved(global_batch, devices),
                       stages_per_rank=self.stages_per_rank or 2)


class _ContiguousGradient(torch.autograd.Function):
    """Identity whose gradient is made contiguous: the gradient a stage sends back for its
    input must be, for gloo (a compiled or channels_last stage may produce another layout)."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.view_as(inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class _AutocastStage(nn.Module):
    """Runs a stage's forward under the workload's autocast (per thread, and the schedule
    calls forward itself), exchanging contiguous tensors."""

    def __init__(self, module: nn.Module, device: torch.device, workload) -> None:
        super().__init__()
        self.module = module
        self._device = device
        self._workload = workload

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.requires_grad:
            inputs = _ContiguousGradient.apply(inputs)
        with self._workload.autocast(self._device):
            # gloo sends contiguous tensors only, and a compiled or channels_last stage may
            # return another layout (a no-op where the output is contiguous already).
            return self.module(inputs).contiguous()


class _Stage(PipelineStage):
    """A PipelineStage whose warm-up exchanges nothing with its own rank. In torch 2.11 a
    schedule's first step sends a dummy tensor to each neighbouring stage, also to one on the
    same rank (the V layouts: rank K-1 holds stages K-1 and K), and gloo has no pair to itself
    ("Pair is not connected"); torch 2.14 leaves such neighbours out itself, and every release
    passes their activations and gradients locally."""

    def _get_init_p2p_neighbors_ops(self) -> list[dist.P2POp]:
        return [op for op in super()._get_init_p2p_neighbors_ops()
                if getattr(op, "group_peer", op.peer) != self.group_rank]


class ScheduledPipeline(ProcessPerDevice):
    """Rank k drives devices[k] and holds its stages of the cut model; the schedule of
    torch.distributed.pipelining its registered name presets sends activations and gradients
    between ranks (gloo on CPU or a shared GPU, NCCL between GPUs).

    GPipe runs all forwards, then all backwards; 1F1B alternates once the pipeline is full, so
    at most K micro-batches' activations are alive per stage. Micro-batch losses are weighted by
    their share of the global batch (scale_grads=False), so the update equals single-device
    gradient accumulation over the same micro-batches.
    """

    summary = "one process per stage, torch.distributed.pipelining schedule"
    layout = Layout.SCHEDULED_PIPELINE
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
        cls._check_schedule(schedule, ranks, resolved.pieces(devices) // ranks, len(sizes), batch)

    @classmethod
    def one_pipeline(cls, global_batch: int, devices, options) -> tuple[int, int]:
        """(the images one pipeline trains on per step, the ranks it spans): the whole batch
        over every device here; a replica's share over its stages where pipelines are
        replicated."""
        return global_batch, len(devices)

    @staticmethod
    def _check_schedule(schedule: Schedule, ranks: int, per_rank: int,
                        micro_batches: int, batch: int) -> None:
        """What the schedule requires of stages per rank and micro-batches (of `batch` images)."""
        if schedule.v_shape and per_rank != 2:
            raise StrategyError(f"{schedule.torch_name} holds exactly 2 stages per rank (a V), "
                                f"got --stages-per-rank {per_rank}")
        if schedule.torch_name in ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"):
            rounds = max(1, micro_batches // ranks)
            if micro_batches % rounds:
                raise StrategyError(
                    f"{schedule.torch_name} needs the micro-batch count M to be a multiple of "
                    f"max(1, M // K) = {rounds}, got M = {micro_batches} on K = {ranks} ranks; "
                    f"choose a --split-size that makes M a multiple of {ranks}")
        # torch's 1F1B raises this at construction, on every rank of a launched run: refused
        # here, before anything is launched, a sweep records it as skipped and a draw draws
        # again
        if schedule.torch_name in ("ScheduleDualPipeV", "Schedule1F1B") \
                and micro_batches < ranks * per_rank:
            stages = ranks * per_rank
            divisors = [size for size in range(1, batch // stages + 1) if batch % size == 0]
            fix = (f"--split-size {divisors[-1]}" if divisors else
                   f"a --batch-size that gives each pipeline {stages} images or more")
            raise StrategyError(f"{schedule.torch_name} needs at least as many micro-batches as "
                                f"stages ({stages}), got {micro_batches}; use {fix}")

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
    def stage_ranks(self) -> int:
        """The ranks one pipeline spans (K): every rank, unless pipelines are replicated."""
        return len(self.devices)

    @property
    def stage_rank(self) -> int:
        """This rank's place in its pipeline (0 .. K-1)."""
        return self.rank

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
        if dist.get_world_size() != len(self.devices):
            raise StrategyError(f"{len(self.devices)} stages need {len(self.devices)} processes, "
                                f"got {dist.get_world_size()}")
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
        self._stages = [_Stage(self.replicated(_AutocastStage(forward, device, self.workload)),
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
        """A stage's parameters, whole, on the CPU."""
        return [p.detach().cpu() for p in module.parameters()]

    def pipeline_group(self) -> dist.ProcessGroup | None:
        """The ranks that exchange this rank's activations and gradients (None: all)."""
        return None

    def replicated(self, stage: nn.Module) -> nn.Module:
        """The stage module as the schedule runs it (replicated pipelines wrap it in DDP)."""
        return stage

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


class InterleavedPipeline(ScheduledPipeline):
    """Each rank holds V stages of the model cut into K x V: rank r runs stages r, r+K, ...
    (interleaved 1F1B, looped BFS, interleaved zero bubble) or, in a V, r and 2K-1-r (ZBV,
    DualPipeV), so a micro-batch passes every rank V times and the pipeline fills V times
    faster."""

    summary = "one process per rank holding V stages, torch.distributed.pipelining schedule"
    Options = InterleavedOptions
    options: InterleavedOptions
