"""Throughput figures: each strategy at its best, throughput against devices, and the speedup
over single against micro-batch size."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter, PercentFormatter

from parbench import strategies
from parbench.plots.common import (
    REFERENCE_COLOUR,
    bar_style,
    best_settings,
    compared_batch,
    config_label,
    device_count,
    has_intervals,
    interval_errors,
    interval_of,
    make_axes,
    one_trial_note,
    options_text,
    panel_groups,
    plot_with_interval,
    real_devices,
    strategy_colour,
    strategy_style,
    throughput_spread,
    title,
    with_interval,
)
from parbench.results.record import axis_label
from parbench.strategies.stages import bubble_fraction

__all__ = ["SPEEDUP", "plot_scaling", "plot_split_sizes", "plot_strategies"]

# The speedup each record carries over single on the whole batch: the geometric mean over
# trials of the throughput ratios paired by round, its 95% interval in
# `intervals["speedup_vs_baseline"]` (parbench/results/comparisons.py).
SPEEDUP = "speedup_vs_baseline"


def plot_strategies(frame: pd.DataFrame):
    """Throughput of each strategy at its best setting: one horizontal bar each, labelled on
    the left, so that a dozen strategies stay readable. Whiskers: the 95% interval over
    trials where the run measured several (a bar of one trial has none, and says so); in a
    run of one trial each, the throughput at the p90 and the fastest step."""
    frame = best_settings(frame)
    panels = panel_groups(frame)
    rows = max(len(group) for _, group in panels)
    trials = has_intervals(frame)
    fig, axes = make_axes(len(panels), width_per=9.0, height=1.6 + 0.55 * rows)
    for ax, (name, group) in zip(axes, panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        values = group["throughput_ips"].to_numpy()
        if trials:
            errors = interval_errors(group, "throughput_ips")  # None: a panel of one trial each
            tops = values + (np.nan_to_num(errors[1]) if errors is not None else 0)
        else:
            spreads = np.array([throughput_spread(r) for _, r in group.iterrows()])
            errors = np.vstack([np.clip(values - spreads[:, 0], 0, None),
                                np.clip(spreads[:, 1] - values, 0, None)])
            tops = spreads[:, 1]
        ax.barh(y, values, xerr=errors, capsize=3, height=0.7, **bar_style(group["strategy"]))
        # A whisker far past every bar (a wild trial) runs off the axis, its end written out,
        # rather than squeezing every bar to a sliver.
        limit = 2.0 * values.max()
        right = limit * 1.3 if np.nanmax(tops) > limit else None
        for yi, value, top, (_, record) in zip(y, values, tops, group.iterrows(),
                                                strict=True):
            speedup = record.get(SPEEDUP)
            note = f"{value:.3g}" + (f"  {speedup:.2f}x" if speedup == speedup and speedup
                                     else "")
            if top > limit:  # at the axis' right end, over the whisker
                ax.annotate(f"{note}  (whisker to {top:.3g})", (right, yi), ha="right",
                            va="center", fontsize=8, textcoords="offset points",
                            xytext=(-3, 0), bbox={"facecolor": "white", "edgecolor": "none",
                                                  "pad": 1})
                continue
            ax.annotate(note, (max(value, top), yi), textcoords="offset points",
                        xytext=(4, 0), ha="left", va="center", fontsize=8)
        labels = [config_label(r).replace("\n", " ")
                  + (f", best of {r['settings_tried']}" if r["settings_tried"] > 1 else "")
                  + (" (one trial)" if trials and interval_of(r, "throughput_ips") is None
                     else "")
                  for _, r in group.iterrows()]
        ax.set_yticks(y, [textwrap.fill(label, 40) for label in labels], fontsize=8)
        whiskers = ("whiskers: 95% interval over trials" if trials
                    else "one trial; whiskers: p90 step to fastest step")
        ax.set_xlabel(f"{axis_label('throughput_ips')}; {whiskers}\n"
                      "(label: images/s and speedup over single on the whole batch)",
                      fontsize=9)
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.25)
        if right is not None:
            ax.set_xlim(0, right)
    fig.suptitle(title(frame, "Throughput per strategy at its best setting"), fontsize=10)
    return fig


def plot_scaling(frame: pd.DataFrame):
    """Throughput against devices, and efficiency labels: a panel per workload and batch
    (under weak scaling, the batch per device), a line per strategy; the ideal N x T(1)
    where the devices are real (on emulated devices sharing one physical device, N of them
    can never do N times the work: no ideal is drawn)."""
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
    fig, axes = make_axes(len(panels), width_per=6.5)
    for ax, (name, lines) in zip(axes, panels, strict=True):
        emulated = False
        for index, (label, group) in enumerate(lines):
            group = group.sort_values("device_count")
            style = strategy_style(group["strategy"].iloc[0])
            nudge = 0.04 * (index - (len(lines) - 1) / 2)  # whiskers at one count kept apart
            plot_with_interval(ax, group["device_count"] + nudge, group, **style.line(),
                               label=label)
            one = group[group["device_count"] == 1]["throughput_ips"]
            if len(one) and real_devices(group):
                counts = np.array(sorted(group["device_count"].unique()))
                ax.plot(counts, counts * one.iloc[0], linestyle=":", marker="none",
                        color=style.colour, alpha=0.6, label=f"{label}: ideal N x T(1)")
            emulated |= not real_devices(group)
            for _, record in group[group["device_count"] > 1].iterrows():
                ax.annotate(with_interval(record, "scaling_efficiency", ".2f"),
                            (record["device_count"] + nudge, record["throughput_ips"]),
                            textcoords="offset points", xytext=(6, -4), fontsize=8,
                            color=style.colour)
        if emulated:  # said where the ideal would be
            ax.plot([], [], linestyle="none",
                    label="no ideal N x T(1): emulated devices share one physical device")
        ax.set_xticks(sorted({n for _, group in lines for n in group["device_count"]}))
        ax.set_xlabel("devices (data-parallel ranks)")
        ax.set_ylabel(axis_label("throughput_ips") + "\n(label: efficiency T(N) / (N x T(1)))")
        ax.set_ylim(bottom=0)
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.15)
        ax.legend(fontsize=7, title=("points: geometric mean over trials, whiskers 95% interval"
                                     if has_intervals(scaled) else None), title_fontsize=7)
    weak = scaled["scaling"].eq("weak") if "scaling" in scaled else pd.Series(False)
    kinds = {True: "weak scaling", False: "strong scaling"}
    what = ", ".join(kinds[k] for k in sorted(weak.unique(), reverse=True))
    fig.suptitle(title(scaled, f"Throughput by devices, {what}"), fontsize=10)
    return fig


def plot_split_sizes(frame: pd.DataFrame):
    """The speedup over single on the whole batch against micro-batch size, per pipeline,
    beside single accumulating the same micro-batches; the measured sizes are categories on
    the x axis. Below each, in a panel of its own, GPipe's bubble in theory at those sizes. A
    pair of panels per workload with two split sizes or more. A speedup needs single on the
    whole batch in the run: records without one are left out (none: no figure)."""
    frame = frame[pd.to_numeric(frame[SPEEDUP], errors="coerce").notna()]
    split = frame[frame["split_size"].notna() & (frame["stages"].fillna(1) > 1)]
    panels = [(name, group) for name, group in panel_groups(frame)
              if group.loc[group.index.isin(split.index), "split_size"].nunique() >= 2]
    if not panels:
        return None
    sizes = max(group["split_size"].nunique() for _, group in panels)
    fig, grid = plt.subplots(2, len(panels), squeeze=False, sharex="col",
                             height_ratios=(3.2, 1),
                             figsize=(min(7.0 * len(panels) + 4.0, 20.0) + 0.3 * max(sizes - 4, 0),
                                      7.5))
    for column, (name, group) in enumerate(panels):
        main, theory = grid[0, column], grid[1, column]
        _speedup_panel(main, group, group[group.index.isin(split.index)])
        _bubble_panel(theory, group[group.index.isin(split.index)], _categories(group, split))
        main.set_title(name, fontsize=9)
    handles, labels = grid[0, -1].get_legend_handles_labels()
    grid[0, -1].legend(handles, labels, fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0), title=_points_text(split),
                       title_fontsize=8)
    fig.suptitle(title(split, "Speedup over single by micro-batch size"), fontsize=10)
    return fig


def _points_text(split: pd.DataFrame) -> str:
    return ("points: geometric mean over trials,\nwhiskers its 95% interval (paired by round)"
            if has_intervals(split) else "points: one trial each (no interval)")


def _categories(frame: pd.DataFrame, split: pd.DataFrame) -> list[float]:
    """The split sizes measured in the panel (pipelines and accumulating single), ascending."""
    accumulating = frame[(frame["strategy"] == strategies.BASELINE)
                         & (frame["micro_batches"].fillna(1) > 1)]["split_size"]
    inside = frame.loc[frame.index.isin(split.index), "split_size"]
    return sorted(set(inside.dropna()) | set(accumulating.dropna()))


def _speedup_panel(ax, frame: pd.DataFrame, split: pd.DataFrame) -> None:
    """One workload's speedups over single on the whole batch: each pipeline, the same
    micro-batches accumulated on one device (a pipeline above it gains from parallelism; it
    above 1x gains from the micro-batches themselves), strategies that cut the model but pass
    the whole batch as levels, 1x, and the ideal where the devices are real."""
    categories = _categories(frame, split)
    place = {size: position for position, size in enumerate(categories)}
    accumulating = frame[(frame["strategy"] == strategies.BASELINE)
                         & (frame["micro_batches"].fillna(1) > 1)].sort_values("split_size")
    stage_counts = sorted(int(k) for k in split["stages"].unique())
    lines = [(strategy + (f" (K={int(stages)})" if len(stage_counts) > 1 else ""),
              strategy_style(strategy), group.sort_values("split_size"))
             for (strategy, stages), group in split.groupby(["strategy", "stages"], sort=False)]
    if len(accumulating):
        lines.append((f"{strategies.BASELINE} accumulating the same micro-batches",
                      strategy_style(strategies.BASELINE)._replace(linestyle="--"),
                      accumulating))
    width = min(0.6, 0.08 * len(lines))  # each line nudged sideways: whiskers kept apart
    for index, (label, style, group) in enumerate(lines):
        nudge = width * (index / max(len(lines) - 1, 1) - 0.5) if len(lines) > 1 else 0.0
        x = np.array([place[size] for size in group["split_size"]]) + nudge
        plot_with_interval(ax, x, group.assign(x=group["split_size"]), SPEEDUP, **style.line(),
                           label=label, markersize=6)
    # Every strategy that cuts the model but passes the whole batch: a level, its speedup.
    splitting = strategies.takers("split_size")
    whole_batch = frame["micro_batches"].fillna(1) == 1
    for strategy in (name for name in strategies.takers("stages") if name not in splitting):
        flat = frame[(frame["strategy"] == strategy) & whole_batch]
        if len(flat):
            record = flat.iloc[0]
            ax.axhline(record[SPEEDUP], color=strategy_colour(strategy), linestyle=(0, (1, 3)),
                       linewidth=1.5, label=f"{strategy}, whole batch: "
                       f"{with_interval(record, SPEEDUP, '.2f')}x"
                       + one_trial_note(flat.iloc[:1], SPEEDUP))
    ax.axhline(1.0, color=REFERENCE_COLOUR, linewidth=1.0,
               label=f"{strategies.BASELINE}, whole batch (1x)")
    for count in sorted(device_count(split).unique()):
        at = split[device_count(split) == count]
        if real_devices(at):  # emulated devices share one: N of them can never give N x
            ax.axhline(count, color="0.35", linestyle=(0, (6, 2, 1, 2)), linewidth=1.0,
                       label=f"ideal: {count}x on {count} devices")
        else:  # said where the ideal would be
            physical = ", ".join(sorted(at["physical_devices"].astype(str).unique()))
            ax.plot([], [], linestyle="none",
                    label=f"no ideal {count}x: {count} devices emulated on one {physical}")
    speedups = pd.concat([group[SPEEDUP] for _, _, group in lines]).dropna()
    if len(speedups) and speedups.max() / speedups.min() > 10:
        ax.set_yscale("log")  # from a hundredth to one: read as ratios
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("speedup over single on the whole batch (x)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_xlim(-0.5, len(categories) - 0.5)


def _bubble_panel(ax, split: pd.DataFrame, categories: list[float]) -> None:
    """GPipe's idle share in theory, (K-1)/(M+K-1), at each measured split size: M
    micro-batches of the global batch, K stages."""
    batch = int(split["global_batch"].iloc[0])
    x = np.arange(len(categories))
    micro = [-(-batch // int(size)) for size in categories]
    stage_counts = sorted(int(k) for k in split["stages"].unique())
    for stages, marker in zip(stage_counts, ("s", "D", "^", "v"), strict=False):
        bubble = [bubble_fraction(stages, m) for m in micro]
        ax.plot(x, bubble, color="0.3", marker=marker, linestyle="-",
                label=f"K={stages} stages")
        for xi, value in zip(x, bubble, strict=True):
            ax.annotate(f"{value:.0%}", (xi, value), textcoords="offset points", xytext=(0, 5),
                        ha="center", fontsize=7)
    ax.set_xticks(x, [f"{size:g}\n(M={m})" for size, m in zip(categories, micro, strict=True)],
                  fontsize=8)
    ax.set_xlabel("split size: images per micro-batch (M micro-batches per step of "
                  f"{batch} images)")
    ax.set_ylabel("GPipe bubble\n(K-1)/(M+K-1)\n(theory)", fontsize=8)
    ax.set_ylim(0, min(1.0, max(bubble_fraction(k, min(micro)) for k in stage_counts) * 1.35))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    if len(stage_counts) > 1:
        ax.legend(fontsize=7, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
