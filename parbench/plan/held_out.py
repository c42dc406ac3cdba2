"""Configurations drawn at random, from a seed, out of an experiment's declared space: the
held-out set a timing model is judged on, never the configurations it was developed on."""

from __future__ import annotations

import random
from collections.abc import Callable

from parbench import strategies

__all__ = ["MICRO_BATCH", "draw"]

MICRO_BATCH = "micro-batch"  # an option drawn as a divisor of the batch, 2 to half of it
Point = dict  # run flags by argument name (dest), e.g. {"strategy": "ddp", "devices": [...]}


def _micro_batch(rng: random.Random, batch: int) -> int:
    return rng.choice([size for size in range(2, batch // 2 + 1) if batch % size == 0])


def _strategy_point(rng: random.Random, strategy: str, options: dict, batch: int) -> Point:
    point: Point = {"strategy": strategy}
    for name, values in options.items():
        value = _micro_batch(rng, batch) if values == MICRO_BATCH else rng.choice(values)
        point[name] = [value] if name == "devices" else str(value)
    return point


def draw(space: dict, seed: int, accept: Callable[[Point], bool]) -> list[Point]:
    """`space["workloads"]` distinct workloads (model, batch, image size from the space's lists),
    each with single on the whole batch (every speedup's baseline) and `per_workload` - 1
    other configurations: a strategy drawn from `space["strategies"]`, then each of its
    options from its list (`MICRO_BATCH`: a divisor of the batch). A point `accept` refuses
    (the plan cannot run it) is drawn again, as is one already drawn; the same seed draws the
    same points."""
    rng = random.Random(seed)
    points: list[Point] = []
    workloads: list[dict] = []
    while len(workloads) < space["workloads"]:
        workload = {"model": rng.choice(space["model"]),
                    "batch_size": str(rng.choice(space["batch_size"])),
                    "image_size": str(rng.choice(space["image_size"]))}
        if workload in workloads:  # drawn already: its configurations would repeat
            continue
        workloads.append(workload)
        batch = int(workload["batch_size"])
        drawn = [{**workload, "strategy": strategies.BASELINE}]
        for _ in range(100 * space["per_workload"]):  # refusals are few: a bound, not a loop
            if len(drawn) == space["per_workload"]:
                break
            strategy = rng.choice(sorted(space["strategies"]))
            point = {**workload, **_strategy_point(rng, strategy, space["strategies"][strategy],
                                                   batch)}
            if point not in drawn and accept(point):
                drawn.append(point)
        if len(drawn) < space["per_workload"]:
            raise ValueError(f"{workload}: only {len(drawn)} of {space['per_workload']} "
                             "configurations could be drawn; widen the space's strategies or "
                             "lower per_workload")
        points += drawn
    return points
