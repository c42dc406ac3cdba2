"""What a reader came for, read from a run's records: the answers (the fastest strategy, the
leanest, the distance from the ideal), the noise floor, the table `parbench run` prints, and
the interval each verdict in it is decided by."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from parbench import strategies
from parbench.measure.memory import memory_kind
from parbench.measure.timing import HOST_BOUND_SHARE
from parbench.plots import options_text
from parbench.plots.common import compile_label, device_count, interval_of, is_compiled
from parbench.results import stats
from parbench.results.comparisons import comparison_key, is_baseline, per_round
from parbench.results.record import Record, columns, has_interval, heading, is_number, optional

__all__ = ["Decided", "answers", "deciding_intervals", "noise_floor", "results_table"]


def _format_number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _named(record: pd.Series) -> str:
    options = options_text(record.get("strategy_options"))
    named = f"{record['strategy']} ({options})" if options else record["strategy"]
    return named + (f" {compile_label(record)}" if is_compiled(record) else "")


def _from_ideal(record: pd.Series, devices: int) -> str:
    """How far a record is from `devices` times the single device's throughput."""
    speedup, efficiency = record.get("speedup_vs_baseline"), record.get("device_efficiency")
    if devices == 1 or speedup is None or speedup != speedup:
        return ""
    parallel = record.get("parallel_effect")
    if parallel is not None and parallel == parallel:
        # The speedup split into its causes: only the parallel part has an ideal of N.
        efficiency = record.get("parallel_efficiency")
        text = (f", {_with_interval(record, 'speedup_vs_baseline')}x the single device = "
                f"{_with_interval(record, 'micro_batch_effect')}x from micro-batching x "
                f"{_with_interval(record, 'parallel_effect')}x from parallelism: "
                f"{efficiency:.0%} of the ideal {devices}x")
        return text + _above_ideal(record, "parallel_efficiency", (
            "the devices did more than their share; e.g. cores the single device left idle"))
    text = (f", {_with_interval(record, 'speedup_vs_baseline')}x the single device: "
            f"{efficiency:.0%} of the ideal {devices}x")
    return text + _above_ideal(record, "device_efficiency", (
        "more than parallelism is at work, e.g. smaller micro-batches running faster per "
        "image; measure single --accumulation-split at the same split to tell them apart"))


def _above_ideal(record: pd.Series, name: str, causes: str) -> str:
    """An efficiency above 1 is a finding to explain where its interval excludes 1, noise
    where it does not, and unknown with one trial."""
    efficiency, bounds = record.get(name), interval_of(record, name)
    if efficiency is None or efficiency != efficiency or efficiency <= 1:
        return ""
    if bounds is None:
        return f" (ABOVE the ideal, in one trial: no interval; if it holds, {causes})"
    if bounds[0] > 1:
        return (f" (ABOVE the ideal beyond noise, 95% interval {bounds[0]:.0%}-{bounds[1]:.0%}"
                f": {causes})")
    return f" (above the ideal within noise: 95% interval {bounds[0]:.0%}-{bounds[1]:.0%})"


def answers(frame: pd.DataFrame) -> list[str]:
    """What a reader came for, per workload and number of devices: the fastest strategy (or
    those within noise of it), the one with the least memory on its fullest device, and how
    far the fastest is from ideal."""
    ok = frame[frame["status"] == "ok"]
    lines = []
    workload = ["model", "global_batch", "image_size", "precision"]
    for (model, batch, size, precision), group in ok.groupby(workload, sort=False):
        counts = device_count(group)
        for devices, same in group.groupby(counts):
            ranked = same.sort_values("throughput_ips", ascending=False)
            fastest = ranked.iloc[0]
            emulated = " (emulated)" if same["emulated"].fillna(False).astype(bool).any() else ""
            lines.append(
                f"{model}, batch {batch}, {size} px, {precision}, {devices} device"
                f"{'s' if devices > 1 else ''}{emulated}: {_fastest(ranked)}"
                f"{_from_ideal(fastest, devices)}; {_leanest(same)}")
    return lines + _host_bound_lines(ok)


