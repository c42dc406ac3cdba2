"""Throughput figures: each strategy at its best, scaling curves, and the split-size trade-off."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter

from parbench import strategies
from parbench.plots.common import (
    best_settings,
    compared_batch,
    config_label,
    has_intervals,
    make_axes,
    options_text,
    panel_groups,
    plot_with_interval,
    strategy_colour,
    strategy_marker,
    throughput_spread,
    title,
    with_interval,
)
from parbench.results.record import axis_label
from parbench.strategies.stages import bubble_fraction

__all__ = ["plot_scaling", "plot_split_sizes", "plot_strategies"]


def plot_strategies(frame: pd.DataFrame):
    """Throughput of each strategy at its best setting, with the spread of its steps: one
    horizontal bar each, labelled on the left, so that a dozen strategies stay readable."""
    frame = best_settings(frame)
    panels = panel_groups(frame)
    rows = max(len(group) for _, group in panels)
    fig, axes = make_axes(len(panels), width_per=8.0, height=2.2 + 0.55 * rows)
    for ax, (name, group) in zip(axes, panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        values = group["throughput_ips"].to_numpy()
        spreads = np.array([throughput_spread(r) for _, r in group.iterrows()])
        errors = np.vstack([np.clip(values - spreads[:, 0], 0, None),
                            np.clip(spreads[:, 1] - values, 0, None)])
        ax.barh(y, values, color=[strategy_colour(s) for s in group["strategy"]],
                xerr=errors, capsize=3, edgecolor="black", linewidth=0.5, height=0.7)
        for yi, value, top, (_, record) in zip(y, values, spreads[:, 1], group.iterrows(),
                                                strict=True):
            speedup = record.get("speedup_vs_baseline")
            note = f"{value:.3g}" + (f"  {speedup:.2f}x" if speedup == speedup and speedup
                                     else "")
            ax.annotate(note, (max(value, top), yi), textcoords="offset points",
                        xytext=(4, 0), ha="left", va="center", fontsize=8)
        labels = [config_label(r).replace("\n", " ") + (f", best of {r['settings_tried']}"
                                                        if r["settings_tried"] > 1 else "")
                  for _, r in group.iterrows()]
        ax.set_yticks(y, [textwrap.fill(label, 40) for label in labels], fontsize=8)
        ax.set_xlabel(axis_label("throughput_ips"))
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.25)
    bars, whiskers = (("the geometric mean over trials", "its 95% interval")
                      if has_intervals(frame)
                      else ("all measured steps", "p90 step to fastest step"))
    fig.suptitle(title(frame, f"Throughput per strategy at its best setting (bars: {bars}; "
                               f"whiskers: {whiskers}; label: img/s and speedup over "
                               "single)"),
                 fontsize=10)
    return fig


def plot_scaling(frame: pd.DataFrame):
    """Throughput against devices, the ideal N x T(1) line, and efficiency labels: a panel per
    workload and batch (under weak scaling, the batch per device), a line per strategy."""
    scaled = frame[frame["scaling_efficiency"].notna()]
    panels = []
    for name, group in panel_groups(scaled) if len(scaled) else []:
        group = compared_batch(group)
        line = [strategy + (f" ({text})" if text else "") for strategy, text in zip(
            group["strategy"], group["strategy_options"].map(
                lambda o: options_text({k: v for k, v in (o or {}).items()
                                        if k != "world_size"})), strict=True)]
        lines = [(key, g) for key, g in group.assign(line=line).groupby("line", sort=False)
                 if g["device_count"].nunique() > 1]
        if lines:
            panels.append((name, lines))
    if not panels:
        return None
    fig, axes = make_axes(len(panels), width_per=6.0)
    for ax, (name, lines) in zip(axes, panels, strict=True):
        for index, (label, group) in enumerate(lines):
            group = group.sort_values("device_count")
            strategy = group["strategy"].iloc[0]
            colour = strategy_colour(strategy)
            nudge = 0.04 * (index - (len(lines) - 1) / 2)  # whiskers at one count kept apart
            plot_with_interval(ax, group["device_count"] + nudge, group,
                               marker=strategy_marker(strategy), color=colour, label=label)
            one = group[group["device_count"] == 1]["throughput_ips"]
            if len(one):
                counts = np.array(sorted(group["device_count"].unique()))
                ax.plot(counts, counts * one.iloc[0], linestyle="--", color=colour, alpha=0.5,
                        label=f"{label}: ideal N x T(1)")
            for _, record in group[group["device_count"] > 1].iterrows():
                ax.annotate(with_interval(record, "scaling_efficiency", ".2f"),
                            (record["device_count"] + nudge, record["throughput_ips"]),
                            textcoords="offset points", xytext=(6, -4), fontsize=8,
                            color=colour)
        ax.set_xticks(sorted({n for _, group in lines for n in group["device_count"]}))
        ax.set_xlabel("devices (data-parallel ranks)")
        ax.set_ylabel(axis_label("throughput_ips"))
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.15)
        ax.legend(fontsize=7)
    weak = scaled["scaling"].eq("weak") if "scaling" in scaled else pd.Series(False)
    kinds = {True: "weak scaling: the batch per device fixed",
             False: "strong scaling: the global batch fixed"}
    what = "; ".join(kinds[k] for k in sorted(weak.unique(), reverse=True))
    fig.suptitle(title(scaled, f"Scaling, {what} (points: geometric mean over trials, whiskers "
                               "its 95% interval; labels: efficiency T(N) / (N x T(1)) "
                               "[95% interval])"), fontsize=10)
    return fig


def plot_split_sizes(frame: pd.DataFrame):
    """Throughput against micro-batch size per pipeline, with the theoretical bubble: a panel
    per workload with two split sizes or more."""
    split = frame[frame["split_size"].notna() & (frame["stages"].fillna(1) > 1)]
    panels = [(name, group) for name, group in panel_groups(frame)
              if group.loc[group.index.isin(split.index), "split_size"].nunique() >= 2]
    if not panels:
        return None
    fig, axes = make_axes(len(panels), width_per=9.0, height=7.5)  # room for the legend below
    for ax, (name, group) in zip(axes, panels, strict=True):
        _split_panel(ax, group, group[group.index.isin(split.index)])
        ax.set_title(name, fontsize=9)
    points = ("geometric mean over trials, whiskers its 95% interval, each line nudged "
              "sideways to keep its whiskers apart" if has_intervals(frame) else
              "throughput over the measured steps")
    fig.suptitle(title(split, "Split size trade-off: more micro-batches shrink the bubble, "
                              f"smaller ones use a device less well (points: {points})"),
                 fontsize=10)
    return fig


def _dodge(index: int, count: int) -> float:
    """The factor that moves line `index` of `count` sideways on a log axis (at most 8%)."""
    return float(np.exp(0.08 * (index - (count - 1) / 2) / max(count - 1, 1)))


def _split_panel(ax, frame: pd.DataFrame, split: pd.DataFrame) -> None:
    """One workload's lines: each pipeline, the same micro-batches accumulated on one device,
    the strategies that pass the whole batch, and GPipe's bubble in theory."""
    # The same-micro-batch baseline: one device accumulating the same micro-batches. A
    # pipeline above it gains from parallelism; the baseline above its flat line gains from
    # the micro-batches themselves.
    accumulating = frame[(frame["strategy"] == strategies.BASELINE)
                         & (frame["micro_batches"].fillna(1) > 1)].sort_values("split_size")
    stage_counts = sorted(int(k) for k in split["stages"].unique())
    lines = [(strategy, stages, group.sort_values("split_size"))
             for (strategy, stages), group in split.groupby(["strategy", "stages"], sort=False)]
    count = len(lines) + bool(len(accumulating))
    for index, (strategy, stages, group) in enumerate(lines):
        plot_with_interval(ax, group["split_size"] * _dodge(index, count), group,
                           marker=strategy_marker(strategy), color=strategy_colour(strategy),
                           linestyle="-" if stages == stage_counts[0] else "-.",
                           label=strategy + (f" (K={int(stages)})" if len(stage_counts) > 1
                                             else ""))
    if len(accumulating):
        plot_with_interval(ax, accumulating["split_size"] * _dodge(count - 1, count),
                           accumulating, marker=strategy_marker(strategies.BASELINE),
                           linestyle="--", color=strategy_colour(strategies.BASELINE),
                           label=f"{strategies.BASELINE} accumulating the same micro-batches")
    # The baseline, and every strategy that cuts the model but passes the whole batch.
    splitting = strategies.takers("split_size")
    unsplit = [strategies.BASELINE, *(name for name in strategies.takers("stages")
                                      if name not in splitting)]
    whole_batch = frame["micro_batches"].fillna(1) == 1
    for strategy in unsplit:
        flat = frame[(frame["strategy"] == strategy) & whole_batch]["throughput_ips"]
        if len(flat):
            ax.axhline(flat.iloc[0], color=strategy_colour(strategy), linestyle=":",
                       label=f"{strategy} (no split)")
    ax.set_xscale("log")
    for set_formatter in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
        set_formatter(FormatStrFormatter("%g"))  # 2, not 2 x 10^0
    ax.set_xlabel("split size (images per micro-batch, log scale)")
    ax.set_ylabel(axis_label("throughput_ips"))
    bubble_axis = ax.twinx()
    batch = int(split["global_batch"].iloc[0])
    sizes = np.unique(np.geomspace(1, split["split_size"].max(), 200).round().astype(int))
    for stages, style in zip(stage_counts, ("--", "-.", ":"), strict=False):
        bubble_axis.plot(sizes, [bubble_fraction(stages, -(-batch // s)) for s in sizes],
                         color="0.4", linestyle=style,
                         label=f"GPipe bubble (K-1)/(M+K-1), K={stages} (theory)")
    bubble_axis.set_ylabel("idle fraction (theory)")
    bubble_axis.set_ylim(0, 1)
    handles = ax.get_legend_handles_labels()
    extra = bubble_axis.get_legend_handles_labels()
    # Below the axes: with a dozen schedules, any place inside covers some of them.
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.13), ncol=2)
