"""Every modelled strategy predicted for N devices like the profiled one on a link: a table,
fastest first, every row labelled predicted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pandas as pd

from parbench.advisor.models import data_parallel, models
from parbench.advisor.models.links import NO_LINK, AnyLink
from parbench.advisor.models.sharded_pipelines import sharded_pipelines
from parbench.advisor.profiling.profile import Profile
from parbench.advisor.runs.records import sharded_units
from parbench.families.workloads import Workload
from parbench.strategies import layout_of
from parbench.strategies.ddp import DDPOptions
from parbench.strategies.fsdp import RESHARD, FSDPOptions
from parbench.strategies.partition import Partition, partition_by_cost
from parbench.strategies.schedules import SCHEDULES
from parbench.strategies.stages import resolve_split

__all__ = ["above_ideal_notes", "predict_sweep", "with_causes"]


def _balanced(profile: Profile, stages: int) -> Partition:
    names = [block.name for block in profile.blocks]
    costs = [b.forward_s + b.input_grad_s + b.weight_grad_s for b in profile.blocks]
    return partition_by_cost(names, costs, stages)


def _row(predicted: models.Prediction, devices: int, split: int | None,
         micro_batches: int | None, partition: Partition | None = None,
         options: dict | None = None) -> dict:
    """A predicted layout, with the `parbench run` options that reproduce it."""
    return dict(kind=predicted.kind, strategy=predicted.strategy, devices=devices,
                split_size=split, micro_batches=micro_batches,
                partition=partition.describe() if partition else None,
                options=options or {},
                step_time_s=predicted.step_time_s, throughput_ips=predicted.throughput_ips,
                bubble_or_exposed_comm=predicted.bubble,
                peak_memory_max_mib=max(predicted.peak_memory_mib),
                counted_memory_max_mib=max(predicted.counted_memory_mib),
                reserved_memory_max_mib=max(predicted.reserved_memory_mib),
                device_memory_max_mib=max(predicted.device_memory_mib))


def _pipelines(profile: Profile, devices: int, micro_batches: int,
               link: AnyLink) -> tuple[list[dict], list[str]]:
    rows, refused = [], []
    split = profile.micro_batch
    cut = _balanced(profile, devices)
    # Cut at equal profiled time, as `--balance time` cuts.
    timed = dict(split_size=split, balance="time")
    rows.append(_row(models.tick_pipeline(profile, cut, micro_batches), devices, split,
                     micro_batches, cut, timed))
    for name, schedule in SCHEDULES.items():
        pieces = devices * (2 if schedule.multi_stage else 1)
        try:
            partition = _balanced(profile, pieces)
            predicted = models.pipeline(name, profile, partition, devices, micro_batches, link)
        except Exception as error:  # noqa: BLE001 (torch refuses a schedule's shape its way)
            refused.append(f"pipeline-{name} at split {split}: {error}")
            continue
        rows.append(_row(predicted, devices, split, micro_batches, partition, timed))
    return rows, refused


def _sharded_pipelines(profile: Profile, devices: int, global_batch: int,
                       link: AnyLink) -> tuple[list[dict], list[str]]:
    """pipeline-fsdp at every count of pipelines P (2 or more, of 2 stages or more) whose
    1/P of the batch the profiled micro-batch divides."""
    rows, refused, split = [], [], profile.micro_batch
    for pipelines in range(2, devices // 2 + 1):
        if devices % pipelines:
            continue
        share = global_batch // pipelines
        if global_batch % pipelines or share % split:
            refused.append(f"pipeline-fsdp with {pipelines} pipelines at split {split}: batch "
                           f"{global_batch} does not split into equal micro-batches of {split}")
            continue
        cut = _balanced(profile, devices // pipelines)
        try:
            predicted = sharded_pipelines(profile, cut, pipelines, share // split, link)
        except Exception as error:  # noqa: BLE001 (torch refuses a schedule's shape its way)
            refused.append(f"pipeline-fsdp with {pipelines} pipelines at split {split}: {error}")
            continue
        rows.append(_row(predicted, devices, split, share // split, cut,
                         dict(split_size=split, balance="time", pipelines=pipelines)))
    return rows, refused


def _data_parallel_rows(per_rank: Profile, devices: int, link: AnyLink,
                        workload: Workload) -> list[dict]:
    """ddp (and with ZeRO), fsdp at each choice of which units reshard after forward, and hsdp
    at every shard size that leaves two replicas or more: each at parbench's defaults
    otherwise (DDP's gradients as bucket views; FSDP's units and mixed precision as
    `parbench run` sets them for the workload)."""
    link = link if devices > 1 else NO_LINK
    views = DDPOptions().gradient_as_bucket_view
    rows = [_row(data_parallel.ddp(per_rank, devices, link, bucket_view=views), devices, None,
                 None)]
    if devices > 1:
        rows.append(_row(data_parallel.ddp(per_rank, devices, link, bucket_view=views,
                                           zero=True), devices, None, None,
                         options=dict(zero=True)))
    default = FSDPOptions().reshard_after_forward
    for reshard in RESHARD:
        units = _units(per_rank, workload, reshard)
        rows.append(_row(data_parallel.fsdp(per_rank, devices, link, units=units), devices,
                         None, None, options={} if reshard == default
                         else dict(reshard_after_forward=reshard)))
    for shard in range(2, devices // 2 + 1):
        if devices % shard == 0:
            rows.append(_row(data_parallel.hsdp(per_rank, devices, shard, link,
                                                units=_units(per_rank, workload, default)),
                             devices, None, None, options=dict(shard_size=shard)))
    return rows


def _units(profile: Profile, workload: Workload, reshard: str) -> data_parallel.Units:
    """The FSDP units `parbench run` shards the workload in, resharding as `reshard` says."""
    options = FSDPOptions(reshard_after_forward=reshard).for_workload(workload)
    return sharded_units(dataclasses.asdict(options), workload, profile)


def predict_sweep(devices: int, global_batch: int, splits: Sequence[int],
                  profile_at: Callable[[int], Profile], link: AnyLink,
                  workload: Workload) -> pd.DataFrame:
    """single (whole batch, and accumulating each split), model-parallel, the tutorial's
    pipeline and every schedule at each split on `devices` devices, pipeline-fsdp at each
    count of pipelines, ddp (and ZeRO), fsdp (resharding or not) and hsdp at each shard size:
    predicted, fastest first, with the speedup over single. Stages are cut at equal profiled
    time (not the tutorial's cut, which parbench run uses on 2 devices by default). A schedule
    torch refuses for a shape is listed in the table's attrs["refused"] with torch's reason."""
    if devices < 1 or global_batch < devices:
        raise ValueError(f"need at least 1 device and a global batch of at least one image per "
                         f"device, got {devices} devices and batch {global_batch}")
    whole = profile_at(global_batch)
    rows = [_row(models.single(whole, 1), 1, None, None)]
    refused = []
    if devices > 1:
        cut = _balanced(whole, devices)
        rows.append(_row(models.model_parallel(whole, cut, link), devices, None, None, cut,
                         dict(balance="time")))
    for split in splits or [resolve_split(global_batch, None, devices)[0]]:
        if global_batch % split:
            refused.append(f"split {split}: does not divide batch {global_batch} (unequal "
                           "micro-batches are not modelled)")
            continue
        profile = profile_at(split)
        micro_batches = global_batch // split
        rows.append(_row(models.single(profile, micro_batches), 1, split, micro_batches,
                         options=dict(accumulation_split=split)))
        if devices > 1:
            found, why = _pipelines(profile, devices, micro_batches, link)
            rows, refused = rows + found, refused + why
        if devices >= 4:
            found, why = _sharded_pipelines(profile, devices, global_batch, link)
            rows, refused = rows + found, refused + why
    if global_batch % devices:
        refused.append(f"ddp, fsdp, hsdp: batch {global_batch} does not split over {devices} "
                       "ranks")
    else:
        rows += _data_parallel_rows(profile_at(global_batch // devices), devices, link,
                                    workload)
    table = with_causes(pd.DataFrame(rows), global_batch, devices, profile_at)
    table = table.sort_values("throughput_ips", ascending=False, ignore_index=True)
    table.attrs["refused"] = refused
    return table


def _data_parallel(strategy: str) -> bool:
    layout = layout_of(strategy)
    return layout is not None and layout.data_parallel


def with_causes(table: pd.DataFrame, global_batch: int, devices: int,
                profile_at: Callable[[int], Profile]) -> pd.DataFrame:
    """The speedup over single on the whole batch (`profile_at`: one device's profiles) split
    into its causes, as parbench run splits a measured one: the micro-batch effect (single
    accumulating the images a device works on at once, against the whole batch) x the
    parallel effect (the rest)."""
    per_device = [int(split) if pd.notna(split) else
                  global_batch // devices if _data_parallel(strategy) else global_batch
                  for strategy, split in zip(table["strategy"], table["split_size"], strict=True)]
    single = models.single(profile_at(global_batch), 1).throughput_ips
    rate = {size: models.single(profile_at(size), global_batch // size).throughput_ips
            for size in set(per_device)}
    speedup = table["throughput_ips"] / single
    micro_batch = pd.Series([rate[size] / single for size in per_device], index=table.index)
    return table.assign(speedup_vs_single=speedup, micro_batch_effect=micro_batch,
                        parallel_effect=speedup / micro_batch)


def above_ideal_notes(table: pd.DataFrame, devices: int) -> list[str]:
    """A line for each predicted speedup above the device count, naming its cause."""
    return [f"{row.strategy} at {row.speedup_vs_single:.2f}x is above the {devices} devices: "
            f"the {row.micro_batch_effect:.2f}x micro-batch effect (a device works on fewer "
            f"images at once, which this device's profile runs faster per image) x "
            f"{row.parallel_effect:.2f}x from parallelism"
            for row in table.itertuples() if row.speedup_vs_single > devices]
