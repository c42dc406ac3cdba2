"""A run's predictions summarised: the columns predictions.csv adds for a reader (the measured
interval, the link), and the run README's predicted-against-measured section read back from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from parbench.markdown import cell, markdown_table
from parbench.plots.common import interval_of, options_text

__all__ = ["PREDICTIONS_FILE", "error_summary", "memory_summary", "prediction_section",
           "speedup_summary", "trace_summary", "with_reader_columns"]

PREDICTIONS_FILE = "predictions.csv"


def with_reader_columns(table: pd.DataFrame, link: str) -> pd.DataFrame:
    """The table as predictions.csv holds it: each record's settings as text, the 95%
    intervals of its measured step (step_time_low_s, step_time_high_s) and speedup
    (speedup_low, speedup_high), the link, kind=predicted."""
    steps, speedups = ([interval_of(record, name) or (None, None) for _, record in table.iterrows()]
                       for name in ("step_time_median_s", "speedup_vs_baseline"))
    return table.assign(
        settings=[options_text(options) for options in table["strategy_options"]],
        step_time_low_s=[low for low, _ in steps], step_time_high_s=[high for _, high in steps],
        speedup_low=[low for low, _ in speedups], speedup_high=[high for _, high in speedups],
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


def memory_summary(table: pd.DataFrame) -> str | None:
    """Median and worst |error| of the fullest device's predicted peak memory (None where no
    record measured one). The two differ in scope for ddp and fsdp: the model counts DDP's
    bucket copy of the gradients and the parameters FSDP gathers, the measured per-device
    figure leaves them out (docs/methodology.md), so those read high."""
    if "memory_error" not in table or table["memory_error"].isna().all():
        return None
    errors = table["memory_error"].dropna().abs()
    return (f"median |error| {errors.median():.1%}, worst {errors.max():.1%} over {len(errors)} "
            "configurations (ddp's and fsdp's predictions count their buckets and gathered "
            "parameters, the measured figure does not)")


def speedup_summary(table: pd.DataFrame) -> str | None:
    """Median and worst |error| of the predicted speedups over the baseline (None where no
    record has one), and how many fall inside the measured speedup's interval."""
    if "speedup_error" not in table or table["speedup_error"].isna().all():
        return None
    rows = table[table["speedup_error"].notna()]
    errors = rows["speedup_error"].abs()
    worst = rows.loc[errors.idxmax()]
    text = (f"median |error| {errors.median():.1%}, worst {errors.max():.1%} "
            f"({worst['strategy']}{_settings_suffix(worst)}) over {len(rows)} speedups")
    if {"speedup_low", "speedup_high"} <= set(rows) and rows["speedup_low"].notna().any():
        inside = ((rows["predicted_speedup"] >= rows["speedup_low"])
                  & (rows["predicted_speedup"] <= rows["speedup_high"])).sum()
        text += f"; {inside} of {len(rows)} inside the measured speedup's 95% interval"
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
    speedups = "speedup_error" in table and table["speedup_error"].notna().any()
    rows = [[f"{r['strategy']}{_settings_suffix(r)}", r["world_size"],
             f"{cell(r['step_time_median_s'])}{_interval(r, 'step_time')}",
             r["predicted_step_time_s"], f"{r['prediction_error']:+.1%}"]
            + ([f"{cell(r['speedup_vs_baseline'])}{_interval(r, 'speedup')}",
                r["predicted_speedup"], _signed(r["speedup_error"])] if speedups else [])
            for _, r in table.iterrows()]
    headings = ["configuration", "ranks", "measured step (s) [95%]", "PREDICTED step (s)",
                "error"] + (["measured speedup [95%]", "PREDICTED speedup", "error"]
                            if speedups else [])
    traced, memory = trace_summary(table), memory_summary(table)
    return ["## Predicted against measured", "",
            f"Each configuration's step PREDICTED by `parbench predict` (a timing model from a "
            f"per-block profile of this device; link: {table['link'].iloc[0]}) beside the "
            f"measured one: {error_summary(table)}."
            + (f" Speedups over single on the whole batch, each side from its own source (a "
               f"drift of the machine that slowed every profile alike cancels): "
               f"{speedup_summary(table)}." if speedups else "")
            + (f" Told apart: {traced}." if traced else "")
            + (f" Peak memory on the fullest device: {memory}." if memory else "")
            + " What the model leaves out is in parbench's docs/prediction.md.", "",
            markdown_table(rows, headings), "", "![predictions](predictions.png)", ""]


def _settings_suffix(record: pd.Series) -> str:
    settings = record.get("settings")
    return f" ({settings})" if isinstance(settings, str) and settings else ""


def _interval(record: pd.Series, prefix: str) -> str:
    """` [low, high]` from the record's `{prefix}_low(_s)` and `_high(_s)` columns, or nothing."""
    unit = "_s" if prefix == "step_time" else ""
    low, high = record.get(f"{prefix}_low{unit}"), record.get(f"{prefix}_high{unit}")
    return "" if low is None or high is None or pd.isna(low) or pd.isna(high) \
        else f" [{cell(low)}, {cell(high)}]"


def _signed(error: float) -> str:
    return "-" if pd.isna(error) else f"{error:+.1%}"
