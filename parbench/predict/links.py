"""The links a prediction sends over: a named bandwidth, or the curve `parbench collectives`
measured; each gives a point-to-point transfer's time and a ring all-reduce's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from parbench.measure.collectives import bus_factor, interpolated_time_s

__all__ = ["AnyLink", "LINKS", "Link", "MeasuredLink", "NO_LINK", "ring_allreduce_s"]

# Bus bandwidth of common links in GB/s, as typically achieved (not the links' peak): what a
# reader without the hardware can predict for.
LINKS = {"nvlink4": 370.0, "pcie4": 25.0, "ethernet100": 12.0}


def ring_allreduce_s(size_bytes: float, ranks: int, busbw_gbps: float) -> float:
    """A ring all-reduce of `size_bytes` on `ranks`: each link carries 2(n-1)/n of it."""
    if ranks < 2:
        return 0.0
    return bus_factor("all_reduce", ranks) * size_bytes / (busbw_gbps * 1e9)


@dataclass(frozen=True)
class Link:
    """A link of `bandwidth_gbps` bus bandwidth (GB/s), without latency: a transfer of n bytes
    takes n / bandwidth, a ring all-reduce 2(N-1)/N of that (LINKS: typical achieved values)."""

    name: str
    bandwidth_gbps: float

    def transfer_s(self, size_bytes: float) -> float:
        return size_bytes / (self.bandwidth_gbps * 1e9)

    def allreduce_s(self, size_bytes: float, ranks: int) -> float:
        return ring_allreduce_s(size_bytes, ranks, self.bandwidth_gbps)

    def collective_s(self, name: str, size_bytes: float, ranks: int) -> float:
        """`name` (all_gather, reduce_scatter) of `size_bytes` in all (nccl-tests' size)."""
        if ranks < 2:
            return 0.0
        return bus_factor(name, ranks) * size_bytes / (self.bandwidth_gbps * 1e9)


@dataclass(frozen=True)
class MeasuredLink:
    """The link `parbench collectives` measured (its rows): a transfer of n bytes takes what a
    2-rank all-gather of 2n bytes took (n each way); an all-reduce, what it took on as many
    ranks (both interpolated between the measured sizes)."""

    name: str
    rows: tuple[dict, ...] = field(repr=False)
    backend: str | None = None  # only the rows measured on this process group's backend

    def transfer_s(self, size_bytes: float) -> float:
        return self._time("all_gather", 2 * size_bytes, 2)

    def allreduce_s(self, size_bytes: float, ranks: int) -> float:
        return self.collective_s("all_reduce", size_bytes, ranks)

    def collective_s(self, name: str, size_bytes: float, ranks: int) -> float:
        return 0.0 if ranks < 2 else self._time(name, size_bytes, ranks)

    def _time(self, collective: str, size_bytes: float, ranks: int) -> float:
        rows = [r for r in self.rows if r["world_size"] == ranks
                and self.backend in (None, r["backend"])]
        time_s = interpolated_time_s(rows, collective, size_bytes)
        if time_s is None:
            on = f" on {self.backend}" if self.backend else ""
            raise ValueError(f"{self.name}: no {ranks}-rank {collective} was measured{on}; "
                             f"run parbench collectives --collective {collective} on {ranks} "
                             "devices")
        return time_s


AnyLink = Union[Link, MeasuredLink]  # noqa: UP007 (a runtime alias)
NO_LINK = Link("none (one process)", float("inf"))
