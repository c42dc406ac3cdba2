"""What each part of the GPU reference run measured, read back from its run folders when the
part ends (its summary.json): throughputs with their 95% intervals over trials, and the
ratios a part is for paired by round (parbench.results.stats), beside timm's own loop."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _parbench(module: str) -> ModuleType:
    """A module of parbench, from the source tree: the run installs parbench after this
    process started, and an editable install's path file is read only at a start."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    return importlib.import_module(f"parbench.{module}")


def _stats() -> ModuleType:
    return _parbench("results.stats")


def records(folder: Path) -> list[dict]:
    """The records of the parbench runs a part's steps wrote."""
    return [r for path in sorted(folder.glob("*/records.json"))
            for r in json.loads(path.read_text())]


def label(record: dict) -> str:
    """A configuration as a summary names it: strategy, options, how it was compiled (as
    parbench's figures label it), the job."""
    options = ", ".join(f"{k}={v}" for k, v in sorted((record.get("strategy_options") or {})
                                                      .items()))
    compiled = _parbench("plots.common").compile_label(record)
    return (f"{record['strategy']}{f' ({options})' if options else ''}"
            f"{'' if compiled == 'eager' else ' ' + compiled} "
            f"{record['model']} {record['precision']} batch {record['global_batch']} "
            f"{record['image_size']}px")


def by_round(record: dict) -> dict[int, float]:
    """The record's throughput in each round (its A/A twin left out)."""
    return {trial["round"]: trial["throughput_ips"] for trial in record.get("trials") or []
            if trial.get("status") == "ok" and not trial.get("twin")
            and trial.get("throughput_ips")}


def _figure(values: list[float]) -> dict:
    """A geometric mean with its 95% interval (none from one value) and the trials."""
    bounds = _stats().interval(values)
    return {"mean": _round(_stats().centre(values)), "interval_95": _rounded(bounds),
            "trials": len(values)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _rounded(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)]


def ratio(numerator: dict, denominator: dict) -> dict:
    """numerator's throughput over denominator's, paired by round, with its 95% interval."""
    return _figure(_stats().paired_ratios(by_round(numerator), by_round(denominator)))


def throughputs(found: list[dict]) -> dict:
    """Each measured configuration's img/s over its trials (95% interval), and MFU."""
    return {label(r): {**_figure(list(by_round(r).values())), "mfu": r.get("mfu")}
            for r in found if r["status"] == "ok"}


def _one(found: list[dict], test: Callable[[dict], bool]) -> dict | None:
    matches = [r for r in found if r["status"] == "ok" and test(r)]
    return matches[0] if len(matches) == 1 else None


def _is_single_whole(record: dict) -> bool:
    return (record["strategy"] == "single" and not record.get("compile")
            and not (record.get("strategy_options") or {}).get("accumulation_split"))


def attribution(folder: Path) -> dict:
    """Model-parallel over single on one GPU as two (paired by round), and each configuration's
    img/s: after the harness fix, the two should be within noise."""
    found = records(folder)
    single = _one(found, _is_single_whole)
    staged = _one(found, lambda r: r["strategy"] == "model-parallel")
    summary = {"throughputs": throughputs(found)}
    if single and staged:
        summary["model_parallel_over_single"] = {**ratio(staged, single),
                                                 "verdict": staged.get("verdict")}
    return summary


def _mean(record: dict) -> float:
    """The record's geometric mean throughput over its trials."""
    return _stats().centre(list(by_round(record).values())) or float("nan")


def timm_throughputs(folder: Path) -> list[float]:
    """timm's own loop's img/s, one per run of its benchmark.py (timm-<n>.log)."""
    found = []
    for log in sorted(folder.glob("timm*.log")):
        figures = re.findall(r'"(?:train_)?samples_per_sec":\s*([0-9.]+)', log.read_text())
        if figures:
            found.append(float(figures[-1]))
    return found


def compile_modes(folder: Path) -> dict:
    """Each compile scope and mode's img/s against eager (paired by round) and against timm's
    own loop on the same job (the mean of its runs, unpaired)."""
    found = records(folder)
    eager = _one(found, lambda r: r["strategy"] == "single" and not r.get("compile"))
    timm = timm_throughputs(folder)
    timm_mean = _stats().centre(timm)
    summary: dict = {"timm_img_s": _figure(timm) if timm else None,
                     "throughputs": throughputs(found)}
    for record in found:
        if record["status"] != "ok" or record is eager:
            continue
        entry: dict = {}
        if eager is not None:
            entry["over_eager"] = ratio(record, eager)
        if timm_mean:
            entry["over_timm"] = _round(_mean(record) / timm_mean)
        summary[label(record)] = entry
    if eager is not None and timm_mean:
        summary["eager_over_timm"] = _round(_mean(eager) / timm_mean)
    return summary


def tuned_over_torch(folder: Path) -> dict:
    """ddp's and fsdp's tuned settings over torch's own defaults (--tuning), paired by round."""
    found = records(folder)
    summary: dict = {"throughputs": throughputs(found)}
    for name in ("ddp", "fsdp"):
        mine = [r for r in found if r["strategy"] == name]
        torch_own = _one(mine, lambda r: (r.get("strategy_options") or {}).get("tuning")
                         == "torch")
        tuned = _one(mine, lambda r: "tuning" not in (r.get("strategy_options") or {}))
        if torch_own and tuned:
            summary[f"{name}_tuned_over_torch"] = ratio(tuned, torch_own)
    return summary


def profiles(folder: Path) -> dict:
    """The per-operation profiles the part wrote."""
    written = sorted(str(p.relative_to(folder)) for p in folder.glob("profiles/**/*.json*"))
    return {"profiles": len(written), "files": written}


def asv_results(folder: Path) -> dict:
    """What asv measured and kept (its results files copied into the part's folder)."""
    kept = sorted(folder.glob("asv-results/**/*.json"))
    measured: dict[str, int] = {"values": 0, "failed": 0}
    for path in kept:
        if path.name in ("machine.json", "benchmarks.json"):
            continue
        results: Mapping = json.loads(path.read_text()).get("results", {})
        for value in results.values():
            first = value[0] if isinstance(value, list) and value else value
            figures = first if isinstance(first, list) else [first]
            measured["values"] += sum(x is not None for x in figures)
            measured["failed"] += sum(x is None for x in figures)
    return {"files_kept": len(kept), **measured}
