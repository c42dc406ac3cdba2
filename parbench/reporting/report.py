"""Reports from result records: a run folder's README.md (environment, tables, figures) and
the index of every run in a results folder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from parbench.plots import config_label
from parbench.reporting.answers import answers, noise_floor
from parbench.reporting.markdown import cell, markdown_table
from parbench.results.folder import RunFolder, atomic_write_text, load_records
from parbench.results.record import columns, heading

__all__ = ["INDEX_BEGIN", "INDEX_END", "markdown_table", "write_index", "write_run_report"]

INDEX_BEGIN = "<!-- parbench:runs (written by `parbench report`; edit outside these lines) -->"
INDEX_END = "<!-- /parbench:runs -->"

ENVIRONMENT = (("host", "host"), ("timestamp_utc", "measured (UTC)"),
               ("git_commit", "parbench commit"), ("torch_version", "torch"),
               ("torchvision_version", "torchvision"), ("cuda_version", "CUDA"),
               ("cudnn_version", "cuDNN"), ("nccl_version", "NCCL"), ("gpu_names", "GPUs"),
               ("gpu_driver", "GPU driver"), ("cpu_model", "CPU"),
               ("cpu_cores_available", "CPU cores available"), ("python_version", "Python"),
               ("platform", "platform"))

def _environment(frame: pd.DataFrame, folder: Path) -> dict:
    environment = RunFolder(folder).read_environment()
    if environment:
        return environment
    first = frame.iloc[0]  # a folder without env.json (report --out): the records' own copy
    return {key: _plain(first.get(key)) for key, _ in ENVIRONMENT}


def _plain(value):
    """A record's value as env.json holds it: a list where the frame holds an array."""
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, str) else value


def _workload_line(frame: pd.DataFrame) -> str:
    def values(column):
        return ", ".join(str(v) for v in frame[column].dropna().unique())
    data = values("data") or "synthetic"
    return (f"{values('model')}, global batch {values('global_batch')}, "
            f"{values('image_size')} px, {values('precision')}, data: {data}; "
            f"{values('warmup_steps')} warm-up + {values('measured_steps')} measured steps")


def write_run_report(frame: pd.DataFrame, folder: Path, figures: list[Path],
                     sections: Sequence[str] = ()) -> Path:
    """folder/README.md: the answers, what ran where, its figures, `sections` (markdown
    lines another layer adds: the advisor's predictions), every record, and what failed."""
    folder = Path(folder)
    emulated = frame["emulated"].fillna(False).astype(bool)
    lines = [f"# parbench run {folder.name}", ""]
    if emulated.any():
        shared = ", ".join(sorted(frame.loc[emulated, "physical_devices"].astype(str).unique()))
        lines += ["**Emulated devices**: several logical devices share one physical device "
                  f"({shared}). "
                  "The code paths are real; the speedups are not what as many real devices "
                  "would give.", ""]
    lines += ["## Answers", ""]
    lines += [f"- {line}" for line in answers(frame)] or ["(no ok records)"]
    lines += [f"- {line}" for line in noise_floor(frame)]
    if "interval_method" in frame and frame["interval_method"].notna().any():
        lines += ["", f"Intervals: {frame['interval_method'].dropna().iloc[0]}."]
    lines += ["", f"Workload: {_workload_line(frame)}.", "",
              _provenance(folder, _environment(frame, folder)), "", "## Figures", ""]
    lines += [f"![{path.stem}]({path.name})" for path in figures] or ["(no ok records to draw)"]
    rows = [[config_label(r).replace("\n", " "), r["model"], r["global_batch"],
             *[r.get(column) for column in columns("readme")]] for _, r in frame.iterrows()]
    lines += ["", *sections, "## Records", "",
              markdown_table(rows, ["strategy", "model", "batch",
                                    *map(heading, columns("readme"))]),
              ""]
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        lines += ["Not measured:", ""]
        lines += [f"- {config_label(r).replace(chr(10), ' ')} on {r['devices']}: "
                  f"{r['status']}, {r.get('reason')}" for _, r in failed.iterrows()]
        lines.append("")
    environment = _environment(frame, folder)
    sources = frame["memory_source"].dropna()
    source = cell(sources.iloc[0]) if len(sources) else "-"
    lines += ["## Environment", "",
              markdown_table([[label, environment.get(key)] for key, label in ENVIRONMENT
                              if environment.get(key) not in (None, "", [])],
                             ["", "value"]), "",
              "Throughput is images over the wall time of the measured steps, every device "
              "synchronised around each step; memory is the peak per logical device "
              f"({source}). "
              f"{_MFU_NOTE if frame['mfu'].notna().any() else ''}"
              "Every field is described in parbench's docs/results.md; the records are in "
              "`records.json` and `records.csv` beside this file.", ""]
    path = folder / "README.md"
    atomic_write_text(path, "\n".join(lines))
    return path


_MFU_NOTE = ("MFU is the achieved FLOP/s over the dense peak of the GPUs used at the "
             "precision trained in (TF32 for fp32), counting 2 FLOPs per multiply-accumulate "
             "and a step's forward and backward as torch.utils.flop_counter does "
             "(parbench/measure/flops.py). ")


def _command(folder: Path) -> dict:
    try:
        command = json.loads((folder / "command.json").read_text())
    except (OSError, ValueError):
        return {}
    return command if isinstance(command, dict) else {}


def _experiment(folder: Path) -> str | None:
    """The named experiment that made the run (its command.json says), if any."""
    return _command(folder).get("experiment")


def _provenance(folder: Path, environment: dict) -> str:
    commit = environment.get("git_commit") or "unknown"
    command = _command(folder)
    experiment = command.get("experiment")
    flags = "".join(f" {flag}" for flag in command.get("experiment_flags") or [])
    made = (f"`parbench run --experiment {experiment}{flags}` "
            f"(parbench/experiments/{experiment}.json)" if experiment else
            "`parbench run` with the arguments in `command.json`" if command else "`parbench run`")
    return f"Made by {made} at parbench commit `{commit}`."


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
    return [name, _experiment(folder) or "-", first.get("host"),
            " / ".join(frame["devices"].astype(str).unique()),
            bool(frame["emulated"].fillna(False).astype(bool).any()),
            ", ".join(frame["strategy"].astype(str).unique()),
            f"{len(ok)} / {len(frame)}",
            _fastest_on_its_workload(best) if best is not None else "-"]


def _fastest_on_its_workload(best: pd.Series) -> str:
    """The run's fastest configuration with the workload it ran: runs measure different
    models, batches, image sizes and devices, so their throughputs compare only where those
    match."""
    precision = best.get("precision")
    dtype = f", {precision}" if isinstance(precision, str) and precision != "fp32" else ""
    return (f"{best['throughput_ips']:.3g} img/s: {best['strategy']} on {best['devices']}; "
            f"{best['model']}, batch {best['global_batch']}, {best['image_size']} px{dtype}")


def write_index(results_dir: Path) -> Path:
    """results_dir/README.md's table of runs, between its markers (the text around them is
    kept; the block is appended if the markers are missing)."""
    results_dir = Path(results_dir)
    rows = [row for folder in sorted(p for p in results_dir.iterdir() if p.is_dir())
            if (folder / "records.json").is_file() and (row := _run_summary(folder))]
    table = markdown_table(rows, ["run", "experiment", "host", "devices", "emulated", "strategies",
                                  "ok / configurations",
                                  "fastest (img/s), on its run's workload"])
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
