"""A pipeline step as a Gantt chart: measured, or predicted by the timing model."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from parbench.measure.timeline import PHASES, span_label
from parbench.plots.common import (
    PALETTE,
    config_label,
)

__all__ = ["plot_predicted_timeline", "plot_timeline"]


# From the shared palette: blue forward, vermillion backward (input and weight gradients, in
# zero-bubble schedules, orange and reddish purple); each bar labelled with its phase too.
_PHASE_COLOURS = {"F": PALETTE[3], "B": PALETTE[4], "I": PALETTE[0], "W": PALETTE[5]}


def _gantt(spans: list):
    """A row per stage (or rank), a bar per action: the figure, its axes, the row count, and
    whether rows hold several model stages."""
    stages = int(max(s[0] for s in spans)) + 1
    length = max(s[4] for s in spans)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.6 * stages))
    several = any(len(s) > 5 for s in spans)  # rows are ranks holding several model stages
    for span in spans:
        stage, _, phase, begin, end = span[:5]
        ax.barh(stage, end - begin, left=begin, height=0.8, color=_PHASE_COLOURS[phase],
                edgecolor="white", linewidth=0.5)
        if end - begin > (0.04 if several else 0.025) * length:  # room for its label
            ax.text((begin + end) / 2, stage, span_label(span).replace(" ", "\n"),
                    ha="center", va="center", fontsize=6 if several else 7, color="white")
    row = "rank" if several else "stage"
    ax.set_yticks(range(stages), [f"{row} {k}" for k in range(stages)])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the start of the step")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in _PHASE_COLOURS.values()]
    present = [p for p in _PHASE_COLOURS if any(s[2] == p for s in spans)]
    ax.legend([handles[list(_PHASE_COLOURS).index(p)] for p in present],
              [PHASES[p] for p in present], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    held = (f" ({len({s[5] for s in spans if len(s) > 5})} model stages, s<k> in the labels)"
            if several else "")
    return fig, ax, stages, row, held


def plot_timeline(record: pd.Series):
    """One measured pipeline step as a Gantt chart: a row per stage, a bar per micro-batch's
    forward and backward, with the measured idle share beside the schedule's theory."""
    spans = record.get("timeline")
    if not isinstance(spans, list) or not spans:
        return None
    fig, ax, stages, row, held = _gantt(spans)
    theory = record.get("bubble_fraction")
    theory = ("no closed form for this schedule" if theory is None or pd.isna(theory)
              else f"{theory:.0%}")
    ax.set_title(
        f"{config_label(record).replace(chr(10), ' ')}: one measured step, "
        f"{int(record['micro_batches'])} micro-batches on {stages} {row}s{held}\nidle share "
        f"measured {record['measured_bubble_fraction']:.0%} mean, "
        f"{record['measured_bubble_fraction_worst']:.0%} worst {row}; the schedule's theory "
        f"{theory}" + ("; EMULATED devices" if record.get("emulated") else ""), fontsize=9)
    return fig


def plot_predicted_timeline(record: pd.Series, spans: list, bubble: float):
    """The step the timing model predicts for a record's configuration, in the same form."""
    fig, ax, stages, row, held = _gantt(spans)
    ax.set_title(
        f"PREDICTED: {config_label(record).replace(chr(10), ' ')}, "
        f"{int(record['micro_batches'])} micro-batches on {stages} {row}s{held}\n"
        f"torch's schedule replayed with profiled times; predicted idle share {bubble:.0%}, "
        f"step {max(s[4] for s in spans):.3g} s (measured {record['step_time_median_s']:.3g} s)",
        fontsize=9)
    return fig
