"""The tutorial's pipeline in one process: micro-batches flow through stages on their devices."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from typing_extensions import Self  # typing's from Python 3.11

from parbench.strategies.base import (
    ACCUMULATED_GRADIENTS_OVERWRITTEN,
    WITHOUT_CUDA_GRAPHS,
    Layout,
    Strategy,
)
from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError
from parbench.strategies.model_parallel import StageOptions, place_stages
from parbench.strategies.options import option
from parbench.strategies.stages import micro_batch_sizes, resolve_split

__all__ = ["Pipeline", "PipelineOptions"]


@dataclass(frozen=True)
class PipelineOptions(StageOptions):
    """A cut into stages and the micro-batches that flow through them."""

    split_size: int | None = option(
        minimum=1, label="split", help="micro-batch size: the batch is cut into "
        "ceil(batch/split) near-equal micro-batches (default: 4 micro-batches per stage)")

    def micro_batch_size(self) -> int | None:
        return self.split_size

    def parallel_dims(self, devices) -> ParallelDims:
        # The one-process pipeline fills its stages and drains them, GPipe's order, a thread
        # per stage (the schedules' options name their own schedule).
        return ParallelDims(stages=len(devices), schedule="fill-drain",
                            micro_batch=self.split_size)

    def check(self, workload, global_batch, devices) -> None:
        if self.split_size is not None and self.split_size > global_batch:
            raise StrategyError(f"--split-size {self.split_size} is larger than --batch-size "
                                f"{global_batch}; a micro-batch cannot exceed the global batch")
        super().check(workload, global_batch, devices)

    def resolved(self, global_batch, devices) -> Self:
        split_size, _ = resolve_split(global_batch, self.split_size, len(devices))
        return replace(super().resolved(global_batch, devices), split_size=split_size)


class Pipeline(Strategy):
    """Micro-batched model parallelism (GPipe's fill-drain schedule) in one process.

    `split_size` is the micro-batch size (default: 4 micro-batches per stage, where GPipe's
    bubble (K-1)/(M+K-1) becomes small).

    Each stage has its own worker thread, as each GPU has its own queue: at clock tick t stage k
    runs micro-batch t - k, so stage k+1 works on micro-batch i-1 while stage k works on i. All
    forwards, then all backwards in reverse; stages exchange activations and their gradients
    across detached boundaries. The loss of micro-batch i is weighted by its share of the global
    batch, so the update equals single-device gradient accumulation over the same micro-batches.
    """

    summary = "stages on their devices, micro-batches overlapping across stages (one process)"
    layout = Layout.TICK_PIPELINE
    min_devices = 2
    Options = PipelineOptions
    options: PipelineOptions
    cuda_graphs_refusal = (
        "pipeline runs each stage on a thread of its own, while torch keeps its CUDA graph "
        f"trees per thread, and accumulates gradients over micro-batches: "
        f"{ACCUMULATED_GRADIENTS_OVERWRITTEN}; {WITHOUT_CUDA_GRAPHS}, or use model-parallel")

    def setup(self) -> None:
        self._partition, self.stages, self._model = place_stages(self)
        # One worker per stage: a stage's work always runs on its own thread, like a GPU stream.
        # torch's intra-op thread count is per thread for OpenMP: a new thread would otherwise
        # run its ops on every core, so each worker takes the count the caller runs with.
        threads = torch.get_num_threads()
        self.workers = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stage{k}",
                                           initializer=torch.set_num_threads,
                                           initargs=(threads,))
                        for k in range(len(self.stages))]
        # Each worker runs its stage's work in a copy of this thread's context: what torch
        # sets per thread in context variables (dynamo's settings, which --compile's blocks
        # raise: `Workload.compiled`) holds on the stage threads too.
        self._contexts = [contextvars.copy_context() for _ in self.stages]

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def partition(self) -> str:
        return self._partition.describe()

    @property
    def pipeline_stages(self) -> int:
        return len(self.devices)

    def placed_modules(self) -> list[nn.Module]:
        return [stage.module for stage in self.stages]

    def close(self) -> None:
        for worker in getattr(self, "workers", []):
            worker.shutdown(wait=True)

    def _run_tick(self, tasks) -> None:
        futures = [self.workers[k].submit(self._contexts[k].run, fn, i, k)
                   for fn, i, k in tasks]
        for future in futures:
            future.result()  # re-raises a stage's exception here

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        global_batch = len(images)
        assert self.options.split_size is not None  # resolved by the plan
        sizes = micro_batch_sizes(global_batch, self.options.split_size)
        count = len(sizes)
        image_chunks, label_chunks = images.split(sizes), labels.split(sizes)
        stages = self.stages
        depth = len(stages)
        # Filled in by the schedule's ticks: what each (micro-batch, stage) took and gave.
        inputs: list[list[Any]] = [[None] * depth for _ in range(count)]
        outputs: list[list[Any]] = [[None] * depth for _ in range(count)]
        losses: list[Any] = [None] * count

        def forward(i: int, k: int) -> None:
            stage = stages[k]
            if k == 0:
                x = image_chunks[i].to(stage.device)
            else:
                x = outputs[i][k - 1].detach().to(stage.device).requires_grad_()
            inputs[i][k] = x
            with self.action(k, i, "F"), self.workload.autocast(stage.device):
                out = stage.module(x)
                if k == depth - 1:
                    loss = self.loss_fn(out, label_chunks[i].to(stage.device))
                    losses[i] = loss * (sizes[i] / global_batch)
            outputs[i][k] = out

        def backward(i: int, k: int) -> None:
            with self.action(k, i, "B"):
                if k == depth - 1:
                    self.scaler.scale(losses[i]).backward()
                else:
                    grad = inputs[i][k + 1].grad.to(stages[k].device)
                    torch.autograd.backward(outputs[i][k], grad)
            outputs[i][k] = None

        self.optimizer.zero_grad(set_to_none=True)
        ticks = count + depth - 1
        for t in range(ticks):
            self._run_tick([(forward, t - k, k) for k in range(depth) if 0 <= t - k < count])
        for t in range(ticks):
            # The last stage starts: stage k runs micro-batch i when (K-1-k) + (M-1-i) == t.
            self._run_tick([(backward, count - 1 - (t - (depth - 1 - k)), k)
                            for k in range(depth) if 0 <= t - (depth - 1 - k) < count])
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return torch.stack([loss.detach().float().to(stages[-1].device) for loss in losses]).sum()
