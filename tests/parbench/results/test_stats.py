"""The interval a verdict is decided by: Benjamini and Yekutieli's false-coverage-rate level,
whose t-interval excludes 1 exactly where Benjamini and Hochberg's verdict is not within
noise."""

import numpy as np
import pytest

from parbench.results import stats


def _family(rng, members: int, rounds: int) -> dict[int, list[float]]:
    """Paired ratios of `members` configurations over a baseline: most no different, some
    a little or much faster or slower, each round with its own lognormal noise."""
    effects = rng.choice([0.0, 0.0, 0.0, 0.03, -0.05, 0.3, -0.4], size=members)
    spread = rng.choice([0.02, 0.05, 0.1])
    return {k: list(np.exp(effect + rng.normal(0.0, spread, rounds)))
            for k, effect in enumerate(effects)}


def test_the_deciding_interval_excludes_one_exactly_where_the_verdict_is_faster_or_slower():
    rng = np.random.default_rng(3)
    seen = {"faster": 0, "slower": 0, "within noise": 0, "95% interval says otherwise": 0,
            "none rejected": 0}
    for _ in range(100):
        family = _family(rng, members=int(rng.integers(1, 13)), rounds=int(rng.integers(2, 7)))
        verdicts = stats.verdicts(family)
        confidence = stats.deciding_confidence(family)
        for key, ratios in family.items():
            bounds = stats.interval(ratios, confidence=confidence)
            assert stats.verdict(bounds) == verdicts[key], (family, key, confidence)
            seen[verdicts[key]] += 1
            own = stats.verdict(stats.interval(ratios))
            seen["95% interval says otherwise"] += own != verdicts[key]
            assert stats.interval(ratios)[0] >= bounds[0]  # never narrower than the 95% one
        seen["none rejected"] += all(v == "within noise" for v in verdicts.values())
    # Every case the claim is about was met, many times.
    assert min(seen.values()) >= 20, seen  # 100 families, seed 3: each met 34+ times


def test_the_deciding_confidence_is_one_minus_r_q_over_m():
    faster, null = [1.5, 1.52, 1.49], [0.9, 1.1, 1.02]
    assert stats.deciding_confidence({"a": faster, "b": null, "c": null, "d": null}) == \
        pytest.approx(1 - 1 * 0.05 / 4)
    assert stats.deciding_confidence({"a": faster, "b": faster, "c": null, "d": null}) == \
        pytest.approx(1 - 2 * 0.05 / 4)
    # None rejected: as if one were (each p is at least 5% / m), not an infinite interval.
    assert stats.deciding_confidence({"b": null, "c": null}) == pytest.approx(1 - 0.05 / 2)
    # A member with one ratio makes no verdict and does not count.
    assert stats.deciding_confidence({"a": faster, "one trial": [2.0]}) == pytest.approx(0.95)
    assert stats.deciding_confidence({"one trial": [2.0]}) is None
    assert stats.deciding_confidence({"a": faster, "b": null}, correct=False) == 0.95


def test_an_interval_at_a_higher_confidence_is_wider_around_the_same_centre():
    values = [1.1, 1.3, 1.2, 1.25]
    low, high = stats.interval(values)
    wide_low, wide_high = stats.interval(values, confidence=0.99)
    assert wide_low < low < stats.centre(values) < high < wide_high
    assert stats.interval([1.2, 1.2], confidence=0.99) == pytest.approx((1.2, 1.2))
