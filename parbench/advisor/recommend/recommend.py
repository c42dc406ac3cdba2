"""Layouts predicted and ranked into a recommendation, and a measured check of it judged."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from parbench import strategies
from parbench.advisor.models.links import AnyLink
from parbench.advisor.profiling.costs_at_hand import measured_costs
from parbench.advisor.profiling.fixed_costs import FixedCosts
from parbench.advisor.profiling.local_link import measured_link
from parbench.advisor.profiling.record_profiles import profiles_for
from parbench.advisor.recommend.layouts import predicted_layouts
from parbench.plan.config import Config
from parbench.results import stats
from parbench.strategies import Layout, layout_of

__all__ = ["CAUSES", "CONTROL", "Recommendation", "candidates", "confirm_verdict",
           "dropped_summary", "fitting", "leanest", "option_flags", "rank_layouts", "ranked",
           "recommend_layouts", "reference", "row_label"]

# The naive choice a recommendation is measured against: ddp at the full batch.
CONTROL: tuple[str, dict] = ("ddp", {})
# What the reasons name, said once under the table.
CAUSES = ("why: against the runner-up for the pick, against the pick for the rest, the largest "
          "of idle time (a pipeline's bubble, data parallelism's exposed communication, stages "
          "in turn), the micro-batch effect (single's per-image rate at the images a device "
          "runs at once over its rate on the whole batch), the fixed costs probed on the "
          "devices at hand (the runtime's own work) and the busy time they leave")
# A predicted difference under this share is a tie, not a reason.
TIE = 0.005


def _options_of(row: Mapping) -> dict:
    """The `parbench run` options that reproduce a row: its `options` where the table has
    them; else a pipeline's split size, or the accumulating single's."""
    options = row.get("options")
    if isinstance(options, dict):
        return dict(options)
    split = row.get("split_size")
    if split is None or pd.isna(split):
        return {}
    layout = layout_of(row["strategy"])
    if layout is not None and layout.pipelined:
        return {"split_size": int(split)}
    return {"accumulation_split": int(split)} if layout is Layout.ONE_DEVICE else {}


def _with_balance(options: dict, partition) -> dict:
    """A cut model's options cut as the prediction cut it: at equal profiled time (parbench run
    cuts two stages at the tutorial's point by default)."""
    if isinstance(partition, str) and partition and "balance" not in options:
        return {**options, "balance": "time"}
    return options


def option_flags(options: Mapping) -> str:
    """`parbench run`'s flags for `options`, e.g. `--split-size 4 --balance time`."""
    specs = strategies.option_specs()
    flags = []
    for name, value in options.items():
        flag = specs[name].flag if name in specs else "--" + name.replace("_", "-")
        flags.append(flag if value is True else f"{flag} {value}")
    return " ".join(flags)


def row_label(row: Mapping) -> str:
    """A row's strategy with the flags that make it."""
    flags = option_flags(row["options"])
    return f"{row['strategy']} {flags}" if flags else str(row["strategy"])


def candidates(table: pd.DataFrame, devices: int) -> pd.DataFrame:
    """The predicted layouts on exactly `devices` devices, fastest first, each with the
    options that reproduce it (a cut one at equal profiled time, as predicted; a configuration
    predicted as it would run here, its own options). On the devices at hand (a table of
    configurations) single on one of them is a layout too: the measurement judges it alike."""
    here = "config_key" in table
    on = table[(table["devices"] <= devices) if here else (table["devices"] == devices)].copy()
    on["options"] = [_options_of(row) if isinstance(row.get("config_key"), str)
                     else _with_balance(_options_of(row), row.get("partition"))
                     for row in on.to_dict("records")]
    return on.sort_values("throughput_ips", ascending=False, ignore_index=True, kind="stable")


def reference(table: pd.DataFrame) -> pd.Series | None:
    """single on one device at the whole batch: the line every layout is read against."""
    one_device = table["strategy"].map(lambda name: layout_of(name) is Layout.ONE_DEVICE)
    whole = table[(table["devices"] == 1) & table["split_size"].isna() & one_device]
    return whole.iloc[0] if len(whole) else None


