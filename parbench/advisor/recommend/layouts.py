"""Every layout parbench can run for a workload and batch on the devices at hand, as the
configurations a sweep would measure, each predicted as `parbench predict` predicts a run's
record of it (its profile slowed by the devices sharing a CPU, its link, its planned cut)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace

import pandas as pd

from parbench.advisor.models.links import AnyLink
from parbench.advisor.profiling.fixed_costs import NO_FIXED_COSTS
from parbench.advisor.recommend.predicted_sweep import with_causes
from parbench.advisor.runs.memory_calls import as_planned
from parbench.advisor.runs.records import CostsOf, ProfileAt, predict_record, profiled_size
from parbench.drive.runner import planned_fields
from parbench.families.workloads import Workload
from parbench.machine.devices import DeviceSet, cpu_cores
from parbench.plan.config import Config, expand_sweep
from parbench.strategies import layout_of
from parbench.strategies.fsdp import RESHARD

__all__ = ["candidate_configs", "option_grid", "predicted_layouts"]


def option_grid(devices: int, splits: Sequence[int]) -> list[dict]:
    """Every option combination a layout on `devices` devices takes: micro-batch sizes (as
    pipelines and accumulation split them), pipelines side by side, shard groups, ZeRO, and
    which FSDP units reshard after forward (each strategy keeps the options it knows; the
    rest at parbench's defaults, as `parbench run` runs them)."""
    groups: list[int | None] = [size for size in range(2, devices // 2 + 1)
                                if devices % size == 0] or [None]
    sizes: list[int | None] = [None, *splits]  # None: the whole batch at once
    return [dict(split_size=split, accumulation_split=split, pipelines=group, shard_size=group,
                 zero=zero, reshard_after_forward=reshard)
            for split, group, zero, reshard in itertools.product(
                sizes, groups, (False, True), RESHARD)]


def candidate_configs(workload: Workload, global_batch: int, devices: DeviceSet,
                      splits: Sequence[int], strategies: Sequence[str],
                      **common) -> list[Config]:
    """Each layout of `strategies` on `devices` (and single on the first alone) that the plan
    runs here, once: defaults where an option does not apply to it."""
    configs = expand_sweep(
        strategy=strategies, model=[workload.model], global_batch=[global_batch],
        image_size=[workload.image_size], precision=[workload.precision],
        devices=[devices], options=option_grid(len(devices), splits),
        num_classes=workload.num_classes, **common)
    runnable, seen = [], set()
    for config in configs:
        options = {k: v for k, v in config.options.items() if v not in (None, False)}
        config = replace(config, options=options)
        if config.key() in seen or not config.plan.runs:
            continue
        seen.add(config.key())
        runnable.append(config)
    return runnable


def predicted_layouts(configs: Sequence[Config], profiler: Callable[[dict], ProfileAt],
                      link: AnyLink, costs_of: CostsOf | None = None) -> pd.DataFrame:
    """Each configuration's predicted step and memory, fastest first, in
    parbench.advisor.recommend.predicted_sweep's columns (with `options`, the configuration's
    own, and its `config_key`), with the fixed costs `costs_of` gives (none where not given);
    those the models do not cover are listed in attrs["refused"]."""
    rows, refused = [], []
    for config in configs:
        record = dict(planned_fields(config), cpu_cores_available=cpu_cores())
        profile_at = profiler(record)
        planned = as_planned(record, profile_at(profiled_size(record)))
        try:
            fixed = costs_of(planned) if costs_of else NO_FIXED_COSTS
            predicted = predict_record(planned, profile_at, link, fixed)
        except Exception as error:  # noqa: BLE001 (torch refuses a schedule's shape its way)
            refused.append(f"{config.label()}: {error}")
            continue
        if predicted is None:
            refused.append(f"{config.label()}: not modelled")
            continue
        layout = layout_of(config.strategy)
        rows.append(dict(
            kind=predicted.kind, strategy=config.strategy, config_key=config.key(),
            devices=len(config.used_devices), split_size=planned.get("split_size"),
            micro_batches=planned.get("micro_batches"), partition=planned.get("partition"),
            options=dict(config.options), step_time_s=predicted.step_time_s,
            throughput_ips=predicted.throughput_ips,
            bubble_or_exposed_comm=predicted.bubble, fixed_cost_s=predicted.fixed_cost_s,
            peak_memory_max_mib=max(predicted.peak_memory_mib),
            counted_memory_max_mib=max(predicted.counted_memory_mib),
            reserved_memory_max_mib=max(predicted.reserved_memory_mib),
            device_memory_max_mib=max(predicted.device_memory_mib),
            data_parallel=layout is not None and layout.data_parallel))
    if not rows:
        return pd.DataFrame(rows)
    first = configs[0]
    single = dict(planned_fields(replace(first, strategy="single", options={})),
                  cpu_cores_available=cpu_cores())
    alone = profiler(single)  # one device: nothing shares it
    table = with_causes(pd.DataFrame(rows), first.global_batch, len(first.devices), alone)
    table = table.sort_values("throughput_ips", ascending=False, ignore_index=True)
    table.attrs["refused"] = refused
    return table
