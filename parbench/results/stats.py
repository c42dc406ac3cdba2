"""Uncertainty over trials: the (geometric) mean and its 95% interval from scipy's Student
t, ratios paired by round, verdicts ("faster", "slower" or "within noise") corrected for the
number made (Benjamini and Hochberg), and the interval each verdict is decided by."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)  # what a family of comparisons is keyed by

__all__ = ["CONFIDENCE", "DECIDING_METHOD", "METHOD", "VERDICT_METHOD", "adjusted", "centre",
           "deciding_confidence", "interval", "paired_ratios", "p_value", "verdict", "verdicts"]

CONFIDENCE = 0.95
METHOD = (
    "geometric mean over trials (the mean for shares) with its 95% interval: Student's t "
    "(scipy.stats.t.interval) on the trials' logarithms for throughputs and ratios, on the "
    "values for shares; ratios (speedups, efficiencies, effects) are paired by round: the two "
    "configurations measured in the same round, so drift between rounds cancels")
VERDICT_METHOD = (
    "a verdict (faster / slower) needs its paired ratios' t-test (on logarithms) to reject 1 "
    "after Benjamini and Hochberg's correction over every verdict against the same baseline "
    "(at most 5% of verdicts false, expected; where nothing differs, any false one in under "
    "5% of runs); otherwise within noise")
DECIDING_METHOD = (
    "the verdict is decided by the speedup's interval corrected for the verdicts made against "
    "the same baseline (Benjamini and Yekutieli's false-coverage-rate interval: Student's t "
    "at confidence 1 - R x 5% / m, m the verdicts, R those faster or slower, at least 1), "
    "never narrower than its 95% interval; it excludes 1 exactly where the verdict is "
    "faster or slower")


def _usable(values: Iterable[float], log: bool) -> list[float]:
    """The values a mean can use: finite, and above 0 where their logarithms are taken."""
    return [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]


def centre(values: Iterable[float], log: bool = True) -> float | None:
    """The figure an interval is about: the geometric mean of `values` with `log` (what a
    t-interval on logarithms is centred on), else their mean; None without a value."""
    values = _usable(values, log)
    if not values:
        return None
    if log:
        return math.exp(statistics.fmean(math.log(v) for v in values))
    return statistics.fmean(values)


def interval(values: Iterable[float], log: bool = True, confidence: float = CONFIDENCE
             ) -> tuple[float, float] | None:
    """The t-interval (95%, or at `confidence`) of the mean of `values` (of their logarithms
    with `log`, returned as values), or None with fewer than two finite values. Identical
    values give a point."""
    values = _usable(values, log)
    if len(values) < 2:
        return None
    sample = [math.log(v) for v in values] if log else values
    centre, spread = statistics.fmean(sample), statistics.stdev(sample)
    if spread == 0:
        low = high = centre
    else:
        from scipy import stats  # here: scipy.stats costs every process 0.8 s to import

        low, high = stats.t.interval(confidence, len(sample) - 1, loc=centre,
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


def _finite_logs(values: Iterable[float]) -> list[float]:
    return [math.log(v) for v in _usable(values, log=True)]


def p_value(ratios: Iterable[float]) -> float | None:
    """Two-sided p-value of the ratios' geometric mean being 1 (Student's t on their
    logarithms, scipy.stats.ttest_1samp); None with fewer than two. Identical ratios: 0 if
    they are not 1, else 1."""
    logs = _finite_logs(ratios)
    if len(logs) < 2:
        return None
    if statistics.pstdev(logs) == 0:
        return 0.0 if logs[0] != 0 else 1.0
    from scipy import stats

    return float(stats.ttest_1samp(logs, 0.0).pvalue)


def adjusted(p_values: Mapping[Key, float]) -> dict[Key, float]:
    """Benjamini and Hochberg's adjustment of a family's p-values
    (scipy.stats.false_discovery_control): rejecting where the adjusted value is under 5%
    expects at most 5% of the verdicts made to be false, and where nothing differs at all,
    keeps the chance of any false one under 5%."""
    keys = list(p_values)
    if not keys:
        return {}
    from scipy import stats

    values = stats.false_discovery_control([p_values[key] for key in keys])
    return {key: float(value) for key, value in zip(keys, values, strict=True)}


def verdicts(ratios: Mapping[Key, Iterable[float]], correct: bool = True,
             above: str = "faster", below: str = "slower",
             level: float = 1 - CONFIDENCE) -> dict[Key, str | None]:
    """A verdict for each member of a family of paired ratios: `above` or `below` where its
    p-value (adjusted over the family with `correct`, see `adjusted`) is under `level`, by
    the direction of its geometric mean; "within noise" otherwise; None with fewer than two
    ratios (one trial)."""
    listed = {key: list(values) for key, values in ratios.items()}
    final = _final_p_values(listed, correct)
    result: dict[Key, str | None] = {}
    for key, values in listed.items():
        if key not in final:
            result[key] = None
        elif final[key] >= level:
            result[key] = "within noise"
        else:
            result[key] = above if statistics.fmean(_finite_logs(values)) > 0 else below
    return result


def _final_p_values(listed: Mapping[Key, list[float]], correct: bool) -> dict[Key, float]:
    """Each member's p-value (where it has two ratios or more), adjusted with `correct`."""
    tested = {key: p for key, values in listed.items() if (p := p_value(values)) is not None}
    return adjusted(tested) if correct else tested


def deciding_confidence(ratios: Mapping[Key, Iterable[float]], correct: bool = True,
                        level: float = 1 - CONFIDENCE) -> float | None:
    """The confidence of the interval each of `verdicts` is decided by: its t-interval
    (`interval`) excludes 1 exactly where that verdict is `above` or `below`. Without
    `correct`, 1 - `level` (the 95% interval). With it, Benjamini and Yekutieli's
    false-coverage-rate adjusted level, 1 - R `level` / m, m the verdicts made (members with
    two ratios or more), R how many are not within noise, at least 1; None where none is made.

    Why they agree: a two-sided t-test's p is under a (1 - a) t-interval's a exactly where the
    interval excludes the null; Benjamini and Hochberg reject the R smallest p-values, each
    under R `level` / m, and keep every other at or above (R + 1) `level` / m. Where none is
    rejected, each p is at least `level` / m."""
    listed = {key: list(values) for key, values in ratios.items()}
    final = _final_p_values(listed, correct)
    if not final:
        return None
    if not correct:
        return 1 - level
    rejected = sum(p < level for p in final.values())
    return 1 - max(rejected, 1) * level / len(final)
