"""What the suite needs to know of a model family: its blocks, its cut, its normalisation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

__all__ = ["ModelFamily"]


class ModelFamily(ABC):
    """A family of torchvision image classifiers, described once for every strategy.

    Strategies never name a model: they cut it into the family's `blocks`, the tutorial's
    two stages at `tutorial_cut`, FSDP's units at its `sharded_blocks` or `layer_groups`
    (`fsdp_units` says which by default), and verify compares them against the reference its
    normalisation asks for (`batch_statistics`).
    """

    # The torchvision builders this family answers for (`torchvision.models.<name>`).
    models: ClassVar[tuple[str, ...]]
    # Whether its normalisation layers use the statistics of the batch they see (BatchNorm):
    # then a micro-batch or a replica's shard normalises otherwise than the whole batch, and
    # the exact reference accumulates over the same parts. False (LayerNorm: per sample): the
    # whole-batch step is the reference for every strategy.
    batch_statistics: ClassVar[bool]
    # The smallest image side the family trains on, and the step sizes must come in.
    min_image_size: ClassVar[int]
    image_size_step: ClassVar[int] = 1
    # FSDP's units by default (--fsdp-units): "block", each of `sharded_blocks` a unit, or
    # "group", each of `layer_groups`.
    fsdp_units: ClassVar[str] = "block"
    # Why tensor parallelism cannot split this family's layers (None: `tensor_parallel`
    # says how it does).
    tensor_parallel_refusal: ClassVar[str | None] = (
        "this model family has no tensor-parallel plan (ModelFamily.tensor_parallel); use "
        "ddp, fsdp or a pipeline")

    @abstractmethod
    def build(self, model: str, image_size: int, num_classes: int) -> nn.Module:
        """A randomly initialised `model` for images of `image_size` pixels, with no random
        layer in training (dropout, stochastic depth off): each strategy draws its random
        numbers in other processes and another order, so their steps would differ by more
        than rounding, and verify fails them (a ConvNeXt with torchvision's default
        stochastic depth differs from single by 2e-4 after one step)."""

    @abstractmethod
    def blocks(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """The model as a flat list of named blocks that, called in order, compute its forward
        pass; their parameters, in order, are the model's own in `parameters()` order (what
        pipelines give back for verify). Built from the model's modules, sharing them."""

    @abstractmethod
    def tutorial_cut(self, block_names: list[str]) -> str:
        """The first block of the second stage in the tutorial's two-stage cut."""

    def sharded_blocks(self, model: nn.Module) -> list[nn.Module]:
        """FSDP's units besides the root: every block but the first (the stem) and the last
        (the head), which the root unit holds."""
        return [block for _, block in self.blocks(model)[1:-1]]

    def layer_groups(self, model: nn.Module) -> list[list[nn.Module]]:
        """FSDP's units besides the root under `--fsdp-units group`: runs of consecutive
        blocks, in forward order, each the modules of one unit (several are gathered as one).
        By default each of `sharded_blocks` alone."""
        return [[block] for block in self.sharded_blocks(model)]

    def layer_group_names(self, block_names: Sequence[str]) -> list[list[str]]:
        """The blocks (by name, of `blocks`) each of `layer_groups`' units holds, in forward
        order: what a timing model gathers together under `--fsdp-units group` (a family
        without layer groups of its own: a unit per block)."""
        return _one_unit_per_block(block_names)

    def unit_names(self, block_names: Sequence[str], fsdp_units: str) -> list[list[str]]:
        """The blocks (by name) each FSDP unit besides the root holds under `--fsdp-units`:
        `layer_group_names`' under `group`, else each of `sharded_blocks` alone."""
        if fsdp_units == "group":
            return self.layer_group_names(block_names)
        return _one_unit_per_block(block_names)

    def tensor_parallel(self, model: nn.Module) -> list[tuple[nn.Module, dict[str, str]]]:
        """Each block tensor parallelism splits, with its plan: a submodule's name in the block
        -> `colwise` (its output features split over the ranks) or `rowwise` (its input
        features split, the partial outputs summed), as torch's parallelize_module applies
        them. May swap layers for equivalent ones it can split (`unsplit` undoes that for the
        parameters); only for a family without `tensor_parallel_refusal`."""
        raise NotImplementedError(self.tensor_parallel_refusal)

    def tensor_parallel_ways(self, model: str) -> int:
        """What the number of tensor-parallel ranks must divide (a ViT's attention heads)."""
        raise NotImplementedError(self.tensor_parallel_refusal)

    def unsplit(self, named: list[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
        """A model prepared by `tensor_parallel`'s full parameters (by name, in order) as the
        model `build` makes has them, in its `parameters()` order (what verify compares)."""
        return [tensor for _, tensor in named]

    def smallest_batch(self, image_size: int) -> int:
        """The fewest images a micro-batch or a replica's shard can train on at this size."""
        return 1

    def image_size_problem(self, image_size: int) -> str | None:
        """Why the family cannot train at `image_size` and what to give instead, or None."""
        if image_size < self.min_image_size:
            return f"use at least {self.min_image_size}"
        if image_size % self.image_size_step:
            near = max(self.min_image_size, image_size - image_size % self.image_size_step)
            return f"use a multiple of {self.image_size_step} (e.g. {near})"
        return None


def _one_unit_per_block(block_names: Sequence[str]) -> list[list[str]]:
    """Every block but the root's (the first, the stem, and the last, the head) a unit."""
    return [[name] for name in block_names[1:-1]]
