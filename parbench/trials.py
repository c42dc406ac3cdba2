"""Trials in interleaved rounds: each round measures every configuration once, in an order
shuffled from a recorded seed, so that the machine's drift falls on all alike; with several
rounds the baseline is measured twice in each (an A/A pair: the noise floor)."""

from __future__ import annotations

import dataclasses
import random
import statistics
from dataclasses import dataclass, field

import strategies
from parbench import stats
from parbench.config import Config
from parbench.record import Record

__all__ = ["Slot", "Trial", "has_twin", "schedule", "trial_of", "with_trial"]


@dataclass
class Trial:
    """One measurement of a configuration: what a record keeps of each of its trials."""

    round: int
    status: str  # as a record's (ok, oom, error)
    reason: str | None = None
    throughput_ips: float | None = None
    step_time_median_s: float | None = None
    step_times_s: list[float] = field(default_factory=list)
    exposed_comm_fraction: float | None = None
    measured_bubble_fraction: float | None = None
    # The baseline measured a second time in the same round (the A/A pair's other half).
    twin: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Trial:
        return cls(**values)


@dataclass(frozen=True)
class Slot:
    """One measurement to make: configuration `index`, in `round`, or its A/A `twin`."""

    index: int
    round: int
    twin: bool = False


def has_twin(config: Config) -> bool:
    """Whether the configuration is measured twice a round when there are several rounds:
    the baseline with the whole batch, against which speedups are taken."""
    return config.strategy == strategies.BASELINE and not config.options


def schedule(configs: list[Config], repeats: int, seed: int,
             done: set[tuple[str, int, bool]] = frozenset()) -> list[Slot]:
    """Every (configuration, round) a sweep measures, in order: round by round, each round's
    order shuffled by `random.Random(seed + round)` (one round keeps the sweep's order);
    configurations that do not run (their plan refuses them) are not measured, and slots in
    `done` ((key, round, twin) of a resumed run's final trials) are left out. The same on every
    torchrun rank."""
    measured = [i for i, config in enumerate(configs) if config.plan.runs]
    slots = []
    for round_ in range(repeats):
        order = [Slot(i, round_) for i in measured]
        if repeats > 1:  # one round keeps the sweep's own order
            order += [Slot(i, round_, twin=True) for i in measured if has_twin(configs[i])]
            random.Random(seed + round_).shuffle(order)
        slots += [s for s in order if (configs[s.index].key(), s.round, s.twin) not in done]
    return slots


def trial_of(record: Record, round_: int, twin: bool = False) -> Trial:
    """What a record of one measurement keeps as one trial."""
    return Trial(round_, record.status, record.reason, record.throughput_ips,
                 record.step_time_median_s, list(record.step_times_s or []),
                 record.exposed_comm_fraction, record.measured_bubble_fraction, twin)


# Figures measured in each trial whose interval a record gives (log: ratios of throughputs).
_PER_TRIAL = {"throughput_ips": True, "step_time_median_s": True,
              "exposed_comm_fraction": False, "measured_bubble_fraction": False}


def with_trial(previous: Record | None, measured: Record, trial: Trial, repeats: int,
               seed: int) -> Record:
    """The configuration's record with one more trial: `measured`'s fields where it is the
    latest ok measurement (a twin's never replace them), the trials' medians and intervals
    for the figures each trial measures, and a reason naming the trials that failed."""
    trials = [Trial.from_dict(t) for t in (previous.trials or [])] if previous else []
    trials = [t for t in trials if (t.round, t.twin) != (trial.round, trial.twin)] + [trial]
    trials.sort(key=lambda t: (t.round, t.twin))
    base = previous if previous is not None and (trial.twin or not measured.ok) else measured
    ok = [t for t in trials if t.status == "ok" and not t.twin]
    if base is previous and not previous.ok and ok:  # no ok fields yet
        base = measured
    record = dataclasses.replace(base, trials=[t.to_dict() for t in trials], repeats=repeats,
                                 round_seed=seed, interval_method=stats.METHOD,
                                 intervals=dict(base.intervals or {}))
    for name, log in _PER_TRIAL.items():
        values = [getattr(t, name) for t in ok if getattr(t, name) is not None]
        if values:
            setattr(record, name, statistics.median(values))
        record.intervals.pop(name, None)
        bounds = stats.interval(values, log=log)
        if bounds:
            record.intervals[name] = list(bounds)
    failed = [t for t in trials if t.status != "ok"]
    if ok and failed:
        record.status = "ok"
        record.reason = (f"{len(failed)} of {len(trials)} trials failed, the first in round "
                         f"{failed[0].round}: {failed[0].reason}")
    return record