def _host_bound_lines(ok: pd.DataFrame) -> list[str]:
    """Which GPU configurations the host bounds (records from before the field have none)."""
    if "host_bound" not in ok or ok["host_bound"].isna().all():
        return []
    judged = ok[ok["host_bound"].notna()]
    bound = judged[judged["host_bound"].astype(bool)]
    named = [f"{_named(row)} on {row['devices']}, "
             f"batch {row['global_batch']} (host "
             f"{row['host_time_median_s'] / row['step_time_median_s']:.0%} of the step)"
             for _, row in bound.iterrows()]
    share = f"{HOST_BOUND_SHARE:.0%}"
    if not named:
        return [f"host-bound: none of the {len(judged)} GPU configurations (the host queued "
                f"each step's work in under {share} of the step, then waited for the GPU)"]
    return [f"host-bound ({len(named)} of {len(judged)} GPU configurations: the host took at "
            f"least {share} of the step to queue its work, so the GPU waited for launches, "
            "e.g. eager dispatch of small kernels, or the step synchronised inside; their "
            "times measure the host as much as the GPU): " + "; ".join(named)]


def _leanest(same: pd.DataFrame) -> str:
    """The least memory on its fullest device, compared only among figures of one kind
    (memory_kind): on one GPU emulating two, single, ddp and fsdp give allocator peaks while
    the one-process pipelines count tensors, which leave out cuDNN's workspace, the input
    batch and transient gradients."""
    kinds = same["memory_source"].map(memory_kind)
    named = []
    for kind in kinds.unique():
        group = same[(kinds == kind) & same["peak_memory_max_mib"].notna()]
        if group.empty:  # no reading of this kind (VmHWM unreadable, say)
            continue
        leanest = group.loc[group["peak_memory_max_mib"].idxmin()]
        how = "" if kind == "unknown" else f"; {kind}"
        named.append(f"{_named(leanest)} at {_format_number(leanest['peak_memory_max_mib'])} "
                     f"MiB (max/mean {leanest['memory_imbalance']:.2f}{how})")
    if not named:
        return "no memory reading"
    if len(named) == 1:
        return f"least memory on its fullest device {named[0]}"
    return ("least memory on its fullest device, among figures of one kind only (not "
            "comparable across kinds): " + "; ".join(named))


def _rounds(record: pd.Series) -> dict[int, float]:
    """Round -> throughput of the record's own ok trials."""
    trials = record.get("trials")
    if not isinstance(trials, list):
        return {}
    return {t["round"]: t["throughput_ips"] for t in trials
            if t["status"] == "ok" and not t["twin"]}


def _fastest(ranked: pd.DataFrame) -> str:
    """The fastest strategy, unless another is within noise of it (their throughputs'
    ratio, paired by round, has an interval across 1): then those, named together. Beside
    each throughput's own interval, the ratio's, which decides."""
    first = ranked.iloc[0]
    text = f"{_named(first)} at {_with_interval(first, 'throughput_ips')} img/s"
    if len(ranked) == 1:
        return f"fastest {text}"
    others = list(ranked.iloc[1:].iterrows())
    # "Faster than every other" holds only where each pair's own test says so: a claim that
    # needs all of them is false at most as often as one of them (an intersection-union test),
    # so it needs no correction for their number, and each pair's 95% interval decides it.
    ratios = {index: stats.paired_ratios(_rounds(first), _rounds(other))
              for index, other in others}
    verdicts = stats.verdicts(ratios, correct=False)
    tied = [(index, other) for index, other in others if verdicts[index] == "within noise"]
    unknown = [other for index, other in others if verdicts[index] is None]
    pairs = (f"{len(others)} pair{'s' if len(others) > 1 else ''} compared, each by its own "
             "t-test at the 5% level")

    def over(index, other) -> str:  # a pair judged: two ratios or more, so an interval
        centre, bounds = stats.centre(ratios[index]), stats.interval(ratios[index])
        assert centre is not None and bounds is not None
        return (f"{_format_number(centre)} [{_format_number(bounds[0])}, "
                f"{_format_number(bounds[1])}] over {_named(other)}")

    decides = "decided by the fastest's throughput over each other's, paired by round, "
    if tied:
        named = ", ".join(f"{_named(r)} {_with_interval(r, 'throughput_ips')}" for _, r in tied)
        return (f"fastest within noise: {text}, with {named} img/s (each throughput's 95% "
                f"interval; {decides}whose 95% interval holds 1: "
                f"{', '.join(over(*pair) for pair in tied)}; {pairs})")
    if unknown:
        return (f"fastest {text} (against {len(unknown)} of the others, one trial: no "
                "interval; measure with --repeats 3)")
    example = "e.g. " if len(others) > 1 else ""
    return (f"fastest {text}, beyond the noise of every other ({decides}whose 95% interval "
            f"excludes 1, {example}{over(*others[0])}, the next fastest; {pairs})")


