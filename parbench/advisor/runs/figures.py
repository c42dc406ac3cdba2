"""The timing model checked: each measured step against its prediction (labelled PREDICTED),
with the measurement's interval over trials and bands of 10% and 25% error; and a sweep not
run, drawn as what it is: predicted throughput against split size per device count."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter

from parbench import strategies
from parbench.advisor.runs.ranking import group_key
from parbench.plots.common import (
    PALETTE,
    config_label,
    device_count,
    interval_errors,
    one_trial_note,
    save_figure,
    strategy_style,
    title,
)
from parbench.plots.timeline import plot_predicted_timeline

__all__ = ["plot_prediction", "plot_ranking", "plot_sweep", "write_predicted_timelines",
           "write_prediction_figure", "write_projection_figure", "write_ranking_figure",
           "write_sweep_figure"]


def plot_prediction(table: pd.DataFrame, link: str):
    """Predicted against measured step time per configuration, on log axes; beside it, where
    the run has a baseline, the speedups over it (drift between profile and run cancels)."""
    speedups = table[table["speedup_error"].notna()] if "speedup_error" in table else table[:0]
    fig, axes = plt.subplots(1, 2 if len(speedups) else 1, squeeze=False,
                             figsize=(14 if len(speedups) else 8, 6.5))
    errors = table["prediction_error"].abs()
    _against(axes[0][0], table, "step_time_median_s", "predicted_step_time_s",
             "measured step time (s; whiskers: 95% interval over trials)",
             "PREDICTED step time (s; whiskers: the profile's quartiles)",
             f"step: median |error| {errors.median():.0%}, worst {errors.max():.0%}")
    if len(speedups):
        errors = speedups["speedup_error"].abs()
        _against(axes[0][1], speedups, "speedup_vs_baseline", "predicted_speedup",
                 "measured speedup over single, whole batch (paired by round; 95% interval)",
                 "PREDICTED speedup", f"speedup: median |error| {errors.median():.0%}, "
                                      f"worst {errors.max():.0%}")
    fig.suptitle(title(table, f"PREDICTED vs measured (link: {link})"), fontsize=9)
    return fig


def _against(ax, table: pd.DataFrame, measured_name: str, predicted_name: str, xlabel: str,
             ylabel: str, heading: str) -> None:
    """One panel: each configuration's prediction against its measurement, on log axes, with
    the measurement's interval and bands of 10% and 25% error."""
    measured, predicted = table[measured_name], table[predicted_name]
    low, high = min(measured.min(), predicted.min()) / 1.5, max(measured.max(),
                                                                 predicted.max()) * 1.5
    line = np.array([low, high])
    ax.plot(line, line, color="0.3", lw=1, label="prediction = measurement")
    for share, dashes in ((0.10, ":"), (0.25, "--")):
        ax.plot(line, line * (1 + share), color="0.6", ls=dashes, lw=1,
                label=f"{share:.0%} error")
        ax.plot(line, line * (1 - share), color="0.6", ls=dashes, lw=1)
    for strategy, group in table.groupby("strategy", sort=False):
        style = strategy_style(strategy)
        ax.errorbar(group[measured_name], group[predicted_name],
                    xerr=interval_errors(group, measured_name),
                    yerr=_band(group) if predicted_name == "predicted_step_time_s" else None,
                    fmt=style.marker, color=style.colour, capsize=3,
                    label=strategy + one_trial_note(group, measured_name))
        for _, row in group.iterrows():
            if not pd.isna(row.get("split_size")):
                ax.annotate(f"{row['split_size']:g}", (row[measured_name], row[predicted_name]),
                            textcoords="offset points", xytext=(5, 3), fontsize=7)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), xlabel=xlabel,
           ylabel=ylabel)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FormatStrFormatter("%.2g"))
        axis.set_minor_formatter(FormatStrFormatter("%.2g"))
    ax.set_title(heading, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)


def _band(group: pd.DataFrame) -> np.ndarray | None:
    """yerr for each prediction's band from its profile's spread (None without bands)."""
    if "predicted_low_s" not in group or group["predicted_low_s"].isna().all():
        return None
    predicted = group["predicted_step_time_s"]
    return np.array([(predicted - group["predicted_low_s"]).clip(lower=0).fillna(0),
                     (group["predicted_high_s"] - predicted).clip(lower=0).fillna(0)])


