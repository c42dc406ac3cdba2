"""The interval each verdict against the baseline is decided by, from a run's records: the
speedup's interval corrected for the verdicts made against the same baseline."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import pandas as pd

from parbench.results import stats
from parbench.results.comparisons import comparison_key, is_baseline, per_round
from parbench.results.record import Record

__all__ = ["Decided", "deciding_intervals"]


@dataclass(frozen=True)
class Decided:
    """A verdict's deciding interval of the speedup, at `confidence`, one of `verdicts` made
    against the same baseline, `judged` of them faster or slower."""

    bounds: tuple[float, float]
    confidence: float
    verdicts: int
    judged: int


def _record(row: pd.Series) -> Record:
    """A frame's row as its record (pandas reads a missing number as NaN; a record, None)."""
    return Record.from_dict({key: None if isinstance(value, float) and math.isnan(value)
                             else value for key, value in row.items()})


def deciding_intervals(frame: pd.DataFrame) -> dict[Hashable, Decided]:
    """Frame index -> the deciding interval of each record with a verdict against its
    baseline: its speedup's ratios paired by round, in the family parbench.results.comparisons
    corrects together (the same workload and batch against its first baseline), at
    stats.deciding_confidence; it excludes 1 exactly where the verdict is faster or slower."""
    records = {index: _record(row) for index, row in frame.iterrows()}
    baselines: dict[tuple, Record] = {}
    for record in records.values():
        if record.ok and is_baseline(record):
            baselines.setdefault(comparison_key(record), record)
    families: dict[tuple, dict[Hashable, list[float]]] = {}
    for index, record in records.items():
        baseline = baselines.get(comparison_key(record))
        if (not record.ok or record.throughput_ips is None or math.isnan(record.throughput_ips)
                or baseline is None or baseline is record):
            continue
        families.setdefault(comparison_key(record), {})[index] = stats.paired_ratios(
            per_round(record), per_round(baseline))
    decided: dict[Hashable, Decided] = {}
    for family in families.values():
        confidence = stats.deciding_confidence(family)
        if confidence is None:  # one trial: no verdict
            continue
        judged = sum(verdict in ("faster", "slower")
                     for verdict in stats.verdicts(family).values())
        made = sum(stats.p_value(ratios) is not None for ratios in family.values())
        for index, ratios in family.items():
            bounds = stats.interval(ratios, confidence=confidence)
            if bounds is not None:
                decided[index] = Decided(bounds, confidence, made, judged)
    return decided
