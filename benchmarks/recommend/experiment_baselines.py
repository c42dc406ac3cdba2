"""recommend's pick beside two baselines, from the experiment's stored measurements alone (no
layout measured again): always `single`, and the best of K layouts drawn at random from the
sweep (K = the layouts `recommend --confirm` measured). Each is judged as the pick is: its
regret against the final's best, paired by round (a layout that was no contender, against the
sweep's best); and each one's hit rate (regret at most HIT) with a 95% Clopper-Pearson interval.

Layouts are read by what their records stored (each configuration's strategy and options), not
by today's configurations, whose settings may have changed since they were measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from math import comb
from pathlib import Path

from parbench.advisor.recommend import recommend
from parbench.results import stats
from parbench.results.comparisons import per_round
from parbench.results.folder import RunFolder
from parbench.results.record import Record

# A pick within this share of the measured best is a hit (the experiment's goal).
HIT = 0.05
SINGLE = "single"


def layout_label(record: Record) -> str:
    """A stored record's layout, from its configuration as measured (its key): the strategy
    and the `parbench run` flags of its options."""
    config = json.loads(record.config_key or "{}")
    return f"{config['strategy']} {recommend.option_flags(config['options'])}".strip()


def read_rounds(folder: Path) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """A run folder's throughput per round of each layout that ran (label -> round ->
    images/s), and every layout's status."""
    records = RunFolder(folder).read_records()
    rounds = {layout_label(r): per_round(r) for r in records if r.ok}
    return rounds, {layout_label(r): str(r.status) for r in records}


def _regrets(rounds: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
    """Each layout's regret against the measured best, paired by round, as the pick's is."""
    measured = recommend.confirm_verdict(rounds, "")["measured"]
    return {label: 1 - found["ratio_to_best"] for label, found in measured.items()
            if found.get("ratio_to_best") is not None}


def judged_regrets(swept: Mapping[str, Mapping[int, float]],
                   final: Mapping[str, Mapping[int, float]] | None) -> dict[str, float]:
    """Every layout of the sweep judged as the pick is: in the final's rounds where it was a
    contender, else in the sweep's (each such layout more than the final's margin below the
    sweep's best)."""
    in_final = _regrets(final) if final else {}
    return {label: in_final.get(label, regret) for label, regret in _regrets(swept).items()}


def best_of_random(scores: Mapping[str, float], values: Mapping[str, float], k: int) -> float:
    """The expected value of `values` at the best-scoring layout of k drawn uniformly at
    random, without replacement, from `scores`' layouts, exactly: the layout ranked i-th (0 the
    best) is the best of a draw when it is drawn and the other k - 1 come from the n - 1 - i
    ranked below it, C(n - 1 - i, k - 1) of the C(n, k) draws."""
    order = sorted(scores, key=lambda label: (-scores[label], label))
    k = min(k, len(order))
    total = comb(len(order), k)
    return sum(comb(len(order) - 1 - i, k - 1) * values[label]
               for i, label in enumerate(order)) / total


def clopper_pearson(hits: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate from `hits` of `n`; an expected count
    that is not whole (random-K's) enters the same beta quantiles."""
    from scipy.stats import beta  # here: scipy.stats costs a process 0.8 s to import

    tail = (1 - level) / 2
    low = 0.0 if hits <= 0 else float(beta.ppf(tail, hits, n - hits + 1))
    high = 1.0 if hits >= n else float(beta.ppf(1 - tail, hits + 1, n - hits))
    return low, high


def workload_baselines(out: Path, case: Mapping) -> dict:
    """One judged workload's baselines from its stored sweep and final: single's regret (and
    its interval, or its status where it did not run), and the best of K drawn at random:
    its expected regret and the chance it is within HIT of the best."""
    swept, status = read_rounds(out / case["run"])
    final = read_rounds(out / case["final"])[0] if case.get("final") else None
    regrets = judged_regrets(swept, final)
    judged_in = final if final and SINGLE in final else swept
    single = recommend.confirm_verdict(judged_in, SINGLE) if SINGLE in swept else {}
    means = {label: stats.centre(rounds.values()) or 0.0 for label, rounds in swept.items()}
    k = int(case["measured_by_recommend"])
    return dict(
        single_status=status.get(SINGLE, "not measured"), single_regret=single.get("regret"),
        single_regret_interval=single.get("regret_interval"), random_k=k,
        random_from=len(means), random_regret=best_of_random(means, regrets, k),
        random_hit=best_of_random(means, {label: float(regret <= HIT)
                                          for label, regret in regrets.items()}, k))


def hit_rates(cases: list[dict], found: list[dict]) -> dict[str, dict]:
    """The pick's, single's and random-K's hits over the workloads (single's where it did not
    run a miss; random-K's the expected count), each with its 95% interval."""
    hits = dict(pick=sum(c["confirmed_pick_regret"] is not None
                         and c["confirmed_pick_regret"] <= HIT for c in cases),
                single=sum(b["single_regret"] is not None and b["single_regret"] <= HIT
                           for b in found),
                random=sum(b["random_hit"] for b in found))
    return {name: dict(hits=count, n=len(cases), interval=clopper_pearson(count, len(cases)))
            for name, count in hits.items()}


def within_noise(rates: Mapping[str, Mapping]) -> list[tuple[str, str]]:
    """The pairs of hit rates whose intervals do not overlap (none: all within noise)."""
    names = list(rates)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if rates[a]["interval"][1] < rates[b]["interval"][0]
            or rates[b]["interval"][1] < rates[a]["interval"][0]]
