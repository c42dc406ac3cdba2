"""The GPU reference runs' files as the figure registry reads them: records, pytest's junit
files and logs, the steps' summaries, and the published tables' comparison."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from functools import cache
from pathlib import Path
from types import ModuleType

RESULTS = Path(__file__).resolve().parents[1] / "results"
FIRST_H200 = "20261126T004029Z-gpu-reference-h200"
H100 = "20261127T011008Z-gpu-reference-h100"
SECOND_H200 = "20261127T111514Z-gpu-reference-h200"

# The run folders, under results/, that the figures come from.
H200_224 = f"{FIRST_H200}/4-resnet50-224"
H200_COMPILED = f"{FIRST_H200}/5-resnet50-224-large/20261126T005406Z-compiled"
H200_TUTORIAL = f"{FIRST_H200}/6-tutorial/20261126T004756Z-tutorial"
H200_DATA_PARALLEL = f"{FIRST_H200}/7-data-parallel/20261126T005041Z-data-parallel"
H100_PART_B = f"{H100}/2-part-b/b-attribution-128px/20261127T011451Z-pipelines"
H100_TIMM = f"{H100}/1-default/c-resnet50-224px-bf16"
PART_E = f"{SECOND_H200}/1-parts-a-e/e-data-parallel-and-slow"
PART_E_RUN = f"{PART_E}/20261127T111707Z-data-parallel"
SECOND_H200_CHANNELS_LAST = f"{PART_E}/20261127T111955Z-bf16-channels-last"


@cache
def _records(folder: str) -> tuple[dict, ...]:
    paths = sorted((RESULTS / folder).glob("**/records.json"))
    return tuple(r for path in paths for r in json.loads(path.read_text()))


def records(folder: str, strategy: str | None = None, **fields) -> list[dict]:
    """The ok records under results/`folder` (its run folders included) of `strategy` whose
    fields equal `fields` (`options` matches strategy_options)."""
    options = fields.pop("options", None)
    return [r for r in _records(folder) if r["status"] == "ok"
            and (strategy is None or r["strategy"] == strategy)
            and (options is None or r["strategy_options"] == options)
            and all(r.get(key) == value for key, value in fields.items())]


def record(folder: str, strategy: str = "single", **fields) -> dict:
    """The one ok record under `folder` that matches (see `records`)."""
    [found] = records(folder, strategy, **fields)
    return found


def trials(found: dict) -> dict[int, list[float]]:
    """A record's trials' median step times (s), by round."""
    by_round: dict[int, list[float]] = {}
    for trial in found["trials"]:
        by_round.setdefault(trial["round"], []).append(trial["step_time_median_s"])
    return by_round


def junit(path: str) -> Counter:
    """A junit file's test cases by outcome: passed, failure, error, skipped."""
    outcomes: Counter = Counter()
    for case in ET.parse(RESULTS / path).getroot().iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[tags[0] if tags else "passed"] += 1
    return outcomes


def junit_text(path: str) -> str:
    """Every failure message of a junit file, one after another."""
    return "\n".join(failure.get("message", "") + (failure.text or "")
                     for failure in ET.parse(RESULTS / path).getroot().iter("failure"))


def log_outcomes(path: str) -> tuple[Counter, int]:
    """A verbose pytest log cut before its summary: each test's outcome as printed, and how
    many tests pytest selected."""
    text = (RESULTS / path).read_text()
    outcomes = Counter(re.findall(r"^tests/\S+ .*?\b(PASSED|FAILED|SKIPPED)\b", text, re.M))
    [selected] = re.findall(r"collected \d+ items / \d+ deselected / (\d+) selected", text)
    return outcomes, int(selected)


def collected(path: str) -> int:
    [count] = re.findall(r"collected (\d+) items", (RESULTS / path).read_text())
    return int(count)


def summary(path: str) -> dict:
    return json.loads((RESULTS / path / "summary.json").read_text())


def diagnosis(path: str) -> dict[int, float]:
    """diag.txt's transients (MiB) by the profile's micro-batch."""
    text = (RESULTS / path).read_text()
    return {int(batch): float(transient) for batch, transient in
            re.findall(r"^batch (\d+): .*?transient ([\d.]+)", text, re.M)}


def markdown_table(path: str) -> list[dict[str, str]]:
    """The first table of a markdown file under results/: each row's cells by their header."""
    lines = (RESULTS / path).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, *rows = table
    return [dict(zip(header, row, strict=True)) for row in rows]


@cache
def published_tables() -> dict[str, dict[str, str]]:
    """results/published-tables/comparison.md's rows by their name."""
    return {row["row"]: row for row in markdown_table("published-tables/comparison.md")}


def junit_suite(path: str) -> dict:
    """A junit file's test count and pytest's time for them."""
    root = ET.parse(RESULTS / path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, path
    return {"tests": int(suite.get("tests", 0)), "time": float(suite.get("time", 0))}


def step_seconds(path: str, step: str) -> float:
    """A step's seconds in a GPU run's steps.json."""
    [found] = [s for s in json.loads((RESULTS / path).read_text()) if s["step"] == step]
    return float(found["seconds"])


@cache
def estimates() -> ModuleType:
    """The GPU plan's estimates (benchmarks/gpu/reference_estimates.py), as a module."""
    path = RESULTS.parent / "benchmarks" / "gpu" / "reference_estimates.py"
    spec = importlib.util.spec_from_file_location("reference_estimates_figures", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