def plot_ranking(table: pd.DataFrame):
    """One panel per workload and device count with two configurations or more: each
    configuration's measured step (95% interval over trials), its PREDICTED step (the band
    from its profile's spread) and the naive estimate, the configurations sorted by measured
    step, so a model that orders them as measured draws a rising line; None where no group
    has two."""
    keyed = table.assign(devices_used=device_count(table),
                         group=[repr(group_key(row)) for row in table.to_dict("records")])
    groups = [(name, group.sort_values("step_time_median_s").reset_index(drop=True))
              for name, group in keyed.groupby("group", sort=False) if len(group) >= 2]
    if not groups:
        return None
    columns = min(len(groups), 3)
    rows = -(-len(groups) // columns)
    fig, axes = plt.subplots(rows, columns, squeeze=False, figsize=(6 * columns, 4.8 * rows))
    for ax, (_, group) in zip(axes.flat, groups, strict=False):
        x = np.arange(len(group))
        ax.errorbar(x - 0.12, group["step_time_median_s"],
                    yerr=interval_errors(group, "step_time_median_s"), fmt="o", color="0.2",
                    capsize=3, label="measured (geometric mean, 95% interval)")
        ax.errorbar(x + 0.12, group["predicted_step_time_s"], yerr=_band(group), fmt="s",
                    color=PALETTE[3], capsize=3, label="PREDICTED (band: profile's quartiles)")
        if "naive_step_time_s" in group:
            ax.plot(x, group["naive_step_time_s"], "x", color=PALETTE[4], label="naive estimate")
        first = group.iloc[0]
        ax.set_title(f"{first['model']}, batch {first['global_batch']}, "
                     f"{first['image_size']}px, {first['devices_used']} device(s)", fontsize=9)
        ax.set_xticks(x, [config_label(row).replace("\n", " ") for _, row in group.iterrows()],
                      rotation=30, ha="right", fontsize=7)
        ax.set(yscale="log", ylabel="step time (s, log scale)",
               xlabel="sorted by measured step: a model that orders them right rises")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(FormatStrFormatter("%.2g"))  # 0.4, not 4 x 10^-1
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(title(table, "Order of configurations, measured beside PREDICTED"), fontsize=9)
    return fig


def write_ranking_figure(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    fig = plot_ranking(table)
    return None if fig is None else save_figure(fig, out_dir, "ranking")


def write_prediction_figure(table: pd.DataFrame, out_dir: str | Path, link: str) -> Path:
    return save_figure(plot_prediction(table, link), out_dir, "predictions")


def write_predicted_timelines(table: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """A predicted Gantt chart per pipeline configuration, named as its measured one."""
    written = []
    for position, row in table.iterrows():
        spans = row.get("predicted_timeline")
        if isinstance(spans, list) and spans and not pd.isna(row.get("micro_batches")):
            fig = plot_predicted_timeline(row, spans, row["predicted_bubble_fraction"])
            index = row.get("config_index")
            index = position if index is None or pd.isna(index) else int(index)
            name = f"predicted-timeline-{index:03d}-{row['strategy']}"
            written.append(save_figure(fig, out_dir, name))
    return written


def plot_sweep(table: pd.DataFrame, setting: str):
    """`parbench predict --devices`'s rows: per device count, each strategy's PREDICTED
    throughput against its split size (a line), or at the whole batch (a dotted level)."""
    counts = sorted(table.loc[table["strategy"] != strategies.BASELINE, "devices"].unique())
    fig, axes = plt.subplots(1, len(counts), squeeze=False, sharey=True,
                             figsize=(5.5 * len(counts), 6))
    for ax, count in zip(axes[0], counts, strict=True):
        # single runs on one device: drawn in every panel as the reference.
        rows = table[(table["devices"] == count) | (table["strategy"] == strategies.BASELINE)]
        rows = rows.drop_duplicates(["strategy", "split_size"])
        for strategy, group in rows.groupby("strategy", sort=False):
            style = strategy_style(strategy)
            colour = style.colour
            split = group[group["split_size"].notna()].sort_values("split_size")
            if len(split):
                ax.plot(split["split_size"], split["throughput_ips"], ms=3, **style.line(),
                        label=strategy + (
                            " accumulating" if strategy == strategies.BASELINE else ""))
            layout = strategies.layout_of(strategy)
            whole = ("its share of the batch on each device"
                     if layout is not None and layout.data_parallel else "whole batch")
            for level in group[group["split_size"].isna()]["throughput_ips"]:
                ax.axhline(level, color=colour, ls=":", label=f"{strategy} ({whole})")
        ax.set(xscale="log", xlabel="split size (images per micro-batch, log scale)",
               title=f"{count} devices")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("PREDICTED throughput (img/s)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle("\n".join(textwrap.wrap(
        f"PREDICTED, not measured: {setting}. Stages cut at equal profiled time; no "
        "contention between devices (real devices do not share)", 140)), fontsize=9)
    return fig


def write_sweep_figure(table: pd.DataFrame, path: Path, setting: str) -> Path:
    """The sweep's figure at `path` (PNG, an SVG beside it)."""
    return save_figure(plot_sweep(table, setting), path.parent, path.stem)


def write_projection_figure(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """projection.png and .svg: predicted DDP efficiency against ranks, a line per link, with
    its bounds shaded (full overlap above, no overlap below); labelled PREDICTED throughout."""
    if table.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    for (link, model, batch), group in table.groupby(["link", "model", "batch_per_rank"],
                                                     sort=False):
        group = group.sort_values("ranks")
        [line] = ax.plot(group["ranks"], group["efficiency"], marker="o",
                         label=f"{link}, {model} b{batch:g}/rank")
        ax.fill_between(group["ranks"], group["efficiency_no_overlap"],
                        group["efficiency_full_overlap"], color=line.get_color(), alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(table["ranks"].unique()), [str(n) for n in sorted(table["ranks"]
                                                                           .unique())])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("data-parallel ranks")
    ax.set_ylabel("PREDICTED efficiency: compute / step")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title("PREDICTED, not measured: a DDP step at N ranks = measured compute with DDP's "
                 "buckets all-reduced\nin a ring (2(N-1)/N x bytes / bus bandwidth) as backward "
                 "fills them; shaded: from no overlap to full overlap\n(batch per rank fixed)",
                 fontsize=9)
    return save_figure(fig, out_dir, "projection")
