"""Communication figures: a data-parallel step's compute and exposed communication, collective
bandwidth, and projections (labelled PROJECTED)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from parbench import strategies
from parbench.plots.common import (
    LINE_STYLES,
    MARKERS,
    PALETTE,
    config_label,
    panel_groups,
    save_figure,
    strategy_colour,
    strategy_hatch,
    title,
    with_interval,
)
from parbench.results.collectives import measured_allreduce_s

__all__ = ["COLLECTIVES_FIGURE", "plot_collectives", "plot_communication",
           "write_collectives_figure"]


COLLECTIVES_FIGURE = "collective-bandwidth-by-size"


def plot_communication(frame: pd.DataFrame, collectives: Sequence[dict] = ()):
    """Each data-parallel record's median step as compute (the same steps with communication
    off) plus the communication left exposed, per strategy and world size; for ddp, where
    `parbench collectives` measured the same ranks, the ideal step beside it: compute plus an
    all-reduce of its gradient at the measured bandwidth, with no overlap and with full."""
    measured = (frame[frame["compute_time_s"].notna()] if "compute_time_s" in frame
                else frame.iloc[0:0])
    if measured.empty:
        return None
    panels = panel_groups(measured)
    heights = [len(group) for _, group in panels]
    # Panels stacked, a horizontal bar per record, so that labels never collide.
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, height_ratios=heights,
                             figsize=(11, 1.8 + 0.6 * sum(heights) + 0.6 * len(panels)))
    for ax, (name, group) in zip(axes[:, 0], panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        compute = _bars(ax, group, y)
        longest = max(np.nanmax(compute), group["step_time_median_s"].max())
        for yi, (_, record) in zip(y, group.iterrows(), strict=True):
            longest = max(longest, _annotate(ax, yi, record, collectives))
        labels = [f"{config_label(r)} on {r['devices']}".replace("\n", " ")
                  for _, r in group.iterrows()]
        ax.set_yticks(y, [textwrap.fill(label, 40) for label in labels], fontsize=8)
        ax.set_xlabel("median step (s; the step: geometric mean over trials; the exposed "
                      "share: mean over trials [95% interval])", fontsize=9)
        ax.set_title(name, fontsize=9)
        ax.set_xlim(0, 1.6 * longest)  # room for the labels past the bars
        ax.set_ylim(-0.6, len(group) - 0.4)
    legend: dict[str, Any] = {}  # label -> handle, each entry once over every panel
    for ax in axes[:, 0]:
        handles, labels = ax.get_legend_handles_labels()
        legend.update(zip(labels, handles, strict=True))
    axes[0, 0].legend(legend.values(), legend.keys(), fontsize=8, loc="lower right")
    what = "Data-parallel step: compute and exposed communication"
    if ("wrapper_overhead_fraction" in measured
            and measured["wrapper_overhead_fraction"].notna().any()):
        what += " (one rank: the wrapper's overhead, not communication)"
    fig.suptitle(title(measured, what), fontsize=10)
    return fig


def _bars(ax, group: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    """Each record's compute, then its exposed communication, as stacked bars; on one rank
    (records with `wrapper_overhead_fraction`: no byte crosses a link) the rest of the step
    is the wrapper's overhead, drawn apart at its mean share over trials (older records have
    none). Returns the compute drawn."""
    compute = group["compute_time_s"].to_numpy(dtype=float)
    share = (group["wrapper_overhead_fraction"].to_numpy(dtype=float)
             if "wrapper_overhead_fraction" in group else np.full(len(group), np.nan))
    one_rank = ~np.isnan(share)
    step = group["step_time_median_s"].to_numpy(dtype=float)
    overhead = share * step
    if one_rank.any():
        compute = np.where(one_rank, step - overhead, compute)
    exposed = group["exposed_comm_time_s"].to_numpy(dtype=float)
    ax.barh(y, compute, 0.6, color=[strategy_colour(s) for s in group["strategy"]],
            hatch=[strategy_hatch(s) for s in group["strategy"]], edgecolor="black",
            linewidth=0.5, label="compute (communication off)")
    if (~one_rank).any():
        ax.barh(y[~one_rank], np.clip(exposed[~one_rank], 0, None), 0.6,
                left=compute[~one_rank], color="white", edgecolor="black", hatch="xx",
                label="exposed communication")
    if one_rank.any():
        ax.barh(y[one_rank], np.clip(overhead[one_rank], 0, None), 0.6,
                left=compute[one_rank], color="white", edgecolor="grey", hatch="..",
                label="wrapper overhead (one rank: no communication)")
    return compute


def _annotate(ax, yi: float, record: pd.Series, collectives: Sequence[dict]) -> float:
    """A record's ideal steps (ddp, where the collectives were measured) and its text past
    the bar; returns the longest ideal drawn (0 if none)."""
    allreduce = (measured_allreduce_s(list(collectives), record)
                 if strategies.allreduces_gradients(record["strategy"]) else None)
    ideal = 0.0
    if allreduce is not None:
        ideal = record["compute_time_s"] + allreduce
        ax.vlines(ideal, yi - 0.4, yi + 0.4, colors="black",
                  linestyles="--", label="ideal: compute + all-reduce, no overlap")
        ax.vlines(max(record["compute_time_s"], allreduce), yi - 0.4, yi + 0.4,
                  colors="black", linestyles=":", label="ideal: full overlap")
    gathered = record.get("allgather_bytes")
    spent = record.get("wrapper_overhead_fraction")
    if spent is not None and pd.notna(spent):
        text = (f"{with_interval(record, 'wrapper_overhead_fraction', '.0%')} wrapper "
                "overhead (one rank: no byte crosses a link)")
    else:
        text = (f"{with_interval(record, 'exposed_comm_fraction', '.0%')} exposed, "
                f"{record['allreduce_bytes'] / 1e6:.0f} MB reduced"
                + (f", {gathered / 1e6:.0f} MB gathered" if pd.notna(gathered) else ""))
    # Past the bar's end: compute can read longer than the step within the noise.
    end = max(record["step_time_median_s"], record["compute_time_s"])
    ax.annotate(text, (end, yi), textcoords="offset points", xytext=(4, 0),
                va="center", fontsize=7)
    return ideal


def plot_collectives(rows: list[dict]):
    """Bus bandwidth of each collective against message size (nccl-tests' busbw)."""
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(8, 5))
    for index, ((name, devices, backend), group) in enumerate(
            frame.groupby(["collective", "devices", "backend"], sort=False)):
        group = group.sort_values("size_bytes")
        ax.plot(group["size_bytes"], group["busbw_gbps"], color=PALETTE[index % len(PALETTE)],
                marker=MARKERS[index % len(MARKERS)],
                linestyle=LINE_STYLES[(index // len(PALETTE)) % len(LINE_STYLES)],
                label=f"{name} ({devices}, {backend})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes; all-gather's output, reduce-scatter's input)")
    ax.set_ylabel("bus bandwidth (GB/s)\nbusbw = size / time x 2(n-1)/n (all-reduce), "
                  "x (n-1)/n (others)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    world = ", ".join(str(int(size)) for size in sorted(frame["world_size"].unique()))
    emulated = ("; EMULATED: the ranks share one physical device"
                if frame["emulated"].astype(bool).any() else "")
    ax.set_title(f"Collective bandwidth (nccl-tests' busbw) on {world} ranks{emulated}",
                 fontsize=9)
    return fig


def write_collectives_figure(rows: list[dict], out_dir: str | Path) -> Path | None:
    """collective-bandwidth-by-size.png and .svg in `out_dir`; its path (None without
    rows)."""
    fig = plot_collectives(rows)
    return None if fig is None else save_figure(fig, out_dir, COLLECTIVES_FIGURE)
