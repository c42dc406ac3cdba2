"""The links a prediction sends over: a named latency and bandwidth, or the curve `parbench
collectives` measured; each gives a point-to-point transfer's time and a ring collective's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from parbench.measure.collectives import bus_factor, interpolated_time_s

__all__ = ["AnyLink", "LINKS", "Link", "MeasuredLink", "MissingCollective", "NO_LINK",
           "links_help", "named_link", "ring_allreduce_s"]

# Common links as typically achieved, not their peak: (bus bandwidth in GB/s, latency of one
# message in s), what a reader without the hardware can predict for. Bandwidths: nccl-tests'
# all-reduce busbw on 8 H100s over NVLink (about 370 GB/s, nccl-tests#212), PCIe 4 x16 and
# 100 Gb Ethernet at about 80% of their line rate. Latencies: NCCL's send/receive between two
# NVLink H100s about 3 us (NVIDIA/nccl#1487) and a 2-rank all-reduce of 128 bytes about 6 us
# (NVIDIA/nccl#1259, two messages); across nodes a 128-byte all-reduce took 62 us
# (NVIDIA/nccl#1453), so about 30 us a message; PCIe's 10 us is assumed between the two.
LINKS = {"nvlink4": (370.0, 3e-6), "pcie4": (25.0, 10e-6), "ethernet100": (12.0, 30e-6)}


def ring_allreduce_s(size_bytes: float, ranks: int, busbw_gbps: float,
                     latency_s: float = 0.0) -> float:
    """A ring all-reduce of `size_bytes` on `ranks`: 2(n-1) messages in a row, and each link
    carries 2(n-1)/n of the bytes (Thakur, Rabenseifner and Gropp 2005)."""
    return _ring_s("all_reduce", size_bytes, ranks, busbw_gbps, latency_s)


def _ring_s(name: str, size_bytes: float, ranks: int, busbw_gbps: float,
            latency_s: float) -> float:
    """`name` in a ring: (n-1) messages for a gather or a scatter, 2(n-1) for an all-reduce,
    each paying the latency; the bytes at the bus bandwidth (nccl-tests' bus factor)."""
    if ranks < 2:
        return 0.0
    factor = bus_factor(name, ranks)
    messages = round(factor * ranks)  # 2(n-1) or n-1
    return messages * latency_s + factor * size_bytes / (busbw_gbps * 1e9)


@dataclass(frozen=True)
class Link:
    """A link of `bandwidth_gbps` bus bandwidth (GB/s) and `latency_s` a message: a transfer
    of n bytes takes latency + n / bandwidth; a ring collective pays the latency once for each
    of its messages in a row (LINKS: typical achieved values)."""

    name: str
    bandwidth_gbps: float
    latency_s: float = 0.0

    def transfer_s(self, size_bytes: float) -> float:
        return self.latency_s + size_bytes / (self.bandwidth_gbps * 1e9)

    def allreduce_s(self, size_bytes: float, ranks: int) -> float:
        return ring_allreduce_s(size_bytes, ranks, self.bandwidth_gbps, self.latency_s)

    def collective_s(self, name: str, size_bytes: float, ranks: int) -> float:
        """`name` (all_gather, reduce_scatter) of `size_bytes` in all (nccl-tests' size)."""
        return _ring_s(name, size_bytes, ranks, self.bandwidth_gbps, self.latency_s)

    def describe(self) -> str:
        latency = f", {self.latency_s * 1e6:g} us a message" if self.latency_s else ""
        return f"{self.name} ({self.bandwidth_gbps:g} GB/s{latency})"


def links_help() -> str:
    """The named links as a command's help lists them."""
    return ", ".join(f"{name} (~{bandwidth:g} GB/s, {latency * 1e6:g} us)"
                     for name, (bandwidth, latency) in LINKS.items())


def named_link(text: str) -> Link:
    """A name in LINKS, or a bus bandwidth in GB/s (no latency); a ValueError that says what
    to give otherwise."""
    if text in LINKS:
        return Link(text, *LINKS[text])
    try:
        bandwidth = float(text)
    except ValueError:
        bandwidth = 0.0
    if not bandwidth > 0:
        raise ValueError(f"--link {text!r}: give measured, {', '.join(LINKS)}, or a bus "
                         "bandwidth in GB/s above 0")
    return Link(f"{bandwidth:g} GB/s", bandwidth)


class MissingCollective(ValueError):
    """A measured link has no row for a collective's world size (a ValueError, as before)."""


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

    def describe(self) -> str:
        return self.name

    def _time(self, collective: str, size_bytes: float, ranks: int) -> float:
        rows = [r for r in self.rows if r["world_size"] == ranks
                and self.backend in (None, r["backend"])]
        time_s = interpolated_time_s(rows, collective, size_bytes)
        if time_s is None:
            on = f" on {self.backend}" if self.backend else ""
            raise MissingCollective(f"{self.name}: no {ranks}-rank {collective} was measured{on}; "
                             f"run parbench collectives --collective {collective} on {ranks} "
                             "devices")
        return time_s


AnyLink = Union[Link, MeasuredLink]  # noqa: UP007 (a runtime alias)
NO_LINK = Link("none (one process)", float("inf"))
