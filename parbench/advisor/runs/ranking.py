"""Whether a model orders configurations as measurement does: over every pair of one workload
and device count, the pairs the measured trials decide (their paired ratio's 95% interval
excludes 1), the share of those the model orders the same way, and Kendall's tau over every
pair. How many stay decided once Benjamini and Hochberg's correction counts every pair tested
is said beside it: with 3 trials a pair needs a large, steady difference to survive it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pandas as pd

from parbench.results import stats
from parbench.results.comparisons import comparison_key, per_round
from parbench.results.record import Record

__all__ = ["Ranking", "group_key", "ranking"]


@dataclass(frozen=True)
class Ranking:
    """How a model's step times order a run's configurations against the measured order."""

    pairs: int  # every pair of configurations of one workload and device count
    decided: int  # of those, the pairs the measured trials tell apart (95% interval)
    corrected: int  # of those, the pairs still told apart once the test counts every pair
    ordered: int  # of the decided pairs, those the model puts in the measured order
    tied: int  # of the decided pairs, those the model gives the same step (orders neither way)
    tau: float | None  # Kendall's tau over every pair: (concordant - discordant) / pairs
    misordered: tuple[str, ...]  # the decided pairs the model orders wrongly, as text

    @property
    def share(self) -> float | None:
        return self.ordered / self.decided if self.decided else None

    def describe(self) -> str:
        if not self.pairs:
            return "no two configurations share a workload and a device count"
        share = (f"{self.ordered} of {self.decided} pairs the measurement decides (paired "
                 f"ratio's 95% interval excludes 1; {self.corrected} still do once corrected "
                 f"for the {self.pairs} pairs tested) ordered right ({self.share:.0%})"
                 + (f", {self.tied} given the same step" if self.tied else "")
                 if self.decided else "no pair decided by the measurement")
        tau = "" if self.tau is None else f"; Kendall's tau {self.tau:+.2f} over all"
        return f"{share}, of {self.pairs} pairs within a workload and device count{tau}"


def _label(row: dict) -> str:
    settings = row.get("settings")
    return f"{row['strategy']}{f' ({settings})' if isinstance(settings, str) and settings else ''}"


def _record(row: dict) -> Record:
    return Record.from_dict({k: v for k, v in row.items() if k in _RECORD_KEYS})


def group_key(row: dict, record: Record | None = None) -> tuple:
    """What the configurations ranked against each other share: the workload and batch as
    the run compares them (comparisons.comparison_key) and the number of devices used
    (`record`: the row's, where the caller has it already)."""
    return (comparison_key(record or _record(row)), len(str(row["devices"]).split(",")))


def ranking(table: pd.DataFrame, predicted: str = "predicted_step_time_s") -> Ranking:
    """`table`'s (predictions beside measured records) ordering by column `predicted` against
    the measured one. A pair predicted equal is ordered neither way: it counts as neither
    concordant nor discordant, nor ordered right."""
    groups: dict[tuple, list[dict]] = {}
    for row in table.to_dict("records"):
        record = _record(row)
        groups.setdefault(group_key(row, record), []).append({**row, "rounds": per_round(record)})
    pairs = [pair for members in groups.values() for pair in itertools.combinations(members, 2)]
    # b's throughput over a's, round by round: above 1, b is faster (its step shorter).
    ratios = {index: stats.paired_ratios(b["rounds"], a["rounds"])
              for index, (a, b) in enumerate(pairs)}
    verdicts = stats.verdicts(ratios, correct=False)
    corrected = sum(verdict in ("faster", "slower")
                    for verdict in stats.verdicts(ratios).values())
    concordant = discordant = ordered = decided = tied = 0
    misordered = []
    for index, (a, b) in enumerate(pairs):
        is_decided = verdicts[index] in ("faster", "slower")
        decided += is_decided
        if a[predicted] == b[predicted]:
            tied += is_decided
            continue
        measured = stats.centre(ratios[index]) or (a["step_time_median_s"]
                                                     / b["step_time_median_s"])
        agree = (a[predicted] > b[predicted]) == (measured > 1)  # b predicted and measured faster
        concordant, discordant = concordant + agree, discordant + (not agree)
        if is_decided:
            ordered += agree
            if not agree:
                misordered.append(f"{_label(a)} vs {_label(b)} ({a['model']})")
    tau = (concordant - discordant) / len(pairs) if pairs else None
    return Ranking(len(pairs), decided, corrected, ordered, tied, tau, tuple(misordered))


_RECORD_KEYS = set(Record.__dataclass_fields__) - {"environment"}
