"""A measured ddp step predicted at rank counts and on links one does not have: predict's ddp
model (buckets all-reduced as backward fills them, overlapped) run on the record's own measured
compute and gradient bytes. Every row is labelled `predicted` and kept apart from records."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from parbench.advisor.models import data_parallel
from parbench.advisor.models.links import Link
from parbench.advisor.profiling.profile import Profile

__all__ = ["project"]


def project(record: pd.Series, ranks: int, link: Link, profile: Profile) -> dict:
    """The record's ddp step at `ranks` ranks on `link`, the batch per rank fixed (weak
    scaling): predict's ddp model on the record's measured compute and gradient bytes
    (`profile`, of the same model at the same batch per rank, gives only the shape: when in
    backward each bucket is ready, and how the bytes fall into buckets). Beside it, its
    bounds: the whole all-reduce after compute (no overlap) or hidden behind it as far as it
    fits (full overlap)."""
    compute = record["compute_time_s"]
    step = data_parallel.ddp(_as_measured(profile, compute, record["allreduce_bytes"]), ranks,
                             link).step_time_s
    allreduce = link.allreduce_s(record["allreduce_bytes"], ranks)
    per_rank = record["global_batch"] / record["world_size"]
    no_overlap, full_overlap = compute + allreduce, max(compute, allreduce)
    return dict(
        kind="predicted", strategy=record["strategy"], model=record["model"],
        batch_per_rank=per_rank, from_run=record.get("run_id"),
        from_world_size=int(record["world_size"]), ranks=ranks, link=link.name,
        busbw_gbps=link.bandwidth_gbps, latency_us=link.latency_s * 1e6,
        compute_time_s=compute,
        allreduce_bytes=record["allreduce_bytes"], allreduce_time_s=allreduce,
        predicted_step_time_s=step, efficiency=compute / step,
        throughput_ips=ranks * per_rank / step,
        step_no_overlap_s=no_overlap, step_full_overlap_s=full_overlap,
        efficiency_no_overlap=compute / no_overlap, efficiency_full_overlap=compute / full_overlap)


def _as_measured(profile: Profile, compute_s: float, gradient_bytes: float) -> Profile:
    """`profile`'s shape at the record's measured compute time (the optimiser's step in it)
    and gradient bytes."""
    factor = gradient_bytes / profile.parameter_bytes
    timed = replace(profile.scaled_to(compute_s), optimizer_s=0.0)
    return replace(timed, blocks=tuple(
        replace(block, parameter_sizes=tuple(round(size * factor)
                                             for size in block.parameter_sizes))
        for block in timed.blocks))
