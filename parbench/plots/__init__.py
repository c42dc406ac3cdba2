"""Figures from result records only, each written as PNG and SVG: one module per family
(throughput, memory, communication, timelines), sharing colours, labels and titles (common)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from parbench.plots.common import (
    best_settings,
    config_label,
    options_text,
    save_figure,
    strategy_colour,
    strategy_marker,
)
from parbench.plots.communication import (
    plot_collectives,
    plot_communication,
    write_collectives_figure,
)
from parbench.plots.memory import plot_memory, plot_pipeline_memory
from parbench.plots.throughput import plot_scaling, plot_split_sizes, plot_strategies
from parbench.plots.timeline import plot_timeline

__all__ = ["FIGURES", "best_settings", "config_label", "options_text", "plot_collectives",
           "plot_communication", "plot_memory", "plot_pipeline_memory", "plot_scaling",
           "plot_split_sizes", "plot_strategies", "plot_timeline", "save_figure",
           "strategy_colour", "strategy_marker", "write_collectives_figure", "write_figures"]


# Each figure's file name, which says what it holds (before 2026-11-29: strategies,
# scaling, memory, split_size, pipeline_memory, communication and collectives).
FIGURES = {
    "throughput-by-strategy": plot_strategies,
    "throughput-by-devices": plot_scaling,
    "peak-memory-by-device": plot_memory,
    "speedup-by-micro-batch": plot_split_sizes,
    "pipeline-memory-by-micro-batches": plot_pipeline_memory,
    "data-parallel-step-breakdown": plot_communication,
}


def write_figures(frame: pd.DataFrame, out_dir: str | Path,
                  collectives: Sequence[dict] = ()) -> list[Path]:
    """Every figure the records can support, as out_dir/<name>.png and .svg; the PNGs'
    paths are returned. Only `ok` records are drawn; `collectives` (measured by `parbench
    collectives` on the same devices) add the ideal step to the communication figure."""
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    written: list[Path] = []
    if ok.empty:
        return written
    for name, draw in FIGURES.items():
        fig = plot_communication(ok, collectives) if draw is plot_communication else draw(ok)
        if fig is not None:
            written.append(save_figure(fig, out_dir, name))
    for _, record in ok.iterrows():  # a Gantt chart per pipeline record with a timeline
        fig = plot_timeline(record)
        if fig is not None:
            name = f"timeline-{int(record['config_index']):03d}-{record['strategy']}"
            written.append(save_figure(fig, out_dir, name))
    return written
