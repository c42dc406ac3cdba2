"""The naive estimate a timing model must beat: the profiled single step on the whole batch,
GPipe's textbook bubble for a pipeline, ideal data parallelism; what the model adds is the
difference between their errors on the same records."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from parbench.advisor.profiling.profile import Profile
from parbench.strategies import BASELINE, layout_of

__all__ = ["naive_step_s", "with_naive"]

ProfileAt = Callable[[int], Profile]


def naive_step_s(record: dict, profile_at: ProfileAt) -> float:
    """The step a reader would estimate from the profiled single step T on the whole batch
    (forward, backward and the optimiser, on a device alone): T for single (accumulating or
    not) and model-parallel; T x (1 + (K - 1) / M) / K for a pipeline of K devices and M
    micro-batches (GPipe's bubble); T / N for ddp and fsdp on N ranks."""
    whole = profile_at(int(record["global_batch"]))
    step = whole.step_compute_s + whole.optimizer_s
    layout = layout_of(record["strategy"])
    devices = len(str(record.get("devices") or "cpu").split(","))
    if layout is not None and layout.data_parallel:
        return step / int(record.get("world_size") or devices)
    if layout is not None and layout.pipelined:
        stages = devices
        micro_batches = int(record.get("micro_batches") or 1)
        return step * (1 + (stages - 1) / micro_batches) / stages
    return step


def with_naive(table: pd.DataFrame, profiler: Callable[[dict], ProfileAt]) -> pd.DataFrame:
    """`table` (predictions beside measurements) with `naive_step_time_s` and `naive_error`
    (naive / measured step - 1, signed as prediction_error), each from the single profile of
    its record's workload (`profiler` of the record as a single: no contention)."""
    if table.empty:
        return table
    naive = [naive_step_s(row, profiler({**row, "strategy": BASELINE}))
             for row in table.to_dict("records")]
    return table.assign(naive_step_time_s=naive,
                        naive_error=[n / m - 1 for n, m in
                                     zip(naive, table["step_time_median_s"], strict=True)])
