"""Measured records beside their predictions: for every configuration of a run the timing
models cover, the step they predict from a profile of the same device, and the prediction's
error against the measurement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd

from parbench.advisor.models import data_parallel, models
from parbench.advisor.models.links import NO_LINK, AnyLink, MissingCollective
from parbench.advisor.models.sharded_pipelines import sharded_pipelines
from parbench.advisor.models.trace_check import replayed_trace
from parbench.advisor.profiling.fixed_costs import NO_FIXED_COSTS, FixedCosts, load_or_probe
from parbench.advisor.profiling.profile import Profile
from parbench.advisor.profiling.record_profiles import workload_of
from parbench.advisor.runs.fields import number
from parbench.families.workloads import Workload
from parbench.results.comparisons import comparison_key, is_baseline
from parbench.results.record import Record
from parbench.strategies import Layout, layout_of, options_of
from parbench.strategies.fsdp import resharded_after_forward
from parbench.strategies.partition import Partition
from parbench.strategies.schedules import ScheduleOptions

__all__ = ["NOT_COVERED", "fixed_costs_of", "left_out", "modelled_prediction", "partition_of",
           "predict_record", "predicted_beside_measured", "profiled_size", "settings_of",
           "sharded_units"]

ProfileAt = Callable[[int], Profile]  # the profile of a record's workload at a micro-batch size
CostsOf = Callable[[dict], FixedCosts]  # a record's fixed costs (fixed_costs_of)
NOT_COVERED = ("the models do not cover it (nn.DataParallel, ddp's communication hooks, "
               "--compile, unequal micro-batches)")
# DDP's options the model leaves at their defaults: a record that sets one is not predicted.
_DDP_MODELLED_DEFAULTS = dict(bucket_cap_mb=None, comm_hook=None, sync_batchnorm=False)


# The layouts a timing model covers (not nn.DataParallel's: CUDA only, never profiled here).
_MODELLED = (Layout.ONE_DEVICE, Layout.REPLICAS, Layout.SHARDED_REPLICAS,
             Layout.HYBRID_SHARDED, Layout.STAGES_IN_TURN, Layout.TICK_PIPELINE,
             Layout.SCHEDULED_PIPELINE, Layout.SHARDED_PIPELINES)


def partition_of(record: dict, block_names: tuple[str, ...]) -> Partition:
    """The cut a record names ("stem..layer2.3 | layer3.0..head") as a Partition."""
    firsts = [part.strip().split("..")[0] for part in record["partition"].split("|")]
    unknown = [name for name in firsts if name not in block_names]
    if unknown:
        raise ValueError(f"the record's cut {record['partition']!r} names blocks its model "
                         f"does not have ({', '.join(unknown)})")
    options = record.get("strategy_options") or {}
    return Partition(block_names, tuple(block_names.index(name) for name in firsts),
                     options.get("balance", "recorded"))


def _modelled(record: dict) -> bool:
    """Whether the models cover the record's settings (else it is left out, not mispredicted)."""
    options = record.get("strategy_options") or {}
    split = number(record.get("split_size"))
    share = int(record["global_batch"]) // int(options.get("pipelines") or 1)
    if record.get("compile") or (split and (share % split
                                            or int(record["global_batch"]) % share)):
        return False  # compiled kernels are not profiled; unequal micro-batches not modelled
    layout = layout_of(record["strategy"])
    if layout is Layout.REPLICAS:
        return all(options.get(k, default) == default
                   for k, default in _DDP_MODELLED_DEFAULTS.items())
    return layout in _MODELLED


def predict_record(record: dict, profile_at: ProfileAt, link: AnyLink,
                   fixed: FixedCosts = NO_FIXED_COSTS) -> models.Prediction | None:
    """The prediction for a measured record's configuration, with its `fixed` costs (those its
    probe measured: fixed_costs_of); None where the models do not cover it (nn.DataParallel,
    ddp's hooks, --compile). Its model is the one for the layout its
    strategy declares (strategies.Layout)."""
    if not _modelled(record):
        return None
    return modelled_prediction(record, profile_at, link, fixed)


