"""A DDP step projected to ranks and links one does not have: the measured compute per step
and gradient bytes, and a link's bus bandwidth, under the ring all-reduce model. Projections
are never records: they are labelled `projected` and kept apart."""

from __future__ import annotations

import pandas as pd

from parbench.measure.collectives import bus_factor, interpolated_time_s

__all__ = ["LINKS", "measured_allreduce_s", "measured_busbw_gbps", "project",
           "ring_allreduce_s"]

# Bus bandwidth of common links in GB/s, as typically achieved (not the links' peak): what a
# reader without the hardware can project onto.
LINKS = {"nvlink4": 370.0, "pcie4": 25.0, "ethernet100": 12.0}


def ring_allreduce_s(size_bytes: float, ranks: int, busbw_gbps: float) -> float:
    """A ring all-reduce of `size_bytes` on `ranks`: each link carries 2(n-1)/n of it."""
    if ranks < 2:
        return 0.0
    return bus_factor("all_reduce", ranks) * size_bytes / (busbw_gbps * 1e9)


def measured_allreduce_s(collectives: list[dict], record: pd.Series) -> float | None:
    """The time of one all-reduce of the record's gradient bytes as `parbench collectives`
    measured it on the record's devices, ranks and backend (interpolated between message
    sizes); None where it was not measured there."""
    rows = [r for r in collectives if r["world_size"] == record.get("world_size")
            and r["backend"] == record.get("backend") and r["devices"] == record["devices"]]
    size = record.get("allreduce_bytes")
    if size is None or pd.isna(size):
        return None
    return interpolated_time_s(rows, "all_reduce", size)


def measured_busbw_gbps(collectives: list[dict], record: pd.Series) -> float | None:
    """The all-reduce bus bandwidth measured on the record's ranks and backend, at the
    record's gradient size (see `measured_allreduce_s`)."""
    time_s = measured_allreduce_s(collectives, record)
    if time_s is None:
        return None
    return (record["allreduce_bytes"] / time_s / 1e9
            * bus_factor("all_reduce", int(record["world_size"])))


def project(record: pd.Series, ranks: int, link: str, busbw_gbps: float) -> dict:
    """The record's step at `ranks` ranks on a link of `busbw_gbps`, with the batch per rank
    fixed (weak scaling): its compute, plus an all-reduce of its gradient with no overlap,
    or hidden behind compute as far as it fits (full overlap)."""
    compute = record["compute_time_s"]
    allreduce = ring_allreduce_s(record["allreduce_bytes"], ranks, busbw_gbps)
    per_rank = record["global_batch"] / record["world_size"]
    no_overlap, full_overlap = compute + allreduce, max(compute, allreduce)
    return dict(
        kind="projected", strategy=record["strategy"], model=record["model"],
        batch_per_rank=per_rank, from_run=record.get("run_id"),
        from_world_size=int(record["world_size"]), ranks=ranks, link=link,
        busbw_gbps=busbw_gbps, compute_time_s=compute, allreduce_bytes=record["allreduce_bytes"],
        allreduce_time_s=allreduce, step_no_overlap_s=no_overlap,
        step_full_overlap_s=full_overlap,
        efficiency_no_overlap=compute / no_overlap, efficiency_full_overlap=compute / full_overlap,
        throughput_no_overlap_ips=ranks * per_rank / no_overlap,
        throughput_full_overlap_ips=ranks * per_rank / full_overlap)