def _with_interval(record: pd.Series, name: str) -> str:
    """A figure of merit with its 95% interval where it has one: `137 [121, 150]`."""
    value, bounds = record.get(name), interval_of(record, name)
    text = _format_number(value) if value is not None and value == value else "-"
    if bounds:
        text += f" [{_format_number(bounds[0])}, {_format_number(bounds[1])}]"
    return text


def _speedup_interval(record: pd.Series) -> tuple[float, float] | None:
    bounds = interval_of(record, "speedup_vs_baseline")  # the speedup's own 95% interval
    return (bounds[0], bounds[1]) if bounds else None


def _disagrees(record: pd.Series) -> bool:
    """Whether the speedup's own 95% interval says otherwise than the record's verdict: one
    that excludes 1 beside "within noise", where the verdicts made asked for a wider one."""
    verdict = record.get("verdict")
    own = stats.verdict(_speedup_interval(record))
    return isinstance(verdict, str) and own is not None and own != verdict


def _verdict_cell(record: pd.Series) -> str:
    verdict = record.get("verdict")
    if not isinstance(verdict, str):
        return "-"
    return verdict + ("*" if _disagrees(record) else "")


def _deciding_lines(frame: pd.DataFrame, decided: dict) -> list[str]:
    """For each verdict its speedup's 95% interval contradicts (marked * in the table), the
    interval that decides."""
    lines = []
    for index, row in frame.iterrows():
        found: Decided | None = decided.get(index)
        own = _speedup_interval(row)
        if not _disagrees(row) or found is None or own is None:
            continue
        low, high = own
        lines.append(
            f"  * {_named(row)} on {row['devices']}: its speedup's 95% interval "
            f"[{_format_number(low)}, {_format_number(high)}] excludes 1, but it is one of "
            f"{found.verdicts} verdicts against {strategies.BASELINE} ({found.judged} faster "
            f"or slower): its verdict's interval, at {found.confidence:.1%}, is "
            f"[{_format_number(found.bounds[0])}, {_format_number(found.bounds[1])}]")
    return lines


@dataclass(frozen=True)
class Decided:
    """A verdict's deciding interval of the speedup, at `confidence`, one of `verdicts` made
    against the same baseline, `judged` of them faster or slower."""

    bounds: tuple[float, float]
    confidence: float
    verdicts: int
    judged: int