def fixed_costs_of(record: dict, profile_at: ProfileAt, link: AnyLink,
                   cache: Path) -> FixedCosts:
    """What `record`'s probe measured beyond the models' prediction of it (measured once into
    `cache`; none for a layout without fixed costs or the models do not cover)."""
    if not _modelled(record):
        return NO_FIXED_COSTS
    return load_or_probe(cache, record, workload_of(record), lambda probe, costs:
                         modelled_prediction(probe, profile_at, link, costs).step_time_s)


def modelled_prediction(record: dict, profile_at: ProfileAt, link: AnyLink,
                        fixed: FixedCosts = NO_FIXED_COSTS) -> models.Prediction:
    """The layout's timing model's prediction with the record's fixed costs, whether or not
    the models cover its settings (`predict_record` asks that first)."""
    predicted = _layout_model(record, profile_at, link, fixed.per_action_s)
    if not (fixed.per_action_s or fixed.per_step_s):
        return predicted
    # what the actions' costs add to the step (their overlap counted), and the step's own
    actions = (predicted.step_time_s - _layout_model(record, profile_at, link, 0.0).step_time_s
               if fixed.per_action_s else 0.0)
    return replace(predicted, step_time_s=predicted.step_time_s + fixed.per_step_s,
                   fixed_cost_s=actions + fixed.per_step_s)


def _layout_model(record: dict, profile_at: ProfileAt, link: AnyLink,
                  action_s: float) -> models.Prediction:
    """The layout's timing model's prediction, as the model makes it (`action_s`: each
    action's fixed cost, for the multi-process pipelines)."""
    layout = layout_of(record["strategy"])
    options = record.get("strategy_options") or {}
    micro_batches = int(number(record.get("micro_batches")) or 1)
    ranks = int(number(record.get("world_size")) or 1)
    profile = profile_at(profiled_size(record))
    if layout is Layout.ONE_DEVICE:
        return models.single(profile, micro_batches)
    settings = settings_of(record)
    if layout is Layout.REPLICAS:
        return data_parallel.ddp(profile, ranks, link, shared_cores=_cores_shared(record),
                                 bucket_view=bool(settings.get("gradient_as_bucket_view")),
                                 zero=bool(settings.get("zero")))
    if layout in (Layout.SHARDED_REPLICAS, Layout.HYBRID_SHARDED):
        units = sharded_units(settings, workload_of(record), profile)
        if layout is Layout.SHARDED_REPLICAS:
            return data_parallel.fsdp(profile, ranks, link, units=units)
        return data_parallel.hsdp(profile, ranks, int(settings["shard_size"]), link,
                                  units=units)
    partition = partition_of(record, tuple(block.name for block in profile.blocks))
    # One process on emulated CPU devices hands a tensor on in memory; across GPUs, a copy.
    in_process = NO_LINK if record.get("device_kind") == "cpu" else link
    if layout is Layout.STAGES_IN_TURN:
        return models.model_parallel(profile, partition, in_process)
    if layout is Layout.TICK_PIPELINE:
        return models.tick_pipeline(profile, partition, micro_batches)
    if layout is Layout.SHARDED_PIPELINES:
        return sharded_pipelines(profile, partition, int(options["pipelines"]), micro_batches,
                                 link, action_s)
    scheduled = options_of(record["strategy"], options)  # its schedule: a preset option
    assert isinstance(scheduled, ScheduleOptions), layout
    return models.pipeline(scheduled.schedule, profile, partition, ranks, micro_batches, link,
                           action_s=action_s)


def settings_of(record: dict) -> dict:
    """Every setting the record's strategy ran with, defaults included (its
    `strategy_settings`); its options where it has none (a record from before settings were
    recorded, when ddp's and fsdp's defaults were torch's)."""
    settings = record.get("strategy_settings")
    return settings if isinstance(settings, dict) else dict(record.get("strategy_options") or {})


