"""Uncertainty over trials: the (geometric) mean and its 95% interval from scipy's Student
t, ratios paired by round, and the verdict an interval allows ("faster", "slower" or "within
noise")."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from scipy import stats

__all__ = ["CONFIDENCE", "METHOD", "centre", "interval", "paired_ratios", "verdict"]

CONFIDENCE = 0.95
METHOD = (
    "geometric mean over trials (the mean for shares) with its 95% interval: Student's t "
    "(scipy.stats.t.interval) on the trials' logarithms for throughputs and ratios, on the "
    "values for shares; ratios (speedups, efficiencies, effects) are paired by round: the two "
    "configurations measured in the same round, so drift between rounds cancels")


def centre(values: Iterable[float], log: bool = True) -> float | None:
    """The figure an interval is about: the geometric mean of `values` with `log` (what a
    t-interval on logarithms is centred on), else their mean; None without a value."""
    values = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
    if not values:
        return None
    if log:
        return math.exp(statistics.fmean(math.log(v) for v in values))
    return statistics.fmean(values)


def interval(values: Iterable[float], log: bool = True) -> tuple[float, float] | None:
    """The 95% t-interval of the mean of `values` (of their logarithms with `log`, returned
    as values), or None with fewer than two finite values. Identical values give a point."""
    values = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
    if len(values) < 2:
        return None
    sample = [math.log(v) for v in values] if log else values
    centre, spread = statistics.fmean(sample), statistics.stdev(sample)
    if spread == 0:
        low = high = centre
    else:
        low, high = stats.t.interval(CONFIDENCE, len(sample) - 1, loc=centre,
                                     scale=spread / math.sqrt(len(sample)))
    return (math.exp(low), math.exp(high)) if log else (float(low), float(high))


def paired_ratios(numerator: Mapping[int, float], denominator: Mapping[int, float]
                  ) -> list[float]:
    """numerator[r] / denominator[r] for every round r measured in both."""
    return [numerator[r] / denominator[r] for r in sorted(numerator)
            if r in denominator and denominator[r]]


def verdict(bounds: tuple[float, float] | None, null: float = 1.0,
            above: str = "faster", below: str = "slower") -> str | None:
    """`above` where the whole interval lies above `null`, `below` where below, else "within
    noise"; None without an interval (one trial)."""
    if bounds is None:
        return None
    low, high = bounds
    if low > null:
        return above
    if high < null:
        return below
    return "within noise"
