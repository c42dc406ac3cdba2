"""The schedule model checked on its own: torch's action list (or the one-process tick order)
replayed with the compute times a measured timeline holds, against that timeline's own step.
Its error is the schedules' and the links'; the rest of a prediction's error is the profile's
compute times against the run's."""

from __future__ import annotations

import statistics
from collections import defaultdict

from parbench.advisor.models.links import AnyLink
from parbench.advisor.models.models import tick_step_s
from parbench.advisor.models.schedule_replay import StageTimes, replay, schedule_actions
from parbench.strategies import Layout, layout_of, options_of
from parbench.strategies.schedules import SCHEDULES, ScheduleOptions

__all__ = ["replayed_trace", "trace_stage_times"]


def trace_stage_times(spans: list) -> list[StageTimes]:
    """Each model stage's median forward, input- and weight-gradient time in a measured
    timeline's spans ([row, micro-batch, phase, start, end, model stage?]). A full backward
    (B) is split as the stage's own I and W spans split theirs, else counted as I."""
    durations = defaultdict(list)
    for span in spans:
        stage = span[5] if len(span) > 5 else span[0]
        durations[stage, span[2]].append(span[4] - span[3])

    def median(stage: int, phase: str) -> float | None:
        values = durations.get((stage, phase))
        return statistics.median(values) if values else None

    times = []
    for stage in sorted({stage for stage, _ in durations}):
        forward, full = median(stage, "F") or 0.0, median(stage, "B")
        input_grad, weight_grad = median(stage, "I") or 0.0, median(stage, "W") or 0.0
        if full is not None:
            split = input_grad + weight_grad
            input_share = input_grad / split if split else 1.0
            input_grad, weight_grad = full * input_share, full * (1 - input_share)
        times.append(StageTimes(forward, input_grad, weight_grad))
    return times


def replayed_trace(record: dict, cut_bytes: list[int], link: AnyLink) -> tuple[float, float] | None:
    """(the step the schedule model gives with the record's own traced compute times, that
    traced step's length) for a pipeline record with a timeline; None for any other."""
    spans = record.get("timeline")
    layout = layout_of(record["strategy"])
    if not isinstance(spans, list) or not spans or layout is None or not layout.pipelined:
        return None
    times = trace_stage_times(spans)
    traced = max(span[4] for span in spans) - min(span[3] for span in spans)
    options = record.get("strategy_options") or {}
    micro_batches = int(record["micro_batches"])  # one pipeline's (pipeline-fsdp runs P)
    if layout is Layout.TICK_PIPELINE:  # one process, stages handing tensors over in memory
        return tick_step_s(times, micro_batches), traced
    scheduled = options_of(record["strategy"], options)
    assert isinstance(scheduled, ScheduleOptions), layout
    schedule = SCHEDULES[scheduled.schedule]
    ranks = int(record["world_size"]) // int(options.get("pipelines") or 1)
    actions = schedule_actions(schedule.torch_class, ranks, micro_batches, len(times) // ranks)
    replayed = replay(actions, times, lambda cut: link.transfer_s(cut_bytes[cut]))
    return replayed.step_time_s, traced