def sharded_units(settings: dict, workload: Workload, profile: Profile) -> data_parallel.Units:
    """The FSDP units `settings` ask for, over `profile`'s blocks: a unit per block, or the
    family's layer groups (`fsdp_units`); which reshard after forward
    (`reshard_after_forward`: yes, no, or every unit but the last, as fsdp shards them); and
    under the mixed-precision policy, parameters gathered in the workload's 16-bit dtype
    (BatchNorm's, which the policy gathers in fp32 as units of their own, at the same rate:
    they are 0.2% of resnet50's parameters)."""
    names = [block.name for block in profile.blocks]
    groups = workload.family.unit_names(names, str(settings.get("fsdp_units") or "block"))
    blocks = tuple(tuple(names.index(name) for name in group) for group in groups)
    reshard = resharded_after_forward(str(settings.get("reshard_after_forward") or "yes"),
                                      len(blocks))
    dtype = workload.autocast_dtype if settings.get("mixed_precision") else None
    return data_parallel.Units(blocks, tuple(reshard),
                               dtype.itemsize / 4 if dtype is not None else 1.0)


def profiled_size(record: dict) -> int:
    """The micro-batch size a record's prediction is made from: a data-parallel rank's share
    of the batch, else the record's micro-batch (the whole batch where it has none)."""
    layout = layout_of(record["strategy"])
    if layout is not None and layout.data_parallel:
        return int(record["global_batch"]) // int(number(record.get("world_size")) or 1)
    return int(number(record.get("split_size")) or record["global_batch"])


def _cores_shared(record: dict) -> bool:
    """Whether the record's ranks computed on every core of one CPU (emulated devices, as many
    threads as cores or more; a record that does not say how many cores it had is taken to
    use them all): then a collective's work takes the cores from the compute."""
    if not record.get("emulated") or record.get("device_kind") != "cpu":
        return False
    threads = int(number(record.get("threads_per_device")) or 1) * int(
        number(record.get("world_size")) or 1)
    cores = number(record.get("cpu_cores_available"))
    return cores is None or threads >= cores


def predicted_beside_measured(records: pd.DataFrame, profiler: Callable[[dict], ProfileAt],
                              link: AnyLink, costs_of: CostsOf | None = None) -> pd.DataFrame:
    """The run's measured records the models cover, each with its prediction (`profiler`
    gives a record's profiles, `costs_of` its fixed costs: none where not given):
    `prediction_error` is predicted / measured step time - 1 (negative: the model is too
    fast); `speedup_error` is the predicted speedup over the run's baseline against the
    measured one (see `_with_speedups`). Records left out are left_out's."""
    rows = []
    for _, record in records[records["status"] == "ok"].iterrows():
        measured = record.to_dict()
        try:
            # probed only once the record is known to be predicted: a probe is a measurement
            if predict_record(measured, profiler(measured), link) is None:
                continue
            fixed = costs_of(measured) if costs_of else NO_FIXED_COSTS
            predicted = predict_record(measured, profiler(measured), link, fixed)
        except MissingCollective:  # e.g. hsdp's groups where only N ranks were measured
            continue
        assert predicted is not None  # covered, as the same record was a line above
        profile = profiler(measured)(profiled_size(measured))
        rows.append({**measured, **_trace_check(measured, profiler(measured), link),
                     "predicted_step_time_s": predicted.step_time_s,
                     # the band the profile's own spread (its steps' quartiles) puts around it
                     "predicted_low_s": predicted.step_time_s * profile.step_low_ratio,
                     "predicted_high_s": predicted.step_time_s * profile.step_high_ratio,
                     "prediction_error": predicted.step_time_s
                     / measured["step_time_median_s"] - 1,
                     "predicted_fixed_cost_s": predicted.fixed_cost_s,
                     "fixed_cost_per_action_s": fixed.per_action_s or None,
                     "fixed_cost_per_step_s": fixed.per_step_s or None,
                     "fixed_cost_probe": fixed.probe or None,
                     "predicted_bubble_fraction": predicted.bubble,
                     "predicted_peak_memory_mib": list(predicted.peak_memory_mib),
                     "predicted_counted_memory_mib": list(predicted.counted_memory_mib),
                     "predicted_device_memory_mib": list(predicted.device_memory_mib),
                     "memory_error": _memory_error(predicted, measured),
                     "predicted_timeline": [list(span) for span in predicted.spans] or None})
    return _with_speedups(pd.DataFrame(rows))


