"""The timing model checked: each measured step against its prediction (labelled PREDICTED),
with the measurement's interval over trials and bands of 10% and 25% error."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from parbench.plots.common import interval_errors, save_figure, strategy_colour, title
from parbench.plots.timeline import plot_predicted_timeline

__all__ = ["plot_prediction", "write_predicted_timelines", "write_prediction_figure"]


def plot_prediction(table: pd.DataFrame, link: str):
    """Predicted against measured step time per configuration, on log axes."""
    fig, ax = plt.subplots(figsize=(8, 6.5))
    measured, predicted = table["step_time_median_s"], table["predicted_step_time_s"]
    low, high = min(measured.min(), predicted.min()) / 1.5, max(measured.max(),
                                                                 predicted.max()) * 1.5
    line = np.array([low, high])
    ax.plot(line, line, color="0.3", lw=1, label="prediction = measurement")
    for share, style in ((0.10, ":"), (0.25, "--")):
        ax.plot(line, line * (1 + share), color="0.6", ls=style, lw=1,
                label=f"{share:.0%} error")
        ax.plot(line, line * (1 - share), color="0.6", ls=style, lw=1)
    for strategy, group in table.groupby("strategy", sort=False):
        errors = interval_errors(group, "step_time_median_s")
        ax.errorbar(group["step_time_median_s"], group["predicted_step_time_s"], xerr=errors,
                    fmt="o", color=strategy_colour(strategy), capsize=3, label=strategy)
        for _, row in group.iterrows():
            if not pd.isna(row.get("split_size")):
                ax.annotate(f"{row['split_size']:g}", (row["step_time_median_s"],
                                                       row["predicted_step_time_s"]),
                            textcoords="offset points", xytext=(5, 3), fontsize=7)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
           xlabel="measured step time (s; whiskers: 95% interval over trials)",
           ylabel="PREDICTED step time (s)")
    errors = table["prediction_error"].abs()
    ax.set_title(title(table, f"PREDICTED vs measured step (link: {link}); median |error| "
                              f"{errors.median():.0%}, worst {errors.max():.0%}"), fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    return fig


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
