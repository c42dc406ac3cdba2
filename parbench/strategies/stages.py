"""Model stages placed on logical devices, and the micro-batches that flow through them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from parbench.strategies.errors import StrategyError
from parbench.strategies.partition import Partition, cut_model

__all__ = ["MAX_TIMING_BATCH", "Stage", "bubble_fraction", "build_stages", "micro_batch_sizes",
           "resolve_split", "timing_batch"]

# The `time` balance times the blocks at the micro-batch the run trains on, up to this many
# images: the cut needs only the blocks' relative times, and those depend on the batch where a
# GPU is launch-bound (at 8 images every block costs about its kernel count) but settle once
# the kernels have tens of images of work; a larger batch only makes the timing slower.
MAX_TIMING_BATCH = 64


def bubble_fraction(stages: int, micro_batches: int, stages_per_rank: int = 1) -> float:
    """The theoretical idle share of a step of K stages over M micro-batches: GPipe's and
    1F1B's (K-1)/(M+K-1); with V stages per rank interleaved, the bubble over the ideal time
    shrinks V-fold to (K-1)/(V M) (Narayanan et al. 2021), here as a share of the step."""
    ratio = (stages - 1) / (stages_per_rank * micro_batches)
    return ratio / (1 + ratio)


def micro_batch_sizes(global_batch: int, split_size: int) -> list[int]:
    """Sizes of the micro-batches a global batch is cut into: ceil(B / split) near-equal parts.

    This is how torch.tensor_split (and torch.distributed.pipelining) splits, so every
    pipelined strategy feeds the same micro-batches.
    """
    count = -(-global_batch // split_size)
    return [len(part) for part in torch.arange(global_batch).tensor_split(count)]


def resolve_split(global_batch: int, split_size: int | None,
                  stages: int) -> tuple[int, list[int]]:
    """The split size to use (default: 4 micro-batches per stage, where GPipe's bubble
    (K-1)/(M+K-1) becomes small) and the micro-batch sizes it gives."""
    split_size = split_size or -(-global_batch // (4 * stages))
    if split_size > global_batch:
        raise StrategyError(f"split size {split_size} is larger than the batch "
                            f"{global_batch}; use a split size of at most {global_batch}")
    return split_size, micro_batch_sizes(global_batch, split_size)


@dataclass(frozen=True)
class Stage:
    """One stage of a cut model, as the strategy calls it, on its device."""

    module: nn.Module
    device: torch.device


def timing_batch(micro_batch: int | None, global_batch: int) -> int:
    """The batch the `time` balance times the blocks at: the run's micro-batch size (its
    global batch where it has none), at most MAX_TIMING_BATCH."""
    return min(micro_batch or global_batch, MAX_TIMING_BATCH)


def build_stages(workload, devices: Sequence[torch.device], balance: str,
                 sample_batch: int) -> tuple[Partition, list[Stage]]:
    """Cut the workload's model into len(devices) stages and place stage k on devices[k].

    For balance by time the blocks are timed on devices[0] on a sample of `sample_batch`
    images, at the workload's precision and memory format.
    """
    model = workload.build_model()
    sample = None
    if balance == "time":
        sample, _ = workload.make_batch(sample_batch, devices[0])
        model = model.to(devices[0])
    partition, modules = cut_model(workload, model, len(devices), balance, sample)
    stages = []
    for module, device in zip(modules, devices, strict=True):
        module = workload.prepare_model(module.to(device)).train()
        stages.append(Stage(workload.compiled(module), device))
    return partition, stages