def left_out(records: pd.DataFrame, table: pd.DataFrame, profiler: Callable[[dict], ProfileAt],
             link: AnyLink) -> pd.DataFrame:
    """Each measured (ok) record that `table` (predicted_beside_measured's) does not predict,
    with why in `not_predicted`: the collective its link lacks (measure it with `parbench
    collectives --into`), or what the models do not cover."""
    predicted = set(table["config_index"]) if "config_index" in table else set()
    rows = []
    for _, record in records[records["status"] == "ok"].iterrows():
        if record["config_index"] in predicted:
            continue
        measured = record.to_dict()
        try:
            predict_record(measured, profiler(measured), link)
            why = NOT_COVERED
        except MissingCollective as error:
            why = str(error)
        rows.append({**measured, "not_predicted": why})
    return pd.DataFrame(rows)


def _memory_error(predicted: models.Prediction, measured: dict) -> float | None:
    """The fullest device's predicted peak memory over its measured one, less 1, both as the
    measured figure counts it (predicted_as_measured)."""
    peak = number(measured.get("peak_memory_max_mib"))
    return max(predicted_as_measured(predicted, measured)) / peak - 1 if peak else None


def predicted_as_measured(predicted: models.Prediction, record: dict) -> tuple[float, ...]:
    """Each device's predicted peak as the record's memory figure counts it: counted tensors
    (without FSDP's gathered units) where parbench counted them, all of it where an
    allocator's peak was read (a GPU of its own)."""
    counted = str(record.get("memory_source") or "").startswith("tensors") or (
        record.get("device_kind") == "cpu" or bool(record.get("emulated")))
    return predicted.counted_memory_mib if counted else predicted.peak_memory_mib


def _with_speedups(table: pd.DataFrame) -> pd.DataFrame:
    """Each prediction's speedup over its baseline (single on the whole batch, as the run
    compares them: the same workload and batch), both predicted, beside the measured speedup,
    whose trials were paired by round. `speedup_error` = predicted / measured speedup - 1
    (positive: the model promises more than was measured); none for a baseline itself. Where
    the machine ran at another speed during the profiles than during the run, a step's error
    has that in it, its speedup's not (unless the profiles of two sizes drifted apart)."""
    if table.empty:
        return table
    records = [Record.from_dict(row) for row in table.to_dict("records")]
    keys = [comparison_key(record) for record in records]
    rates = (table["global_batch"] / table["predicted_step_time_s"]).tolist()
    baselines: dict[tuple, float] = {}
    for key, record, rate in zip(keys, records, rates, strict=True):
        if is_baseline(record):
            baselines.setdefault(key, rate)
    predicted = [None if is_baseline(record) or key not in baselines else rate / baselines[key]
                 for key, record, rate in zip(keys, records, rates, strict=True)]
    predicted = pd.Series(predicted, index=table.index, dtype=float)
    measured = table.get("speedup_vs_baseline", pd.Series(index=table.index, dtype=float))
    return table.assign(predicted_speedup=predicted,
                        speedup_error=predicted / measured.astype(float) - 1)


def _trace_check(record: dict, profile_at: ProfileAt, link: AnyLink) -> dict:
    """For a pipeline record with a measured timeline: the schedule model replayed with the
    timeline's own compute times, against the traced step (the profile left out)."""
    layout = layout_of(str(record["strategy"]))
    if layout is None or not layout.pipelined:
        return {}
    profile = profile_at(profiled_size(record))
    partition = partition_of(record, tuple(block.name for block in profile.blocks))
    checked = replayed_trace(record, profile.cut_bytes(partition), link)
    if checked is None:
        return {}
    replayed, traced = checked
    return dict(traced_step_s=traced, trace_replayed_step_s=replayed,
                trace_replay_error=replayed / traced - 1)
