"""Means, intervals, p-values and verdicts against hand-computed numbers and at their edges;
and the interval a verdict is decided by: Benjamini and Yekutieli's false-coverage-rate level,
whose t-interval excludes 1 exactly where Benjamini and Hochberg's verdict is not within
noise."""

import math

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


# Student's t quantiles in closed form: on 1 degree of freedom (Cauchy) tan(pi (p - 1/2)),
# on 2 (2p - 1) / sqrt(2 p (1 - p)); here at p = 0.975, the 95% interval's.
T_1DF = math.tan(math.pi * 0.475)
T_2DF = 0.95 / math.sqrt(2 * 0.975 * 0.025)


def test_by_default_the_centre_and_interval_are_on_logarithms():
    # 1 and e^2: logarithms 0 and 2, mean 1, standard deviation sqrt 2, standard error 1.
    pair = [1.0, math.e**2]
    expected = (math.exp(1 - T_1DF), math.exp(1 + T_1DF))
    assert stats.interval(pair) == pytest.approx(expected)
    assert stats.interval(pair, log=True) == pytest.approx(expected)
    assert stats.centre([1.0, 4.0]) == pytest.approx(2.0)  # geometric
    assert stats.centre([1.0, 4.0], log=False) == pytest.approx(2.5)


def test_without_logarithms_the_interval_is_the_mean_plus_or_minus_t_standard_errors():
    # 1, 2, 3: mean 2, standard deviation 1, 2 degrees of freedom; a share's mean takes
    # zero and negative values as they are.
    half = T_2DF / math.sqrt(3)
    assert stats.interval([1.0, 2.0, 3.0], log=False) == pytest.approx((2 - half, 2 + half))
    assert stats.interval([-1.0, 0.0, 1.0], log=False) == pytest.approx((-half, half))
    assert stats.centre([-1.0, 0.0, 1.0, 4.0], log=False) == pytest.approx(1.0)
    low, high = stats.interval([-1.0, 0.0, 1.0], log=False)
    assert type(low) is float and type(high) is float
    # Zero spread: a point, the value itself (not its exponential).
    assert stats.interval([-2.0, -2.0], log=False) == (-2.0, -2.0)


def test_only_finite_values_count_and_on_logarithms_only_positive_ones():
    messy = [2.0, None, math.inf, -math.inf, math.nan, 8.0]
    assert stats.centre(messy) == pytest.approx(4.0)
    assert stats.centre(messy, log=False) == pytest.approx(5.0)
    assert stats.interval(messy) == pytest.approx(stats.interval([2.0, 8.0]))
    assert stats.interval(messy, log=False) == pytest.approx(stats.interval([2.0, 8.0],
                                                                            log=False))
    with_nonpositive = [0.0, -3.0, 2.0, 8.0]
    assert stats.centre(with_nonpositive) == pytest.approx(4.0)
    assert stats.centre(with_nonpositive, log=False) == pytest.approx(7 / 4)
    assert stats.interval(with_nonpositive) == pytest.approx(stats.interval([2.0, 8.0]))
    # Nothing usable: no centre; one usable value: no interval.
    assert stats.centre([0.0, -1.0, None]) is None and stats.centre([]) is None
    assert stats.centre([0.0, -1.0], log=False) == pytest.approx(-0.5)
    assert stats.interval([0.0, 5.0]) is None and stats.interval([math.inf, 5.0]) is None


def test_ratios_are_paired_by_round_measured_in_both_with_a_nonzero_denominator():
    numerator = {2: 9.0, 0: 4.0, 1: 6.0, 5: 1.0}
    denominator = {0: 2.0, 1: 0.0, 2: 3.0, 3: 7.0}  # round 1's zero: no ratio
    assert stats.paired_ratios(numerator, denominator) == [2.0, 3.0]  # rounds 0 and 2, in order
    assert stats.paired_ratios({}, denominator) == []


