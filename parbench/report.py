"""Reports from result records: a run folder's README.md (environment, tables, figures) and
the index of every run in a results folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from parbench.plots import config_label
from parbench.results import atomic_write_text, load_records

__all__ = ["INDEX_BEGIN", "INDEX_END", "markdown_table", "results_table", "write_index",
           "write_run_report"]

INDEX_BEGIN = "<!-- parbench:runs (written by `parbench report`; edit outside these lines) -->"
INDEX_END = "<!-- /parbench:runs -->"

ENVIRONMENT = (("host", "host"), ("timestamp_utc", "measured (UTC)"),
               ("git_commit", "parbench commit"), ("torch_version", "torch"),
               ("torchvision_version", "torchvision"), ("cuda_version", "CUDA"),
               ("cudnn_version", "cuDNN"), ("nccl_version", "NCCL"), ("gpu_names", "GPUs"),
               ("gpu_driver", "GPU driver"), ("cpu_model", "CPU"),
               ("cpu_cores_available", "CPU cores available"), ("python_version", "Python"),
               ("platform", "platform"))

COLUMNS = (("status", "status"), ("devices", "devices"), ("precision", "precision"),
           ("channels_last", "channels last"), ("compile", "compiled"), ("micro_batches", "M"),
           ("throughput_ips", "img/s"), ("step_time_median_s", "median step s"),
           ("step_time_p90_s", "p90 step s"), ("speedup_vs_baseline", "speedup"),
           ("device_efficiency", "efficiency"), ("scaling_efficiency", "scaling"),
           ("peak_memory_max_mib", "peak MiB"), ("memory_imbalance", "mem max/mean"),
           ("gpu_utilisation_pct", "GPU util %"), ("images_per_joule", "img/J"))


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):  # one value per device
        return ", ".join(_cell(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _environment(frame: pd.DataFrame, folder: Path) -> dict:
    env_file = folder / "env.json"
    if env_file.is_file():
        try:
            return json.loads(env_file.read_text())
        except json.JSONDecodeError:
            pass
    first = frame.iloc[0]
    return {key: first.get(key) for key, _ in ENVIRONMENT}


def _workload_line(frame: pd.DataFrame) -> str:
    def values(column):
        return ", ".join(str(v) for v in frame[column].dropna().unique())
    data = values("data") or "synthetic"
    return (f"{values('model')}, global batch {values('global_batch')}, "
            f"{values('image_size')} px, {values('precision')}, data: {data}; "
            f"{values('warmup_steps')} warm-up + {values('measured_steps')} measured steps")


def write_run_report(frame: pd.DataFrame, folder: Path, figures: list[Path]) -> Path:
    """folder/README.md: what ran where, its figures, every record, and what failed."""
    folder = Path(folder)
    emulated = frame["emulated"].fillna(False).astype(bool)
    lines = [f"# parbench run {folder.name}", ""]
    if emulated.any():
        shared = ", ".join(sorted(frame.loc[emulated, "physical_devices"].astype(str).unique()))
        lines += ["**Emulated devices**: several logical devices share one physical device "
                  f"({shared}). "
                  "The code paths are real; the speedups are not what as many real devices "
                  "would give.", ""]
    lines += [f"Workload: {_workload_line(frame)}.", "",
              "## Figures", ""]
    lines += [f"![{path.stem}]({path.name})" for path in figures] or ["(no ok records to draw)"]
    rows = [[config_label(r).replace("\n", " "), r["model"], r["global_batch"],
             *[r.get(column) for column, _ in COLUMNS]] for _, r in frame.iterrows()]
    lines += ["", "## Records", "",
              markdown_table(rows, ["strategy", "model", "batch", *[h for _, h in COLUMNS]]),
              ""]
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        lines += ["Not measured:", ""]
        lines += [f"- {config_label(r).replace(chr(10), ' ')} on {r['devices']}: "
                  f"{r['status']}, {r.get('reason')}" for _, r in failed.iterrows()]
        lines.append("")
    environment = _environment(frame, folder)
    sources = frame["memory_source"].dropna()
    source = _cell(sources.iloc[0]) if len(sources) else "-"
    lines += ["## Environment", "",
              markdown_table([[label, environment.get(key)] for key, label in ENVIRONMENT
                              if environment.get(key) not in (None, "", [])],
                             ["", "value"]), "",
              "Throughput is images over the wall time of the measured steps, every device "
              "synchronised around each step; memory is the peak per logical device "
              f"({source}). "
              "Every field is described in parbench's README; the records are in "
              "`records.json` and `records.csv` beside this file.", ""]
    path = folder / "README.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def _run_summary(folder: Path) -> list | None:
    try:
        frame = load_records(folder)
    except (OSError, ValueError):
        return None
    if frame.empty or "strategy" not in frame:
        return None
    ok = frame[frame["status"] == "ok"]
    best = ok.loc[ok["throughput_ips"].idxmax()] if len(ok) else None
    name = f"[{folder.name}]({folder.name}/README.md)" if (folder / "README.md").is_file() \
        else folder.name
    first = frame.iloc[0]
    return [name, first.get("host"), " / ".join(frame["devices"].astype(str).unique()),
            bool(frame["emulated"].fillna(False).astype(bool).any()),
            ", ".join(frame["strategy"].astype(str).unique()),
            f"{len(ok)} / {len(frame)}",
            f"{best['throughput_ips']:.3g} ({best['strategy']})" if best is not None else "-"]


def write_index(results_dir: Path) -> Path:
    """results_dir/README.md's table of runs, between its markers (the text around them is
    kept; the block is appended if the markers are missing)."""
    results_dir = Path(results_dir)
    rows = [row for folder in sorted(p for p in results_dir.iterdir() if p.is_dir())
            if (folder / "records.json").is_file() and (row := _run_summary(folder))]
    table = markdown_table(rows, ["run", "host", "devices", "emulated", "strategies",
                                  "ok / configurations", "best img/s"])
    block = f"{INDEX_BEGIN}\n{table}\n{INDEX_END}"
    path = results_dir / "README.md"
    text = path.read_text() if path.is_file() else "# results\n"
    if INDEX_BEGIN in text and INDEX_END in text:
        before, rest = text.split(INDEX_BEGIN, 1)
        text = before + block + rest.split(INDEX_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## All runs\n\n" + block + "\n"
    atomic_write_text(path, text)
    return path


def _format_number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


# The table printed after a run: record field -> column heading.
_TABLE = {
    "strategy": "strategy", "model": "model", "global_batch": "batch", "image_size": "px",
    "devices": "devices", "emulated": "emulated", "status": "status", "micro_batches": "M",
    "bubble_fraction": "bubble", "throughput_ips": "img/s", "step_time_median_s": "median s",
    "step_time_p90_s": "p90 s", "speedup_vs_baseline": "speedup",
    "device_efficiency": "efficiency", "scaling_efficiency": "scaling",
    "peak_memory_max_mib": "peak MiB", "memory_imbalance": "mem max/mean",
    "achieved_tflops": "TFLOP/s",
}


def results_table(frame: pd.DataFrame) -> str:
    """The records as the text table printed after a run, then why each configuration that
    is not ok is not, and every steady memory rise."""
    table = frame[list(_TABLE)].rename(columns=_TABLE)
    numeric = [h for k, h in _TABLE.items() if k not in (
        "strategy", "model", "global_batch", "image_size", "devices", "emulated", "status")]
    for column in numeric:
        table[column] = pd.to_numeric(table[column], errors="coerce")  # None -> NaN -> "-"
    table["memory trend"] = frame["memory_leak_suspected"].map(
        lambda leak: "RISING" if leak is True else "-")
    lines = [table.to_string(index=False, float_format=_format_number, na_rep="-")]
    lines += [f"  {row['strategy']} {row['status']}: {row['reason']}"
              for _, row in frame[frame["status"] != "ok"].iterrows()]
    lines += [f"  {row['strategy']}: memory rose {row['memory_growth_mib_per_step']:.1f} MiB "
              "per measured step, step after step: a leak? (e.g. a loss kept as a tensor)"
              for _, row in frame[frame["memory_leak_suspected"] == True].iterrows()]  # noqa: E712
    return "\n".join(lines)
