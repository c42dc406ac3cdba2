"""A run's predictions summarised: the columns predictions.csv adds for a reader (the measured
interval, the link), and the run README's predicted-against-measured section read back from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from parbench.markdown import cell, markdown_table
from parbench.plots.common import interval_of, options_text

__all__ = ["PREDICTIONS_FILE", "error_summary", "prediction_section", "trace_summary",
           "with_reader_columns"]

PREDICTIONS_FILE = "predictions.csv"


def with_reader_columns(table: pd.DataFrame, link: str) -> pd.DataFrame:
    """The table as predictions.csv holds it: each record's settings as text, its measured
    step's 95% interval (step_time_low_s, step_time_high_s), the link, kind=predicted."""
    bounds = [interval_of(record, "step_time_median_s") or (None, None)
              for _, record in table.iterrows()]
    return table.assign(
        settings=[options_text(options) for options in table["strategy_options"]],
        step_time_low_s=[low for low, _ in bounds], step_time_high_s=[high for _, high in bounds],
        link=link, kind="predicted")


def error_summary(table: pd.DataFrame) -> str:
    """Median and worst |error|, and how many predictions fall inside the measured interval."""
    errors = table["prediction_error"].abs()
    worst = table.loc[errors.idxmax()]
    text = (f"median |error| {errors.median():.1%}, worst {errors.max():.1%} "
            f"({worst['strategy']}{_settings_suffix(worst)}) over {len(table)} configurations")
    if {"step_time_low_s", "step_time_high_s"} <= set(table) and \
            table["step_time_low_s"].notna().any():
        inside = ((table["predicted_step_time_s"] >= table["step_time_low_s"])
                  & (table["predicted_step_time_s"] <= table["step_time_high_s"])).sum()
        text += f"; {inside} of {len(table)} inside the measurement's 95% interval"
    return text


def trace_summary(table: pd.DataFrame) -> str | None:
    """The schedule model's own error: the pipelines replayed with their traced step's compute
    times against that step (None without such a record)."""
    if "trace_replay_error" not in table or table["trace_replay_error"].isna().all():
        return None
    errors = table["trace_replay_error"].dropna()
    return (f"the schedule model alone (each pipeline's action order replayed with its traced "
            f"step's own compute times, against that step): median |error| "
            f"{errors.abs().median():.1%}, worst {errors.abs().max():.1%} over {len(errors)} "
            f"pipelines (median {errors.median():+.1%})")


def prediction_section(folder: Path) -> list[str]:
    """The README lines for folder's predictions.csv (none when `parbench predict RUN` has not
    been run on it)."""
    path = Path(folder) / PREDICTIONS_FILE
    if not path.exists():
        return []
    table = pd.read_csv(path)
    if table.empty:
        return []
    rows = [[f"{r['strategy']}{_settings_suffix(r)}", r["world_size"],
             f"{cell(r['step_time_median_s'])}{_interval(r)}", r["predicted_step_time_s"],
             f"{r['prediction_error']:+.1%}"] for _, r in table.iterrows()]
    return ["## Predicted against measured", "",
            f"Each configuration's step PREDICTED by `parbench predict` (a timing model from a "
            f"per-block profile of this device; link: {table['link'].iloc[0]}) beside the "
            f"measured one: {error_summary(table)}. What the model leaves out is in "
            "parbench's docs/prediction.md."
            + (f" Told apart: {trace_summary(table)}." if trace_summary(table) else ""), "",
            markdown_table(rows, ["configuration", "ranks", "measured step (s) [95%]",
                                  "PREDICTED step (s)", "error"]),
            "", "![predictions](predictions.png)", ""]


def _settings_suffix(record: pd.Series) -> str:
    settings = record.get("settings")
    return f" ({settings})" if isinstance(settings, str) and settings else ""


def _interval(record: pd.Series) -> str:
    low, high = record.get("step_time_low_s"), record.get("step_time_high_s")
    return "" if pd.isna(low) or pd.isna(high) else f" [{cell(low)}, {cell(high)}]"
