"""A record's collectives as `parbench collectives` measured them on its devices, ranks and
backend: one all-reduce of its gradient bytes, and the bus bandwidth that makes."""

from __future__ import annotations

import pandas as pd

from parbench.measure.collectives import bus_factor, interpolated_time_s

__all__ = ["measured_allreduce_s", "measured_busbw_gbps"]


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
