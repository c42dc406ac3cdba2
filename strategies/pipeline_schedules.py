"""Pipelines on torch.distributed.pipelining: one process per stage, GPipe or 1F1B schedules."""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from strategies.base import ProcessPerDevice
from strategies.errors import StrategyError
from strategies.partition import plan_cut, split_model
from strategies.pipeline import PipelineOptions
from strategies.stages import micro_batch_sizes

__all__ = ["SCHEDULES", "ScheduledPipeline"]

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
# Whether the last stage may skip merging the micro-batches' outputs (torch 2.8's step has no
# `return_outputs`, and passes unknown keywords on to the model).
_SKIPS_OUTPUTS = all("return_outputs" in inspect.signature(schedule.step).parameters
                     for schedule in SCHEDULES.values())


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


class ScheduledPipeline(ProcessPerDevice):
    """Stage k in process k on devices[k]; torch.distributed.pipelining's schedule sends
    activations and gradients between ranks (gloo on CPU or a shared GPU, NCCL between GPUs).

    GPipe runs all forwards, then all backwards; 1F1B alternates once the pipeline is full, so
    at most K micro-batches' activations are alive per stage. Micro-batch losses are weighted by
    their share of the global batch (scale_grads=False), so the update equals single-device
    gradient accumulation over the same micro-batches.
    """

    summary = "one process per stage, torch.distributed.pipelining schedule"
    min_devices = 2
    Options = PipelineOptions
    fp16_refusal = ("fp16 loss scaling is not coordinated across pipeline ranks; use "
                    "--precision bf16 or fp32 with process-per-stage pipelines")

    def __init__(self, plan, schedule: str = "gpipe") -> None:
        if schedule not in SCHEDULES:
            raise StrategyError(f"unknown schedule {schedule!r}; choose from "
                                f"{', '.join(SCHEDULES)}")
        super().__init__(plan)
        self.schedule_name = schedule
        self._schedule = None

    @classmethod
    def check_plan(cls, workload, global_batch, devices, options) -> None:
        stages = len(devices)
        if global_batch < stages:
            raise StrategyError(f"a batch of {global_batch} cannot fill {stages} "
                                f"stages (the schedules need at least one micro-batch per "
                                f"stage); use --batch-size {stages} or more")
        split = options.resolved(global_batch, devices).split_size
        sizes = micro_batch_sizes(global_batch, split)
        if len(set(sizes)) > 1:
            lower = global_batch - global_batch % split
            raise StrategyError(
                f"batch {global_batch} in micro-batches of {split} gives unequal "
                f"sizes ({max(sizes)} and {min(sizes)}), and torch.distributed.pipelining "
                f"needs equal ones; use --batch-size {lower or split} or {lower + split}, or a "
                f"--split-size that divides {global_batch}")

    @classmethod
    def unavailable_reason(cls, devices) -> str | None:
        if devices[0].type == "cuda" and len(set(devices)) < len(devices):
            return ("stages sharing a GPU need gloo (NCCL refuses two ranks on one GPU), and "
                    "gloo cannot send CUDA tensors point to point; give distinct GPUs, or use "
                    "the one-process `pipeline` to emulate stages on one GPU")
        return None

    @property
    def micro_batches(self) -> int:
        return len(micro_batch_sizes(self.plan.global_batch, self.options.split_size))

    @property
    def partition(self) -> str:
        return self._partition.describe()

    @property
    def pipeline_stages(self) -> int:
        return len(self.devices)

    @property
    def model(self) -> nn.Module:
        return self._stage_module

    def placed_modules(self) -> list[nn.Module]:
        return [self._forward]

    def setup(self) -> None:
        if dist.get_world_size() != len(self.devices):
            raise StrategyError(f"{len(self.devices)} stages need {len(self.devices)} processes, "
                                f"got {dist.get_world_size()}")
        device = self.input_device
        balance = self.options.balance
        model = self.workload.build_model()
        # Every rank must cut in the same place: rank 0 plans (timing blocks if asked) and
        # broadcasts the cut.
        cut = [None]
        if self.rank == 0:
            sample = None
            if balance == "time":
                sample, _ = self.workload.make_batch(8, device)
                model = model.to(device)
            cut[0] = plan_cut(model, len(self.devices), balance, sample)
        dist.broadcast_object_list(cut, src=0)
        self._partition = cut[0]
        module = split_model(model, self._partition)[self.rank]
        module = self.workload.prepare_model(module.to(device)).train()
        self._stage_module = module
        self._forward = self.workload.compiled(module)
        self._stage = PipelineStage(_AutocastStage(self._forward, device, self.workload), self.rank,
                                    len(self.devices), device)
        self.optimizer = self.workload.make_optimizer(module.parameters())
        self.loss_fn = self.workload.loss_fn()
        self._mark_actions(self._stage)

    def _mark_actions(self, stage: PipelineStage) -> None:
        """Each micro-batch's forward and backward that the schedule runs on this stage goes
        through `action` (its compute only: sends and receives are the schedule's own)."""
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk
        weight = stage.backward_weight_one_chunk

        def forward_one_chunk(chunk: int, *args, **kwargs):
            with self.action(self.rank, chunk, "F"):
                return forward(chunk, *args, **kwargs)

        def backward_one_chunk(chunk: int, *args, full_backward: bool = True, **kwargs):
            with self.action(self.rank, chunk, "B" if full_backward else "I"):
                return backward(chunk, *args, full_backward=full_backward, **kwargs)

        def backward_weight_one_chunk(chunk: int, *args, **kwargs):
            with self.action(self.rank, chunk, "W"):
                return weight(chunk, *args, **kwargs)

        stage.forward_one_chunk = forward_one_chunk
        stage.backward_one_chunk = backward_one_chunk
        stage.backward_weight_one_chunk = backward_weight_one_chunk

    def _make_schedule(self, global_batch: int, count: int):
        def weighted_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            with self.workload.autocast(self.input_device):
                return self.loss_fn(output, target) * (len(target) / global_batch)

        try:
            return SCHEDULES[self.schedule_name](self._stage, n_microbatches=count,
                                                 loss_fn=weighted_loss, scale_grads=False)
        except ValueError as error:
            raise StrategyError(str(error)) from None

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        global_batch, depth = len(images), len(self.devices)
        if self._schedule is None:
            self._schedule = self._make_schedule(global_batch, self.micro_batches)

        self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        # The whole batch, split by the schedule itself into its (equal, see check_plan)
        # micro-batches: the one calling convention every supported release shares (2.14 also
        # takes pre-split `arg_mbs`; 2.8 to 2.13 pass such keywords on to the model).
        if self.rank == 0:
            self._schedule.step(images)
        elif self.rank == depth - 1:
            skip = {"return_outputs": False} if _SKIPS_OUTPUTS else {}
            self._schedule.step(target=labels, losses=losses, **skip)
        else:
            self._schedule.step()
        self.optimizer.step()
        if losses:
            return torch.stack([loss.detach().float() for loss in losses]).sum()
        return torch.tensor(float("nan"))
