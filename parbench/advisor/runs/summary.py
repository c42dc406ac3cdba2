"""A run's predictions summarised: the columns predictions.csv adds for a reader (the measured
interval, the link), and the run README's predicted-against-measured section read back from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from parbench.advisor.runs.ranking import ranking
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.plots.common import interval_of, options_text
from parbench.reporting.markdown import cell, markdown_table
from parbench.results.folder import load_records

__all__ = ["PREDICTIONS_FILE", "error_summary", "fixed_costs_summary", "left_out_summary",
           "left_rows", "memory_summary", "naive_summary", "prediction_section", "predicted_rows",
           "ranking_summary", "speedup_summary", "trace_summary", "with_reader_columns"]

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


def naive_summary(table: pd.DataFrame) -> str | None:
    """The naive estimate's median and worst |error| on the same records, and how much of it
    the model removes (None where predictions.csv predates the naive column)."""
    if "naive_error" not in table or table["naive_error"].isna().all():
        return None
    naive, model = table["naive_error"].abs(), table["prediction_error"].abs()
    return (f"the naive estimate (the profiled single step; a pipeline x (1 + (K - 1) / M) / K, "
            f"GPipe's bubble; data parallel / N) on the same records: median |error| "
            f"{naive.median():.1%}, worst {naive.max():.1%}; the model's median is "
            f"{model.median() / naive.median():.2f} of it")


def ranking_summary(table: pd.DataFrame) -> str | None:
    """How the model, and the naive estimate, order the run's configurations against the
    measured order (None where no record has trials to decide a pair)."""
    if "trials" not in table or not table["trials"].map(lambda t: isinstance(t, list)).any():
        return None
    text = f"order: the model puts {ranking(table).describe()}"
    if "naive_step_time_s" in table:
        naive = ranking(table, "naive_step_time_s")
        if naive.decided:
            text += (f"; the naive estimate {naive.ordered} of {naive.decided} "
                     f"({naive.share:.0%}" + (f"; {naive.tied} it gives the same step"
                                              if naive.tied else "") + ")")
    return text


def memory_summary(table: pd.DataFrame) -> str | None:
    """Median and worst |error| of the fullest device's predicted peak memory (None where no
    record measured one), as the measured figure counts it (parbench.advisor.models.memory: without
    FSDP's gathered units). Records measured before DDP's buckets were counted (their
    memory_source does not name them) leave the buckets out, so their ddp errors read high;
    versions 1-4 also counted fsdp's gathered units."""
    if "memory_error" not in table or table["memory_error"].isna().all():
        return None
    errors = table["memory_error"].dropna().abs()
    sources = table.get("memory_source", pd.Series(dtype=object))
    sources = sources.astype(object).fillna("").astype(str)  # all missing: float64 NaNs
    uncounted = sources.str.startswith("tensors") & ~sources.str.contains("bucket")
    versions = table.get("predictor_version", pd.Series([PREDICTOR_VERSION]))
    scope = ("ddp's and fsdp's predictions count their buckets and gathered parameters, the "
             "measured figure does not" if versions.min() < 5 else  # as versions 1-4 did
             "ddp's predictions count its buckets, which these records' measured figure "
             "does not" if uncounted.any() else
             "as the measured figure counts it: tensors and DDP's buckets, not FSDP's gathered "
             "units")
    return (f"median |error| {errors.median():.1%}, worst {errors.max():.1%} over {len(errors)} "
            f"configurations ({scope})")


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


def fixed_costs_summary(table: pd.DataFrame) -> str | None:
    """What the probes' fixed costs add to the predicted steps (as version 8 on counts them),
    and any probe that failed (None where no record was probed)."""
    if "fixed_cost_probe" not in table or table["fixed_cost_probe"].isna().all():
        return None
    probed = table[table["fixed_cost_probe"].notna()]
    failed = probed[probed["fixed_cost_probe"].str.startswith("probe failed")]
    measured = probed.drop(failed.index)
    parts = []
    if not measured.empty:
        share = measured["predicted_fixed_cost_s"] / measured["predicted_step_time_s"]
        parts.append(f"fixed costs measured by a probe on this device for {len(measured)} "
                     f"configurations: {share.median():.0%} of their predicted step on the "
                     f"median ({share.min():.0%} to {share.max():.0%})")
    parts += [f"{r['strategy']}{_settings_suffix(r)}: {r['fixed_cost_probe']}"
              for _, r in failed.iterrows()]
    return "; ".join(parts)


def prediction_section(folder: Path) -> list[str]:
    """The README lines for folder's predictions.csv (none when `parbench predict RUN` has not
    been run on it)."""
    path = Path(folder) / PREDICTIONS_FILE
    if not path.exists():
        return []
    table = pd.read_csv(path)
    table, left = predicted_rows(table), left_rows(table)
    if table.empty:
        return []
    table = _with_trials(table, Path(folder))
    speedups = "speedup_error" in table and table["speedup_error"].notna().any()
    naive = "naive_error" in table and table["naive_error"].notna().any()
    workloads = table[["model", "global_batch", "image_size"]].drop_duplicates()
    several = len(workloads) > 1
    rows = [([f"{r['model']}, batch {r['global_batch']}, {r['image_size']}px"] if several
             else [])
            + [f"{r['strategy']}{_settings_suffix(r)}", r["world_size"],
               f"{cell(r['step_time_median_s'])}{_interval(r, 'step_time')}",
               f"{cell(r['predicted_step_time_s'])}{_interval(r, 'predicted')}",
               f"{r['prediction_error']:+.1%}"]
            + ([_signed(r["naive_error"])] if naive else [])
            + ([f"{cell(r['speedup_vs_baseline'])}{_interval(r, 'speedup')}",
                r["predicted_speedup"], _signed(r["speedup_error"])] if speedups else [])
            for _, r in table.iterrows()]
    headings = ((["workload"] if several else [])
                + ["configuration", "ranks", "measured step (s) [95%]",
                   "PREDICTED step (s) [profile's quartiles]", "error"]
                + (["naive error"] if naive else [])
                + (["measured speedup [95%]", "PREDICTED speedup", "error"] if speedups else []))
    traced, memory = trace_summary(table), memory_summary(table)
    lines = ["## Predicted against measured", "",
             f"Each configuration's step PREDICTED by `parbench predict` (a timing model from a "
             f"per-block profile of this device; link: {table['link'].iloc[0]}) beside the "
             f"measured one: {error_summary(table)}."
             + (f" Speedups over single on the whole batch, each side from its own source (a "
                f"drift of the machine that slowed every profile alike cancels): "
                f"{speedup_summary(table)}." if speedups else "")
             + (f" Told apart: {traced}." if traced else "")
             + (f" Peak memory on the fullest device: {memory}." if memory else "")
             + " What the model leaves out is in parbench's docs/prediction.md.", "",
             *[f"- {line}." for line in (naive_summary(table), ranking_summary(table),
                                        left_out_summary(left), _version_line(table))
               if line], "",
             markdown_table(rows, headings), "", "![predictions](predictions.png)", ""]
    if (Path(folder) / "ranking.png").is_file():
        lines += ["![ranking](ranking.png)", ""]
    return lines


def predicted_rows(table: pd.DataFrame) -> pd.DataFrame:
    """predictions.csv's rows that hold a prediction (the others name why they have none)."""
    if "not_predicted" not in table:
        return table
    return table[table["not_predicted"].isna()].reset_index(drop=True)


def left_rows(table: pd.DataFrame) -> pd.DataFrame:
    """predictions.csv's measured records that have no prediction, with why."""
    if "not_predicted" not in table:
        return table.iloc[0:0]
    return table[table["not_predicted"].notna()].reset_index(drop=True)


def left_out_summary(left: pd.DataFrame) -> str | None:
    """Each measured configuration not predicted, and why (None: every one was)."""
    if left.empty:
        return None
    return (f"not predicted, {len(left)} measured configuration{'s' * (len(left) > 1)}: "
            + "; ".join(f"{r['strategy']}{_settings_suffix(r)} on {int(r['world_size'])} "
                        f"rank{'s' * (int(r['world_size']) != 1)}: {r['not_predicted']}"
                        for _, r in left.iterrows()))


def _with_trials(table: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """predictions.csv's rows with their records' trials (a CSV keeps them as text), matched
    by configuration."""
    try:
        records = load_records(folder)
    except (OSError, ValueError):
        return table
    if "trials" not in records or "config_index" not in table:
        return table
    trials = dict(zip(records["config_index"], records["trials"], strict=True))
    return table.assign(trials=table["config_index"].map(trials))


def _version_line(table: pd.DataFrame) -> str | None:
    if "predictor_version" not in table:
        return "predicted by a version of the models from before they were versioned"
    versions = ", ".join(str(v) for v in table["predictor_version"].dropna().unique())
    return (f"predicted by version {versions} of the models (parbench/advisor/version.py); "
            "the profiles they were made from are in this folder's profiles/")


def _settings_suffix(record: pd.Series) -> str:
    settings = record.get("settings")
    return f" ({settings})" if isinstance(settings, str) and settings else ""


def _interval(record: pd.Series, prefix: str) -> str:
    """` [low, high]` from the record's `{prefix}_low(_s)` and `_high(_s)` columns (a step's
    measured interval, a prediction's band, a speedup's interval), or nothing."""
    unit = "_s" if prefix in ("step_time", "predicted") else ""
    low, high = record.get(f"{prefix}_low{unit}"), record.get(f"{prefix}_high{unit}")
    return "" if low is None or high is None or pd.isna(low) or pd.isna(high) \
        else f" [{cell(low)}, {cell(high)}]"


def _signed(error: float) -> str:
    return "-" if pd.isna(error) else f"{error:+.1%}"
