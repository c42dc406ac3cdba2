"""Trials in interleaved rounds: each round measures every configuration once, in an order
shuffled from a recorded seed, so that the machine's drift falls on all alike; with several
rounds the baseline is measured twice in each (an A/A pair: the noise floor)."""

from __future__ import annotations

import dataclasses
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from parbench import strategies
from parbench.measure.timing import host_bound
from parbench.plan.config import Config
from parbench.results import stats
from parbench.results.record import PER_TRIAL, Record

__all__ = ["Slot", "Trial", "has_twin", "schedule", "trial_of", "with_trial"]


@dataclass
class Trial:
    """One measurement of a configuration: what a record keeps of each of its trials (the
    figures the Record declares `per_trial`, as this trial measured them)."""

    round: int
    status: str  # as a record's (ok, oom, error)
    reason: str | None = None
    measured: dict[str, Any] = field(default_factory=dict)  # field name -> value (PER_TRIAL)
    # The baseline measured a second time in the same round (the A/A pair's other half).
    twin: bool = False
    # What the whole trial took: starting its processes, building the model, warm-up and
    # measured steps (what one more trial costs, against one more step).
    wall_time_s: float | None = None

    def to_dict(self) -> dict:
        """The flat form a record's `trials` keeps."""
        return {"round": self.round, "status": self.status, "reason": self.reason,
                **self.measured, "twin": self.twin, "wall_time_s": self.wall_time_s}

    @classmethod
    def from_dict(cls, values: dict) -> Trial:
        return cls(values["round"], values["status"], values.get("reason"),
                   {name: values.get(name) for name in PER_TRIAL}, values.get("twin", False),
                   values.get("wall_time_s"))


@dataclass(frozen=True)
class Slot:
    """One measurement to make: configuration `index`, in `round`, or its A/A `twin`."""

    index: int
    round: int
    twin: bool = False


def has_twin(config: Config) -> bool:
    """Whether the configuration is a baseline with the whole batch, against which speedups
    are taken (the first of each workload and batch is measured twice a round)."""
    return config.strategy == strategies.BASELINE and not config.options


def _twinned(configs: list[Config], measured: list[int]) -> list[int]:
    """The first baseline of each workload, batch and device type: the one comparisons use."""
    first: dict[tuple, int] = {}
    for i in measured:
        config = configs[i]
        if has_twin(config):
            first.setdefault((config.workload, config.global_batch, config.devices.kind,
                              config.scaling), i)
    return list(first.values())


def schedule(configs: list[Config], repeats: int, seed: int) -> list[Slot]:
    """Every (configuration, round) a sweep measures, in order: round by round, each round's
    order shuffled by `random.Random(seed + round)` (one round keeps the sweep's order);
    configurations that do not run (their plan refuses them) are not measured. The same on
    every rank of a job (a resumed run's are left out by `Sweep.schedule`)."""
    measured = [i for i, config in enumerate(configs) if config.plan.runs]
    twinned = _twinned(configs, measured)
    slots = []
    for round_ in range(repeats):
        order = [Slot(i, round_) for i in measured]
        if repeats > 1:  # one round keeps the sweep's own order
            order += [Slot(i, round_, twin=True) for i in twinned]
            random.Random(seed + round_).shuffle(order)
        slots += order
    return slots


def trial_of(record: Record, round_: int, twin: bool = False,
             wall_time_s: float | None = None) -> Trial:
    """What a record of one measurement keeps as one trial."""
    assert record.status is not None
    measured = {name: getattr(record, name) for name in PER_TRIAL}
    return Trial(round_, record.status, record.reason, measured, twin, wall_time_s)


def with_trial(previous: Record | None, measured: Record, trial: Trial, repeats: int,
               seed: int) -> Record:
    """The configuration's record with one more trial. Its measured fields are the latest ok
    trial's (an A/A twin's never stand for the configuration); the figures each trial
    measures are their (geometric) means over the ok trials, with intervals, and the fields
    derived from them follow; its status and reason say what its trials say."""
    trials = [Trial.from_dict(t) for t in (previous.trials or [])] if previous else []
    trials = [t for t in trials if (t.round, t.twin) != (trial.round, trial.twin)] + [trial]
    trials.sort(key=lambda t: (t.round, t.twin))
    own = [t for t in trials if not t.twin]
    ok = [t for t in own if t.status == "ok"]
    earlier_ok = [t for t in ok if t is not trial]
    latest = measured.ok and not trial.twin
    base = measured if latest or previous is None or not earlier_ok else previous
    record = dataclasses.replace(base, trials=[t.to_dict() for t in trials], repeats=repeats,
                                 round_seed=seed, interval_method=stats.METHOD,
                                 intervals={})
    if ok:
        _summarise(record, base, ok)
    failed = [t for t in own if t.status != "ok"]
    if ok:
        record.status = "ok"
        record.reason = (f"{len(failed)} of {len(own)} trials failed, the first in round "
                         f"{failed[0].round}: {failed[0].reason}" if failed else None)
    elif failed:  # no trial of its own ok: the latest one's failure
        record.status, record.reason = failed[-1].status, failed[-1].reason
        record.throughput_ips = None
    return record


def _summarise(record: Record, base: Record, ok: list[Trial]) -> None:
    """The figures each ok trial measured, as means with intervals, and what follows from
    them: throughput-based rates rescaled, step-time spread over every trial's steps, and the
    step split into compute and exposed communication (or, on one rank, the wrapper's
    overhead) at the mean share."""
    assert record.intervals is not None  # set by with_trial
    for name, kind in PER_TRIAL.items():
        if kind == "kept":
            continue
        values = [t.measured[name] for t in ok if t.measured.get(name) is not None]
        setattr(record, name, stats.centre(values, log=kind == "log"))
        bounds = stats.interval(values, log=kind == "log")
        if bounds:
            record.intervals[name] = list(bounds)
    scale = (record.throughput_ips / base.throughput_ips
             if base.throughput_ips and record.throughput_ips else 1.0)
    for name in ("achieved_tflops", "mfu", "images_per_joule"):
        if getattr(base, name) is not None:
            setattr(record, name, getattr(base, name) * scale)
    steps = [step for t in ok for step in t.measured.get("step_times_s") or []]
    if steps:
        record.step_times_s = steps
        record.step_time_min_s, record.step_time_max_s = min(steps), max(steps)
        record.step_time_p90_s = statistics.quantiles(steps, n=10, method="inclusive")[-1] if len(
            steps) > 1 else steps[0]
    if record.exposed_comm_fraction is not None and record.step_time_median_s:
        record.exposed_comm_time_s = record.step_time_median_s * record.exposed_comm_fraction
        record.compute_time_s = record.step_time_median_s - record.exposed_comm_time_s
    record.host_bound = host_bound(record.host_time_median_s, record.step_time_median_s,
                                   record.device_kind, record.precision, record.backend)
    if record.wrapper_overhead_fraction is not None and record.step_time_median_s:
        record.wrapper_overhead_time_s = (record.step_time_median_s
                                          * record.wrapper_overhead_fraction)
        record.compute_time_s = record.step_time_median_s - record.wrapper_overhead_time_s