def deciding_intervals(frame: pd.DataFrame) -> dict[Hashable, Decided]:
    """Frame index -> the deciding interval of each record with a verdict against its
    baseline: its speedup's ratios paired by round, in the family parbench.results.comparisons
    corrects together (the same workload and batch against its first baseline), at
    stats.deciding_confidence; it excludes 1 exactly where the verdict is faster or slower."""
    records = {index: Record.from_dict({  # pandas reads a missing number as NaN; Record, None
        key: None if isinstance(value, float) and math.isnan(value) else value
        for key, value in row.items()}) for index, row in frame.iterrows()}
    baselines: dict[tuple, Record] = {}
    for record in records.values():
        if record.ok and is_baseline(record):
            baselines.setdefault(comparison_key(record), record)
    families: dict[tuple, dict[Hashable, list[float]]] = {}
    for index, record in records.items():
        baseline = baselines.get(comparison_key(record))
        if (record.ok and record.throughput_ips is not None and baseline is not None
                and baseline is not record):
            families.setdefault(comparison_key(record), {})[index] = stats.paired_ratios(
                per_round(record), per_round(baseline))
    decided: dict[Hashable, Decided] = {}
    for family in families.values():
        made = [verdict for verdict in stats.verdicts(family).values() if verdict is not None]
        # None where no member has two ratios, so none has an interval either
        confidence = stats.deciding_confidence(family) or stats.CONFIDENCE
        for index, ratios in family.items():
            if bounds := stats.interval(ratios, confidence=confidence):
                decided[index] = Decided(bounds, confidence, len(made),
                                         sum(verdict != "within noise" for verdict in made))
    return decided


def _verdict_count(frame: pd.DataFrame) -> str:
    """How many verdicts were made, in how many families (one per baseline)."""
    if "verdict" not in frame:
        return "no verdict"
    made = frame[frame["verdict"].notna()]
    families = len(made.groupby(["model", "global_batch", "image_size", "precision"],
                                dropna=False))
    count = f"{len(made)} comparison{'s' if len(made) != 1 else ''}"
    return count + (f" in {families} families" if families > 1 else "")


def noise_floor(frame: pd.DataFrame) -> list[str]:
    """Each baseline against itself (its A/A pair, twice in each round): one configuration's
    spread, which is not the threshold of a verdict (see stats.VERDICT_METHOD)."""
    if "aa_ratio" not in frame:
        return []
    lines = []
    for _, row in frame[frame["aa_ratio"].notna()].iterrows():
        bounds = interval_of(row, "aa_ratio")
        if not bounds:
            continue
        spread = max(abs(bounds[0] - 1), abs(bounds[1] - 1))
        lines.append(
            f"noise floor: {_named(row)} on {row['devices']} against itself (A/A, twice in "
            f"each round): ratio {_with_interval(row, 'aa_ratio')} (95% interval), "
            f"{row['aa_verdict']}: one "
            f"configuration's spread, up to about {spread:.0%} here; a verdict compares two "
            "configurations' ratios paired by round, whose spread can be smaller (drift "
            "between rounds cancels) or larger, so it rests on its own test, not on this")
    return lines


def _communication_lines(frame: pd.DataFrame) -> list[str]:
    """Each data-parallel record's step split into compute and exposed communication; on one
    rank (a record with `wrapper_overhead_fraction`), where no byte crosses a link, into
    compute and the wrapper's overhead (at its mean share over trials, as the exposed
    communication is)."""
    if "compute_time_s" not in frame:
        return []
    lines = []
    for _, row in frame[frame["compute_time_s"].notna()].iterrows():
        step = (f"  {_named(row)} on {row['devices']}: step "
                f"{_format_number(row['step_time_median_s'])}")
        share = row.get("wrapper_overhead_fraction")
        if share is not None and pd.notna(share):  # one rank: the step at the mean share
            overhead = share * row["step_time_median_s"]
            lines.append(
                f"{step} s = compute {_format_number(row['step_time_median_s'] - overhead)} s "
                f"+ wrapper overhead {_format_number(overhead)} s ({share:.0%}); one rank: no "
                "byte crosses a link, so this is the wrapper's own work (DDP's reducer, "
                "FSDP's hooks and copies), not communication")
            continue
        gathered = (f", {row['allgather_bytes'] / 1e6:.1f} MB all-gathered"
                    if pd.notna(row.get("allgather_bytes")) else "")
        lines.append(
            f"{step} s = compute {_format_number(row['compute_time_s'])} s + exposed communication "
            f"{_format_number(row['exposed_comm_time_s'])} s "
            f"({row['exposed_comm_fraction']:.0%}); {row['allreduce_bytes'] / 1e6:.1f} MB of "
            f"gradient reduced{gathered} per step")
    return lines


