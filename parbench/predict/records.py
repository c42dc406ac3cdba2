"""Measured records beside their predictions: for every cut-model configuration a run measured
(single, model-parallel, the pipelines), the step the timing model predicts from a profile of
the same device, and the prediction's error against the measurement."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from parbench.predict import data_parallel, models
from parbench.predict.links import AnyLink
from parbench.predict.profile import Profile
from strategies.partition import Partition
from strategies.pipeline_schedules import SCHEDULES

__all__ = ["PREDICTED_COLUMNS", "partition_of", "predict_record", "predicted_beside_measured"]

# The columns a prediction adds beside a record's own.
PREDICTED_COLUMNS = ("predicted_step_time_s", "prediction_error", "predicted_bubble_fraction",
                     "predicted_peak_memory_mib", "predicted_timeline")
ProfileAt = Callable[[int], Profile]  # the profile at a micro-batch size


def partition_of(record: dict, block_names: tuple[str, ...]) -> Partition:
    """The cut a record names ("stem..layer2.3 | layer3.0..head") as a Partition."""
    firsts = [part.strip().split("..")[0] for part in record["partition"].split("|")]
    return Partition(block_names, tuple(block_names.index(name) for name in firsts),
                     record.get("strategy_options", {}).get("balance", "recorded"))


def predict_record(record: dict, profile_at: ProfileAt,
                   link: AnyLink) -> models.Prediction | None:
    """The prediction for a measured record's configuration; None for a strategy the timing
    models do not cover (yet: nn.DataParallel, fsdp's mixed precision)."""
    strategy = record["strategy"]
    split = _number(record.get("split_size"))
    micro_batches = int(_number(record.get("micro_batches")) or 1)
    if strategy == "single":
        return models.single(profile_at(int(split or record["global_batch"])), micro_batches)
    if strategy == "ddp":
        ranks = int(record["world_size"])
        return data_parallel.ddp(profile_at(int(record["global_batch"]) // ranks), ranks, link)
    if strategy == "fsdp":
        ranks = int(record["world_size"])
        options = record.get("strategy_options") or {}
        if options.get("mixed_precision"):
            return None  # the profile is of fp32 parameters; a policy's casts are not modelled
        return data_parallel.fsdp(profile_at(int(record["global_batch"]) // ranks), ranks, link,
                                  reshard=options.get("reshard_after_forward") != "no")
    if strategy not in ("model-parallel", "pipeline") and not strategy.startswith("pipeline-"):
        return None
    profile = profile_at(int(split or record["global_batch"]))
    partition = partition_of(record, tuple(block.name for block in profile.blocks))
    if strategy == "model-parallel":
        return models.model_parallel(profile, partition, link)
    if strategy == "pipeline":
        return models.tick_pipeline(profile, partition, micro_batches)
    schedule = strategy.removeprefix("pipeline-")
    if schedule not in SCHEDULES:
        return None
    return models.pipeline(schedule, profile, partition, int(record["world_size"]),
                           micro_batches, link)


def predicted_beside_measured(records: pd.DataFrame, profile_at: ProfileAt,
                              link: AnyLink) -> pd.DataFrame:
    """The run's measured cut-model records, each with its prediction: `prediction_error` is
    predicted / measured step time - 1 (negative: the model is too fast)."""
    rows = []
    for _, record in records[records["status"] == "ok"].iterrows():
        predicted = predict_record(record.to_dict(), profile_at, link)
        if predicted is None:
            continue
        measured = record["step_time_median_s"]
        rows.append({**record.to_dict(),
                     "predicted_step_time_s": predicted.step_time_s,
                     "prediction_error": predicted.step_time_s / measured - 1,
                     "predicted_bubble_fraction": predicted.bubble,
                     "predicted_peak_memory_mib": list(predicted.peak_memory_mib),
                     "predicted_timeline": [list(span) for span in predicted.spans] or None})
    return pd.DataFrame(rows)


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)