# The memory a device's limit applies to: what its caching allocator reserves (a GPU's: every
# tensor and the reserve beyond them; what --memory-cap-mib limits, as --confirm runs the
# pick), or the tensors an emulated device counts (--device-memory-mib: FSDP's gathered units
# aside). On a CPU's profile the reserve is none: it is the peak.
PEAK, COUNTED = "reserved_memory_max_mib", "counted_memory_max_mib"


def fitting(table: pd.DataFrame, memory_mib: float | None, limited: str = PEAK
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(those predicted to fit in `memory_mib` per device, those dropped); nothing is dropped
    without a cap. `limited`: the column the limit applies to (PEAK or COUNTED)."""
    if memory_mib is None:
        return table, table.iloc[0:0]
    fits = table[limited] <= memory_mib
    return table[fits].reset_index(drop=True), table[~fits].reset_index(drop=True)


def leanest(table: pd.DataFrame, limited: str = PEAK) -> pd.Series:
    """The row predicted to need the least memory (`limited`) on its fullest device."""
    return table.loc[table[limited].idxmin()]


def dropped_summary(dropped: pd.DataFrame, total: int, memory_mib: float | None) -> str | None:
    """One line on the layouts predicted not to fit, the largest of them named."""
    if dropped.empty or memory_mib is None:
        return None
    largest = dropped.loc[dropped[PEAK].idxmax()]
    return (f"dropped {len(dropped)} of {total} layouts predicted not to fit in "
            f"{memory_mib:g} MiB a device; the largest, {row_label(largest)}, is predicted "
            f"to need {largest[PEAK]:.0f} MiB")


def _idle(row: Mapping, devices: int) -> tuple[str, float]:
    """What a row's devices wait for, by its layout, and its predicted share of the step."""
    layout = layout_of(row["strategy"])
    share = row.get("bubble_or_exposed_comm")
    share = 0.0 if share is None or pd.isna(share) else float(share)
    if layout is not None and layout.pipelined:
        return "bubble", share
    if layout is not None and layout.data_parallel:
        return "exposed communication", share
    if layout is Layout.STAGES_IN_TURN:
        return "stages in turn (devices idle)", 1 - 1 / devices
    return "idle time", share


def _busy_hint(strategy: str) -> str:
    """What, beside idle time and micro-batching, sets how busy a layout's devices are."""
    layout = layout_of(strategy)
    if layout is not None and layout.data_parallel:
        return " (its share of the optimiser's step)"
    if layout is not None and (layout.pipelined or layout is Layout.STAGES_IN_TURN):
        return " (the stages' balance)"
    return ""


def _causes(row: Mapping, other: Mapping, devices: int,
            versus: str) -> dict[str, tuple[float, str]]:
    """How much faster `row` is predicted than `other` (log of the ratio) from each cause,
    with a phrase naming it (`versus`: how it names `other`): idle time, the micro-batch
    effect, the fixed costs a probe measured (where either has some), and the busy time that
    leaves."""
    name, idle = _idle(row, devices)
    other_name, other_idle = _idle(other, devices)
    from_idle = math.log((1 - idle) / (1 - other_idle))
    effect, other_effect = row["micro_batch_effect"], other["micro_batch_effect"]
    from_micro = math.log(effect / other_effect)
    fixed, other_fixed = _fixed_share(row), _fixed_share(other)
    from_fixed = math.log((1 - fixed) / (1 - other_fixed))
    busy = (math.log(row["throughput_ips"] / other["throughput_ips"]) - from_idle - from_micro
            - from_fixed)
    causes = {} if fixed == other_fixed == 0 else {
        "fixed": (from_fixed, f"fixed costs (the runtime's own, probed) {_share(fixed)} of the "
                              f"step; {versus}: {_share(other_fixed)}")}
    return causes | {
        "idle": (from_idle, f"{name} {_share(idle)} of the step; {versus}: {other_name} "
                            f"{_share(other_idle)}"),
        "micro": (from_micro, f"micro-batch effect {effect:.2f}x; {versus}: "
                              f"{other_effect:.2f}x"),
        "busy": (busy, f"{abs(math.expm1(-busy)):.0%} {'less' if busy > 0 else 'more'} busy "
                       f"time a device than {versus}{_busy_hint(row['strategy'])}, idle time "
                       "and micro-batching aside"),
    }


def _fixed_share(row: Mapping) -> float:
    """The share of a row's predicted step its fixed costs take
    (parbench.advisor.profiling.fixed_costs; 0 where none were probed)."""
    fixed = row.get("fixed_cost_s")
    if fixed is None or pd.isna(fixed) or not row["step_time_s"]:
        return 0.0
    return min(float(fixed) / float(row["step_time_s"]), 0.99)


def _share(value: float) -> str:
    """A share of the step: to a tenth of a percent where it is under 1%."""
    return f"{value:.1%}" if 0 < value < 0.01 else f"{value:.0%}"


def _winning_reason(pick: Mapping, runner_up: Mapping | None, dropped: pd.DataFrame,
                    devices: int, memory_mib: float | None) -> str:
    faster = dropped[dropped["throughput_ips"] > pick["throughput_ips"]]
    if len(faster):
        return (f"fastest that fits: {len(faster)} predicted faster need more than "
                f"{memory_mib:g} MiB a device (the fastest, {row_label(faster.iloc[0])}, "
                f"{faster[PEAK].iloc[0]:.0f} MiB)")
    if runner_up is None:
        return "the only layout predicted" + (" to fit" if memory_mib else "")
    ahead = pick["throughput_ips"] / runner_up["throughput_ips"] - 1
    if ahead < TIE:
        return f"ties {row_label(runner_up)}"
    share, phrase = max(_causes(pick, runner_up, devices, row_label(runner_up)).values())
    return f"{ahead:.0%} ahead: {phrase}"


def _losing_reason(row: Mapping, pick: Mapping, devices: int,
                   memory_mib: float | None) -> str:
    behind = 1 - row["throughput_ips"] / pick["throughput_ips"]
    if behind < TIE:
        return "ties the pick"
    if behind < 0.05 and row[PEAK] <= 0.8 * pick[PEAK]:
        headroom = f", {memory_mib - row[PEAK]:.0f} MiB under the cap" if memory_mib else ""
        return (f"within {behind:.0%} of the pick on {row[PEAK]:.0f} MiB a device against "
                f"{pick[PEAK]:.0f}{headroom}")
    share, phrase = min(_causes(row, pick, devices, "the pick").values())
    return f"{behind:.0%} behind the pick: {phrase}"


def ranked(kept: pd.DataFrame, dropped: pd.DataFrame, devices: int,
           memory_mib: float | None) -> pd.DataFrame:
    """`kept` (fastest first) with its rank and one phrase each on why it wins or loses."""
    rows = kept.to_dict("records")
    reasons = [_winning_reason(rows[0], rows[1] if len(rows) > 1 else None, dropped, devices,
                               memory_mib)] if rows else []
    reasons += [_losing_reason(row, rows[0], devices, memory_mib) for row in rows[1:]]
    return kept.assign(rank=range(1, len(kept) + 1), reason=reasons)


@dataclass(frozen=True, eq=False)  # eq=False: DataFrames compared by == have no truth value
class Recommendation:
    """A predicted table ranked: its layouts on the devices asked (`candidates`, fastest
    first), those predicted to fit ranked with why each wins or loses (`ranked`), those
    predicted not to (`dropped`), and the link predicted over (None: not known here)."""

    table: pd.DataFrame
    candidates: pd.DataFrame
    ranked: pd.DataFrame
    dropped: pd.DataFrame
    link: AnyLink | None = None


def rank_layouts(table: pd.DataFrame, devices: int, memory_mib: float | None,
                 limited: str = PEAK) -> Recommendation:
    """`table`'s layouts on `devices` devices, those predicted to fit in `memory_mib` a device
    (`limited`: the column the limit applies to) ranked, fastest first."""
    on = candidates(table, devices)
    kept, dropped = fitting(on, memory_mib, limited)
    return Recommendation(table, on, ranked(kept, dropped, devices, memory_mib), dropped)


def recommend_layouts(configs: Sequence[Config], devices: int, memory_mib: float | None,
                      limited: str, link: AnyLink | None, cache: Path) -> Recommendation:
    """Every configuration predicted as a run's record of it would be (what it lacks profiled
    into `cache`; without a `link`, the collectives of the configurations' devices measured
    there once, and each layout's fixed costs probed on them:
    parbench.advisor.profiling.fixed_costs) and ranked by rank_layouts: `parbench recommend`'s
    pipeline, which its published experiment runs too."""
    at_hand = link is None  # the devices here: their fixed costs are probed on them too
    used = measured_link(configs[0].devices, cache, configs[0].threads_per_device) \
        if link is None else link

    def probed(record: dict) -> FixedCosts:
        return measured_costs(record, profiles_for(record, cache), used, cache)

    table = predicted_layouts(configs, lambda record: profiles_for(record, cache), used,
                              probed if at_hand else None)
    return replace(rank_layouts(table, devices, memory_mib, limited), link=used)


def _bounds(values: list[float]) -> list[float] | None:
    bounds = stats.interval(values)
    return list(bounds) if bounds else None


def confirm_verdict(rounds: Mapping[str, Mapping[int, float]], pick: str) -> dict:
    """From each measured configuration's throughput per round (label -> round -> images/s):
    its mean and interval, its ratio to the measured best paired by round, and the verdict on
    `pick`: the best, within noise of it, or slower beyond noise (with the regret, 1 - the
    pick's throughput over the best's, paired by round, and its interval)."""
    means = {label: stats.centre(per_round.values()) for label, per_round in rounds.items()}
    ok = {label: mean for label, mean in means.items() if mean is not None}
    measured: dict[str, dict] = {
        label: dict(throughput_ips=means[label],
                    throughput_interval=_bounds(list(rounds[label].values())))
        for label in rounds}
    if not ok:
        return dict(measured=measured, best=None, regret=None, regret_interval=None,
                    verdict="nothing was measured ok")
    best = max(ok, key=lambda label: ok[label])
    for label in ok:
        ratios = stats.paired_ratios(rounds[label], rounds[best])
        measured[label].update(ratio_to_best=stats.centre(ratios),
                               ratio_interval=None if label == best else _bounds(ratios))
    result = dict(measured=measured, best=best, regret=None, regret_interval=None)
    if pick not in ok:
        return {**result, "verdict": "the pick was not measured ok (see its record)"}
    if pick == best:
        return {**result, "regret": 0.0, "verdict": "the pick is the measured best"}
    return {**result, **_regret(stats.paired_ratios(rounds[pick], rounds[best]), best)}


def _regret(ratios: list[float], best: str) -> dict:
    """The pick's regret against `best` from its throughput ratios to it, paired by round,
    and the verdict its interval gives."""
    ratio, bounds = stats.centre(ratios), stats.interval(ratios)
    if ratio is None or bounds is None:
        return dict(verdict=f"the pick's ratio to the measured best ({best}) has no interval "
                            "(fewer than 2 rounds measured both)")
    regret = 1 - ratio
    found = dict(regret=regret, regret_interval=[1 - bounds[1], 1 - bounds[0]])
    if stats.verdict(bounds) != "slower":
        return {**found, "verdict": f"the pick is within noise of the measured best ({best})"}
    return {**found, "verdict": f"the pick is {regret:.0%} slower than the measured best "
                                f"({best}), beyond noise"}
