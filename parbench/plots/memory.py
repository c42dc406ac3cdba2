"""Memory figures: peak memory per device, and what each pipeline schedule holds."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from parbench.measure.memory import memory_kind
from parbench.plots.common import (
    best_settings,
    config_label,
    make_axes,
    panel_groups,
    strategy_colour,
    strategy_hatch,
    strategy_style,
    title,
)
from parbench.results.record import axis_label

__all__ = ["plot_memory", "plot_pipeline_memory"]


def plot_memory(frame: pd.DataFrame):
    """Peak memory of each logical device for each strategy at its fastest setting (the
    pipeline-memory figure has every split), with the imbalance max / mean: a row each."""
    panels = panel_groups(best_settings(frame))
    rows = max(len(group) for _, group in panels)
    fig, axes = make_axes(len(panels), width_per=9.0, height=1.6 + 0.55 * rows)
    kinds = frame["memory_source"].dropna().map(memory_kind).unique()
    mixed = len(kinds) > 1
    how = (f"{' / '.join(kinds)}, as each label says: not comparable across kinds" if mixed
           else f"{kinds[0] if len(kinds) else 'peak memory'} per device")
    for ax, (name, group) in zip(axes, panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        for yi, (_, record) in zip(y, group.iterrows(), strict=True):
            peaks = record["peak_memory_mib"] or []
            height = 0.8 / max(len(peaks), 1)
            for d, peak in enumerate(peaks):  # device 0 on top
                ax.barh(yi + 0.4 - height * (d + 0.5), peak, height=height * 0.95,
                        color=strategy_colour(record["strategy"]), edgecolor="black",
                        hatch=strategy_hatch(record["strategy"]), linewidth=0.5,
                        alpha=1.0 - 0.5 * d / max(len(peaks), 1))
            if peaks:
                ax.annotate(f"{record['memory_imbalance']:.2f}", (max(peaks), yi),
                            textcoords="offset points", xytext=(4, 0), va="center", fontsize=8)
        ax.set_yticks(y, [textwrap.fill(config_label(r).replace("\n", " ")
                                        + (f" ({memory_kind(r['memory_source'])})"
                                           if mixed else ""), 40)
                          for _, r in group.iterrows()], fontsize=8)
        ax.set_xlabel(f"{axis_label('peak_memory_mib')}: a bar per device, top to bottom, each "
                      f"strategy at its fastest setting\n({how}; label: imbalance max / mean)",
                      fontsize=9)
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.15)
    fig.suptitle(title(frame, "Peak memory per device"), fontsize=10)
    return fig


def plot_pipeline_memory(frame: pd.DataFrame):
    """How each schedule trades memory for bubble: against its micro-batch count, the peak
    memory of its fullest stage (rank) and the most micro-batches a stage held at once (from
    its timeline), a line per strategy."""
    pipelines = frame[frame["in_flight_micro_batches"].map(
        lambda v: isinstance(v, list) and len(v) > 0)] if "in_flight_micro_batches" in frame \
        else frame.iloc[0:0]
    if pipelines.empty:
        return None
    pipelines = pipelines.assign(
        fullest=pipelines["peak_memory_mib"].map(max),
        held=pipelines["in_flight_micro_batches"].map(max),
        micro_batches=pipelines["micro_batches"].fillna(1))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, column, label in ((axes[0], "fullest", "peak memory of the fullest stage (MiB;\n"
                                                   "per rank, where it holds several)"),
                              (axes[1], "held", "most micro-batches a stage held at once")):
        for strategy, group in pipelines.groupby("strategy", sort=False):
            group = group.sort_values("micro_batches")
            ax.plot(group["micro_batches"], group[column], **strategy_style(strategy).line(),
                    label=strategy)
        ax.set_xscale("log")
        counts = sorted(pipelines["micro_batches"].unique())  # ticked at the measured M only
        ax.set_xticks(counts, [f"{m:g}" for m in counts])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("micro-batches per step M (log scale)")
        ax.set_ylabel(label)
    axes[1].legend(loc="upper left", fontsize=8)  # few stages hold many: room there
    fig.suptitle(title(pipelines, "Pipeline memory by micro-batches"), fontsize=10)
    return fig
