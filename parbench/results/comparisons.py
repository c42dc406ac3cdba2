"""Records compared within a run: speedups, efficiencies and the micro-batch and parallel
effects, each the geometric mean of ratios paired by round, with its interval and verdict."""

from __future__ import annotations

import math

from parbench import strategies
from parbench.results import stats
from parbench.results.record import COMPARED, Record, compile_variant

__all__ = ["add_comparisons", "comparison_key", "compiled_as", "is_baseline", "per_round"]



def per_round(record: Record, twin: bool = False) -> dict[int, float]:
    """Round -> throughput of each ok trial (of the A/A twin's with `twin`); a record without
    trials (one measurement) is its own round 0."""
    if not record.trials:
        if twin or not record.ok or record.throughput_ips is None:
            return {}
        return {0: record.throughput_ips}
    return {t["round"]: t["throughput_ips"] for t in record.trials
            if t["status"] == "ok" and t["twin"] == twin}


def compiled_as(record: Record) -> tuple[str, str] | None:
    """How the record's model was compiled: (scope, mode), None eager (`compile_variant`)."""
    return compile_variant(record.compile, record.compile_scope, record.compile_mode,
                           record.environment.get("timestamp_utc"))


def comparison_key(record: Record) -> tuple:
    """What records compared with each other share: the workload (compiled ones with the same
    scope and mode), the device type, and the batch (the global batch; under weak scaling,
    the batch per device)."""
    batch = record.global_batch
    if record.scaling == "weak" and batch is not None:
        batch //= max(record.device_count, 1)
    return (record.model, record.image_size, record.num_classes, record.precision,
            record.channels_last, compiled_as(record), record.scaling == "weak", batch,
            record.device_kind)


def is_baseline(record: Record) -> bool:
    """Whether `record` is a baseline others are compared with: the baseline strategy with
    its default options (the whole batch at once)."""
    return record.strategy == strategies.BASELINE and not record.strategy_options


def _scaling_key(record: Record) -> tuple:
    """The same strategy with the same options, whatever its number of devices."""
    options = {k: v for k, v in (record.strategy_options or {}).items() if k != "world_size"}
    return (*comparison_key(record), record.strategy, repr(sorted(options.items())))


def _set(record: Record, name: str, ratios: list[float], scale: float = 1.0,
         itself: bool = False) -> None:
    """A compared figure: the geometric mean of its paired ratios (times `scale`), and its
    interval (none where a record is compared with `itself`: its ratios are 1 by definition)."""
    centre = stats.centre(ratios)
    if centre is None:  # no ratio, or none finite
        return
    setattr(record, name, centre * scale)
    bounds = None if itself else stats.interval(ratios)
    if bounds:
        assert record.intervals is not None  # add_comparisons set it
        record.intervals[name] = [bounds[0] * scale, bounds[1] * scale]


def add_comparisons(records: list[Record]) -> None:
    """Against the same workload and batch measured in the same run: speedup over the baseline
    strategy (with its default options: the whole batch at once), per-device efficiency =
    speedup / devices used, and scaling efficiency T(N) / (N x T(1)) against the same strategy
    with the same options on one device (1.0 = perfect scaling); each paired by round.

    A cut model's speedup is split into its two causes where the baseline accumulating the
    same micro-batches was measured (torchgpipe's `pipeline-1`): the micro-batch effect (that
    baseline over the whole-batch one) and the parallel effect (this record over that
    baseline), whose product is the speedup. The baseline's A/A pair (measured twice a round)
    gives the run's noise floor (`aa_ratio`)."""
    ok = [r for r in records if r.ok]
    # The first baseline of each workload and batch (the one with an A/A twin).
    baselines: dict[tuple, Record] = {}
    for r in ok:
        if is_baseline(r):
            baselines.setdefault(comparison_key(r), r)
    accumulating = {(*comparison_key(r), r.split_size): r for r in ok
                    if r.strategy == strategies.BASELINE and r.split_size}
    one_device = {_scaling_key(r): r for r in ok if r.device_count == 1}
    # Each baseline's family: every record's speedup ratios over it, whose verdicts are
    # corrected together (stats.verdicts).
    families: dict[tuple, dict[int, list[float]]] = {}
    for index, record in enumerate(records):
        for name in COMPARED:  # recomputed from scratch every time
            setattr(record, name, None)
            (record.intervals or {}).pop(name, None)
        record.verdict = record.aa_ratio = record.aa_verdict = None
        record.intervals = dict(record.intervals or {})
        record.intervals.pop("aa_ratio", None)
        if not record.ok or record.throughput_ips is None or math.isnan(record.throughput_ips):
            continue
        key = comparison_key(record)
        speedups = _compare(record, baselines.get(key), accumulating,
                            one_device.get(_scaling_key(record)))
        if speedups is not None:
            families.setdefault(key, {})[index] = speedups
    for family in families.values():
        for index, verdict in stats.verdicts(family).items():
            records[index].verdict = verdict


def _compare(record: Record, baseline: Record | None, accumulating: dict,
             single: Record | None) -> list[float] | None:
    """Set `record`'s compared figures; returns its speedup ratios over the baseline, for its
    verdict (None for the baseline itself, or where there is none)."""
    mine, devices = per_round(record), record.device_count
    if single:
        _set(record, "scaling_efficiency", stats.paired_ratios(mine, per_round(single)),
             1 / devices, itself=single is record)
    if baseline is None:
        return None
    if record is baseline:
        _noise_floor(record)
    speedups = stats.paired_ratios(mine, per_round(baseline))
    _set(record, "speedup_vs_baseline", speedups, itself=baseline is record)
    _set(record, "device_efficiency", speedups, 1 / devices, itself=baseline is record)
    _set_causes(record, baseline, accumulating)
    return None if record is baseline else speedups


def _set_causes(record: Record, baseline: Record, accumulating: dict) -> None:
    """A cut model's speedup split into the micro-batch effect and the parallel effect."""
    mine, devices = per_round(record), record.device_count
    if not (record.stages or 1) > 1 and record.strategy != strategies.BASELINE:
        return  # not a cut model: its causes are another decomposition's (data parallel)
    same_split = (accumulating.get((*comparison_key(record), record.split_size))
                  if record.split_size and (record.micro_batches or 1) > 1 else baseline)
    if same_split:
        _set(record, "micro_batch_effect",
             stats.paired_ratios(per_round(same_split), per_round(baseline)),
             itself=same_split is baseline)
        parallel = stats.paired_ratios(mine, per_round(same_split))
        _set(record, "parallel_effect", parallel, itself=same_split is record)
        _set(record, "parallel_efficiency", parallel, 1 / devices, itself=same_split is record)


def _noise_floor(baseline: Record) -> None:
    """The baseline against itself, measured twice in each round: the ratio of the pair."""
    ratios = stats.paired_ratios(per_round(baseline), per_round(baseline, twin=True))
    baseline.aa_ratio = stats.centre(ratios)
    bounds = stats.interval(ratios)
    if bounds:
        assert baseline.intervals is not None  # add_comparisons set it
        baseline.intervals["aa_ratio"] = list(bounds)
    baseline.aa_verdict = stats.verdict(bounds, above="differs", below="differs")