def test_an_interval_touching_the_null_is_within_noise():
    assert stats.verdict((1.0, 2.0)) == "within noise"
    assert stats.verdict((0.5, 1.0)) == "within noise"
    assert stats.verdict((1.0, 1.0)) == "within noise"
    assert stats.verdict((1.01, 2.0)) == "faster"
    assert stats.verdict((0.5, 0.99)) == "slower"
    assert stats.verdict(None) is None
    labels = dict(null=0.0, above="more", below="less")
    assert stats.verdict((0.0, 0.3), **labels) == "within noise"
    assert stats.verdict((-0.3, 0.0), **labels) == "within noise"
    assert stats.verdict((0.1, 0.3), **labels) == "more"
    assert stats.verdict((-0.3, -0.1), **labels) == "less"


def test_the_p_value_of_two_ratios_is_a_cauchy_tail():
    # Logarithms 0 and 2: t = 1 / (sqrt 2 / sqrt 2) = 1 on 1 degree of freedom, whose two
    # tails hold 1 - 2 atan(1) / pi = 1/2.
    assert stats.p_value([1.0, math.e**2]) == pytest.approx(0.5)
    # Ratios that have no logarithm are left out, not failed on.
    assert stats.p_value([0.0, -1.0, None, math.inf, 1.0, math.e**2]) == pytest.approx(0.5)
    assert stats.p_value([3.0]) is None and stats.p_value([3.0, 0.0, -3.0]) is None


def test_identical_ratios_are_certain_unless_they_are_one():
    assert stats.p_value([2.0, 2.0]) == 0.0
    assert stats.p_value([0.5, 0.5, 0.5]) == 0.0
    assert math.log(math.e) == 1.0
    assert stats.p_value([math.e, math.e]) == 0.0  # a logarithm of exactly 1 is not "no change"
    assert stats.p_value([1.0, 1.0]) == 1.0
    assert stats.p_value([1.0, 1.0, 1.0, 0.0]) == 1.0


def test_benjamini_hochberg_by_hand():
    # Sorted 0.01, 0.03, 0.04 of 3: x 3/1, 3/2, 3/3 = 0.03, 0.045, 0.04, then each the least
    # of itself and those after it: 0.03, 0.04, 0.04.
    adjusted = stats.adjusted({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.04, "c": 0.04})
    assert list(adjusted) == ["a", "b", "c"]
    assert stats.adjusted({}) == {}


def test_a_verdict_needs_its_p_value_under_the_level_not_at_it():
    pair, inverse = [1.0, math.e**2], [1.0, math.e**-2]  # p = 1/2 each, opposite ways
    p = stats.p_value(pair)
    family = {"up": pair, "down": inverse}
    assert stats.verdicts(family, correct=False, level=p) == {"up": "within noise",
                                                              "down": "within noise"}
    above = math.nextafter(p, 1.0)
    assert stats.verdicts(family, correct=False, level=above) == {"up": "faster",
                                                                  "down": "slower"}
    assert stats.verdicts(family, correct=False, level=above, above="more", below="less") == \
        {"up": "more", "down": "less"}


def test_one_trial_gives_no_verdict():
    verdicts = stats.verdicts({"one": [2.0], "none": [], "unusable": [2.0, 0.0]})
    assert verdicts == {"one": None, "none": None, "unusable": None}
    assert all(v is None for v in verdicts.values())


def test_without_correction_the_raw_p_values_decide():
    # "a" alone has p = 1/2; beside "b" (p = 1) Benjamini and Hochberg make it min(2 x 1/2,
    # 2/2 x 1) = 1.
    family = {"a": [1.0, math.e**2], "b": [1.0, 1.0]}
    level = math.nextafter(stats.p_value(family["a"]), 1.0)
    assert stats.verdicts(family, correct=False, level=level)["a"] == "faster"
    assert stats.verdicts(family, correct=True, level=level)["a"] == "within noise"
    assert stats.deciding_confidence(family, correct=False, level=level) == \
        pytest.approx(1 - level)


def test_a_p_value_at_the_level_is_not_counted_as_rejected():
    # Two members with the same p: both adjusted to that p; at a level equal to it neither
    # is rejected, so R counts as 1, not 2.
    pair = [1.0, math.e**2]
    family = {"a": pair, "b": list(pair)}
    level = stats.adjusted({"a": stats.p_value(pair), "b": stats.p_value(pair)})["a"]
    assert stats.verdicts(family, level=level) == {"a": "within noise", "b": "within noise"}
    assert stats.deciding_confidence(family, level=level) == pytest.approx(1 - level / 2)
