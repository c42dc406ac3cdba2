"""What a configuration's processes measured, typed once: each worker fills a Measurement, and
`merge` makes the configuration's from theirs by the rule each field declares."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MERGE_RULES", "Measurement", "merge"]


def _per_step(combine: Callable[[list], Any]) -> Callable[[list], list]:
    """A rule for lists with one value per step: `combine` over the workers, step by step."""
    return lambda values: [combine(list(step)) for step in zip(*values, strict=True)]


def _mean_of_computed(values: list[float]) -> float:
    computed = [v for v in values if not math.isnan(v)]
    return sum(computed) / len(computed) if computed else math.nan


# How a field's values from every worker (in rank order) become the configuration's.
MERGE_RULES: dict[str, Callable[[list], Any]] = {
    "first": lambda values: values[0],  # the same in every worker
    "slowest": max,
    "slowest of those measured": lambda values: max((v for v in values if v is not None),
                                                    default=None),
    "slowest per step": _per_step(max),  # a step lasts as long as its slowest worker
    # One rank leaking is a leak; None where a rank could not read it.
    "fullest per step": _per_step(lambda step: max((v for v in step if v is not None),
                                                   default=None)),
    # Data-parallel ranks' equal shards, or a pipeline's last stage (nan elsewhere).
    "mean of computed per step": _per_step(_mean_of_computed),
    "concatenated": lambda values: [v for worker in values for v in worker],
    "every span": lambda values: sorted(span for worker in values for span in worker),
    # Ranks that share a GPU read the same counters: each GPU once.
    "each gpu once": lambda values: {uuid: gpu for worker in values for uuid, gpu in
                                     worker.items()},
    "each worker's": lambda values: values if len(values) > 1 else None,
    "first, with the process count": lambda values: values[0] + (
        f" (one process per device, {len(values)} processes)" if len(values) > 1 else ""),
}


def merged(rule: str, of: str | None = None, default=dataclasses.MISSING):
    """A field merged over the workers by MERGE_RULES[rule], from the workers' `of` field
    (this field by default)."""
    assert rule in MERGE_RULES, rule
    return field(default=default, metadata={"merge": rule, "of": of})


@dataclass
class Measurement:
    """One process's measurement of a configuration, or the configuration's merged over its
    processes (`merge`): what the runner derives its record from. A worker process hands it
    over as JSON (`to_json`)."""

    step_times_s: list[float] = merged("slowest per step")
    total_s: float = merged("slowest")  # wall time of the measured steps
    warmup_step_times_s: list[float] = merged("slowest per step")
    # Per measured step, the host's time until its last work was queued (before the wait).
    host_step_times_s: list[float] = merged("slowest per step")
    losses: list[float] = merged("mean of computed per step")  # nan: this worker computes none
    peak_memory_mib: list[float] = merged("concatenated")  # per logical device
    physical_peak_memory_mib: list[float] = merged("concatenated")  # per physical device seen
    # Held after each measured step (allocated_mib); None where it could not be read.
    memory_after_step_mib: list[float | None] = merged("fullest per step")
    memory_source: str = merged("first, with the process count")
    torch_threads: int = merged("first")
    partition: str | None = merged("first")  # where the strategy cut the model, if it did
    # A step after the measured ones, timed action by action (Timeline): its spans, its time.
    timeline: list[list] = merged("every span")
    traced_step_s: float | None = merged("slowest of those measured")
    bubble_fraction: float | None = merged("first")  # the schedule's theoretical idle share
    micro_batches: int = merged("first")
    pipeline_stages: int = merged("first")
    gpu_sampling: str = merged("first")
    gpus: dict[str, dict] = merged("each gpu once")  # GPU uuid -> GpuSampler.per_gpu's
    # The same steps again without communication (Strategy.without_communication), timed
    # after the measured ones; [] where the strategy has no such mode.
    compute_step_times_s: list[float] = merged("slowest per step")
    communication: dict = merged("first")  # Strategy.communication(): record fields
    # Per worker, per step, where there are several (None in a worker's own).
    rank_step_times_s: list[list[float]] | None = merged("each worker's", of="step_times_s",
                                                         default=None)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, values: dict) -> Measurement:
        return cls(**values)


def merge(measurements: list[Measurement]) -> Measurement:
    """The configuration's measurement from every worker's (in rank order), each field by its
    declared rule."""
    return Measurement(**{
        f.name: MERGE_RULES[f.metadata["merge"]](
            [getattr(m, f.metadata["of"] or f.name) for m in measurements])
        for f in dataclasses.fields(Measurement)})
