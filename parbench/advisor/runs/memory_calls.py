"""Each configuration of a run with a memory limit (an emulated device's, a GPU's cap, or a
GPU's own memory), called from its predicted per-device peak (fits, or runs out of memory)
with nothing the run measured, beside what happened."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from parbench.advisor.models.links import AnyLink, MissingCollective
from parbench.advisor.profiling.profile import Profile
from parbench.advisor.runs.fields import number
from parbench.advisor.runs.records import ProfileAt, predict_record, profiled_size
from parbench.families import family_of
from parbench.strategies.partition import Partition, partition_by_cost
from parbench.strategies.stages import micro_batch_sizes

__all__ = ["MEMORY_CALLS_FILE", "calls_summary", "memory_calls"]

MEMORY_CALLS_FILE = "memory_calls.csv"
FITS, OUT = "fits", "out of memory"


def memory_limit(record: dict) -> tuple[float | None, str]:
    """(the limit each device had in MiB, what the call compares with it): an emulated
    device's counted tensors (--device-memory-mib); under --memory-cap-mib, what a GPU's
    caching allocator reserves (the cap limits that); else all a GPU of its own holds against
    its memory; (None, "") where the run had no limit a call is made for."""
    counted_limit = number(record.get("device_memory_mib"))
    if counted_limit:
        return counted_limit, "counted"
    if record.get("device_kind") != "cuda":
        return None, ""
    cap = number(record.get("memory_cap_mib"))
    if cap:
        return cap, "reserved"
    total = _gpu_memory_gib(record.get("gpu_memory_gib"))
    if total and not record.get("emulated"):  # emulated devices share one GPU's memory
        return total * 1024, "device"
    return None, ""


def _gpu_memory_gib(value) -> float | None:
    """The first GPU's memory from the environment's field ("79.2", or "79.2;79.2" for
    several GPUs; each rank's is its own card's, and a run's cards are alike)."""
    first = number(str(value).split(";")[0])
    return first if first else None


def as_planned(record: dict, profile: Profile) -> dict:
    """The record's configuration as a prediction made before it ran sees it: its cut as its
    options plan it (where it ran out before recording the one it made) and its micro-batches
    from its options."""
    options = record.get("strategy_options")
    options = options if isinstance(options, dict) else {}
    planned = dict(record)
    split = number(record.get("split_size"))
    if split:
        share = int(record["global_batch"]) // int(options.get("pipelines") or 1)
        planned["micro_batches"] = len(micro_batch_sizes(share, int(split)))
    stages = options.get("stages")
    if stages and not isinstance(record.get("partition"), str):
        pieces = int(stages) * int(options.get("stages_per_rank") or 1)  # V a rank, if several
        planned["partition"] = _planned_cut(record, profile, pieces).describe()
    return planned


def _planned_cut(record: dict, profile: Profile, stages: int) -> Partition:
    names = [block.name for block in profile.blocks]
    balance = (record.get("strategy_options") or {}).get("balance", "time")
    if balance == "tutorial":
        cut = names.index(family_of(record["model"]).tutorial_cut(names))
        return Partition(tuple(names), (0, cut), balance)
    costs = ([b.parameter_bytes for b in profile.blocks] if balance == "params" else
             [b.forward_s + b.input_grad_s + b.weight_grad_s for b in profile.blocks])
    return partition_by_cost(names, costs, stages, balance)


def memory_calls(records: pd.DataFrame, profiler: Callable[[dict], ProfileAt],
                 link: AnyLink) -> pd.DataFrame:
    """A row for each configuration that ran (or ran out) under a memory limit and that the
    models cover: its predicted fullest device, the call, what happened, whether the call was
    right, and the fullest device measured (where it ran)."""
    rows = []
    for _, row in records[records["status"].isin(["ok", "oom"])].iterrows():
        record = row.to_dict()
        limit, compared = memory_limit(record)
        if limit is None:
            continue
        profile_at = profiler(record)
        planned = as_planned(record, profile_at(profiled_size(record)))
        try:
            predicted = predict_record(planned, profile_at, link)
        except MissingCollective:
            continue
        if predicted is None:
            continue
        per_device = {"counted": predicted.counted_memory_mib,
                      "reserved": predicted.reserved_memory_mib,
                      "device": predicted.device_memory_mib}[compared]
        call = FITS if max(per_device) <= limit else OUT
        outcome = FITS if record["status"] == "ok" else OUT
        rows.append(dict(
            strategy=record["strategy"], strategy_options=record.get("strategy_options"),
            model=record["model"], image_size=record["image_size"],
            global_batch=record["global_batch"], devices=record.get("devices"),
            limit_mib=limit, compared=compared, predicted_fullest_mib=max(per_device),
            call=call, outcome=outcome, right=call == outcome,
            measured_fullest_mib=record.get("peak_memory_max_mib")))
    return pd.DataFrame(rows)


def calls_summary(calls: pd.DataFrame) -> str | None:
    """One line: how many calls were right, of each kind (None: no configuration was called)."""
    if calls.empty:
        return None
    wrong = calls[~calls["right"]]
    said = "; wrong: " + ", ".join(
        f"{r.strategy} batch {r.global_batch} (called {r.call}, predicted "
        f"{r.predicted_fullest_mib:.0f} MiB of {r.limit_mib:.0f})" for r in wrong.itertuples()
    ) if len(wrong) else ""
    ran_out = int((calls["outcome"] == OUT).sum())
    return (f"{int(calls['right'].sum())} of {len(calls)} calls right ({ran_out} ran out of "
            f"memory, {len(calls) - ran_out} fit; called before running, from the profile "
            f"alone){said}")