# The table printed after a run: what the configuration is, then the fields the record
# declares for the view ("narrow" by default, "table" with --wide-table), as it heads them.
_CONFIGURATION = {"strategy": "strategy", "options": "options", "model": "model",
                  "global_batch": "batch", "image_size": "px"}
_NARROW_CONFIGURATION = ("strategy", "options")


def _columns(frame: pd.DataFrame, wide: bool) -> dict[str, str]:
    """Field -> heading of the table's columns (an optional one where some record has it)."""
    configuration = (_CONFIGURATION if wide else
                     {k: v for k, v in _CONFIGURATION.items() if k in _NARROW_CONFIGURATION})
    shown = [name for name in columns("table" if wide else "narrow")
             if not optional(name) or frame[name].notna().any()]
    return {**configuration, **{name: heading(name) for name in shown}}


def results_table(frame: pd.DataFrame, folder: Path | None = None, wide: bool = False) -> str:
    """What is printed after a run: the columns a reader compares (those that fit 120
    characters, every one with `wide`), why each configuration that is not ok is not, every
    steady memory rise, the answers, and where the rest is."""
    compiled = frame.apply(lambda row: f", {compile_label(row)}" if is_compiled(row) else "",
                           axis=1)
    table = frame.assign(options=(frame["strategy_options"].map(options_text) + compiled)
                         .str.lstrip(", "))
    shown = _columns(frame, wide)
    if not wide:  # a count: a list of GPUs would not fit
        table["devices"] = device_count(frame)
        shown["devices"] = "dev"
    table = table[list(shown)].rename(columns=shown)
    numeric = [name for name in shown if is_number(name)]
    for field in numeric:  # None -> NaN -> "-"
        table[shown[field]] = pd.to_numeric(table[shown[field]], errors="coerce")
    if wide or (frame["memory_leak_suspected"] == True).any():  # noqa: E712
        table["memory trend"] = frame["memory_leak_suspected"].map(
            lambda leak: "RISING" if leak is True else "-")
    for column in ("strategy", "options", "devices"):  # text reads left-aligned
        if column not in table:
            continue
        text = table[column].astype(str)
        table[column] = text.str.ljust(max(text.str.len().max(), len(column)))
    if "intervals" in frame and frame["intervals"].map(bool).any():
        for field in (f for f in numeric if has_interval(f)):
            table[shown[field]] = [_with_interval(row, field) for _, row in frame.iterrows()]
        table[heading("verdict")] = [_verdict_cell(row) for _, row in frame.iterrows()]
    lines = [table.to_string(index=False, float_format=_format_number, na_rep="-")]
    lines += [f"  {row['strategy']} {row['status']}: {row['reason']}"
              for _, row in frame[frame["status"] != "ok"].iterrows()]
    lines += [f"  {row['strategy']}: memory rose {row['memory_growth_mib_per_step']:.1f} MiB "
              "per measured step, step after step: a leak? (e.g. a loss kept as a tensor)"
              for _, row in frame[frame["memory_leak_suspected"] == True].iterrows()]  # noqa: E712
    lines += _communication_lines(frame)
    lines += noise_floor(frame)
    methods = list(frame["interval_method"].dropna()) if "interval_method" in frame else []
    if methods and "intervals" in frame and frame["intervals"].map(bool).any():
        lines += [f"  [low, high]: {methods[0]}; verdict against {strategies.BASELINE}: "
                  f"{stats.VERDICT_METHOD} ({_verdict_count(frame)}); {stats.DECIDING_METHOD}"]
        lines += _deciding_lines(frame, deciding_intervals(frame))
    lines += ["", *answers(frame)]
    if folder is not None:
        lines += ["", f"every field (step times, memory per device, FLOPs, environment): "
                      f"{folder / 'records.csv'}; figures and a report: `parbench report "
                      f"{folder}`" + ("" if wide else "; every column of the table: "
                                      "--wide-table")]
    return "\n".join(lines)
