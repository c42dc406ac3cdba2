"""Cut a model into K sequential stages at its family's blocks: the tutorial's cut, or balanced
cuts."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from parbench.strategies.device_timer import StepClock
from parbench.strategies.errors import StrategyError

if TYPE_CHECKING:
    from parbench.families.workloads import Workload

__all__ = [
    "BALANCES", "Partition", "cut_model", "default_balance", "partition_by_cost", "plan_cut",
    "split_model",
]

BALANCES = ("tutorial", "time", "params")


@dataclass(frozen=True)
class Partition:
    """Where a list of blocks is cut: `bounds[k]` is the first block of stage k."""

    block_names: tuple[str, ...]
    bounds: tuple[int, ...]
    balance: str

    @property
    def stages(self) -> int:
        return len(self.bounds)

    def stage_ranges(self) -> list[range]:
        ends = (*self.bounds[1:], len(self.block_names))
        return [range(start, end) for start, end in zip(self.bounds, ends, strict=True)]

    def describe(self) -> str:
        """E.g. `stem..layer2.3 | layer3.0..head` (stored in every record)."""
        return " | ".join(f"{self.block_names[r[0]]}..{self.block_names[r[-1]]}"
                          for r in self.stage_ranges())


def default_balance(stages: int) -> str:
    """The tutorial's cut where it applies (2 stages), else equal measured time per stage."""
    return "tutorial" if stages == 2 else "time"


def _tutorial_bounds(names: Sequence[str], stages: int, workload: Workload) -> tuple[int, ...]:
    if stages != 2:
        raise StrategyError(f"the tutorial's cut has 2 stages, asked for {stages}; "
                            "use --balance time or --balance params for other stage counts")
    return (0, names.index(workload.family.tutorial_cut(list(names))))


def _balanced_bounds(costs: Sequence[float], stages: int) -> tuple[int, ...]:
    """Contiguous split of `costs` into `stages` parts minimising the largest part (exact DP)."""
    n = len(costs)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    inf = float("inf")
    # best[k][i]: the smallest possible largest part when blocks [0, i) form k parts.
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    choice = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n - (stages - k) + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], choice[k][i] = value, j
    bounds, i = [], n
    for k in range(stages, 0, -1):
        i = choice[k][i]
        bounds.append(i)
    return tuple(reversed(bounds))


def _block_times(blocks: list[tuple[str, nn.Module]], sample: torch.Tensor,
                 workload: Workload, repeats: int = 2) -> list[float]:
    """Forward + backward seconds of each block on `sample`'s device (best of `repeats`), at
    `workload`'s precision and memory format.

    Runs on a copy so that BatchNorm statistics of the model being trained are not touched.
    """
    blocks = [(name, workload.prepare_model(block)) for name, block in copy.deepcopy(blocks)]
    best = [float("inf")] * len(blocks)
    for _ in range(repeats):
        clock, x = StepClock(sample.device), sample
        clock.mark(-1)  # where block 0 starts
        for index, (_, block) in enumerate(blocks):
            inputs = x.detach().requires_grad_(index > 0)  # as trained: no image gradient
            with workload.autocast(sample.device):
                x = block(inputs)
            x.float().sum().backward()
            clock.mark(index)
        clock.synchronize()
        for _, block in blocks:
            block.zero_grad(set_to_none=True)  # the next backward writes them, as a step's
        best = [min(t, clock.seconds(i - 1, i)) for i, t in enumerate(best)]
    return best


def plan_cut(workload: Workload, model: nn.Module, stages: int, balance: str,
             sample: torch.Tensor | None = None) -> Partition:
    """Where to cut `model`, built by `workload`, into `stages` stages of its family's blocks.

    balance: `tutorial` (the 2 stages the family declares as the tutorial's cut), `time`
    (equal measured forward + backward time per stage, measured on `sample`, as
    `workload.make_batch` makes it, at the workload's precision and memory format), or
    `params` (equal parameter counts).
    """
    blocks = workload.family.blocks(model)
    names = tuple(name for name, _ in blocks)
    if balance not in BALANCES:
        raise StrategyError(f"unknown balance {balance!r}; choose from {', '.join(BALANCES)}")
    if stages < 2:
        raise StrategyError(f"a model-parallel cut needs at least 2 stages, got {stages}")
    if stages > len(blocks):
        raise StrategyError(f"cannot cut {len(blocks)} blocks into {stages} stages; "
                            f"use at most {len(blocks)} stages for this model")
    if balance == "tutorial":
        bounds = _tutorial_bounds(names, stages, workload)
    elif balance == "params":
        costs = [sum(p.numel() for p in block.parameters()) for _, block in blocks]
        bounds = _balanced_bounds(costs, stages)
    else:
        if sample is None:
            raise StrategyError("balance by time needs a sample batch to time the blocks on")
        bounds = _balanced_bounds(_block_times(blocks, sample, workload), stages)
    return Partition(names, bounds, balance)


def partition_by_cost(block_names: Sequence[str], costs: Sequence[float], stages: int,
                      balance: str = "time") -> Partition:
    """Contiguous stages of equal `costs` as far as they go (the `time` balance, on costs
    measured elsewhere: a profile)."""
    if not 1 <= stages <= len(block_names):
        raise StrategyError(f"cannot cut {len(block_names)} blocks into {stages} stages; "
                            f"use 1 to {len(block_names)} stages for this model")
    return Partition(tuple(block_names), _balanced_bounds(costs, stages), balance)


def split_model(workload: Workload, model: nn.Module,
                partition: Partition) -> list[nn.Sequential]:
    """The stages of `partition` as nn.Sequential modules sharing `model`'s parameters."""
    blocks = workload.family.blocks(model)
    return [nn.Sequential(*(blocks[i][1] for i in r)) for r in partition.stage_ranges()]


def cut_model(workload: Workload, model: nn.Module, stages: int, balance: str,
              sample: torch.Tensor | None = None) -> tuple[Partition, list[nn.Sequential]]:
    """Plan a cut of `model` (see `plan_cut`) and split it there."""
    partition = plan_cut(workload, model, stages, balance, sample)
    return partition, split_model(workload, model, partition)
