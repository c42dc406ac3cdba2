"""The front page's quotes, recomputed from the files they come from: the quick comparison's
pasted output (what `parbench run` prints from the published run's records), the hero's caption
(the tutorial run's own report, itself written again from its records by
test_published_results.py) and the recommend check's figures (from its experiment's stored
sweeps and finals, as benchmarks/recommend/experiment_report.py reads them)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from parbench.reporting.answers import results_table
from parbench.results.folder import load_records

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICK_RUN = "results/20261129T003154Z-resnet18-128px-2cpu"
HERO_RUN = "results/20261125T081039Z-tutorial-pinned-splits-5-20"
RECOMMEND_RUN = ROOT / "results" / "20261127T161554Z-recommend-experiment"
# The pages quoting the recommend check, and those quoting it in full (with the baselines).
RECOMMEND_PAGES = ("README.md", "docs/evidence.md")
RECOMMEND_FULL_PAGES = ("docs/evidence.md",)


def _flat(text: str) -> str:
    """A page as figures are quoted from it: escaped table pipes as pipes, whitespace runs as
    one space."""
    return re.sub(r"\s+", " ", text.replace("\\|", "|"))


def _pasted_output() -> list[str]:
    """The lines of README.md's "What it prints" block."""
    section = README.read_text().split("## What it prints", 1)[1]
    block = re.search(r"```text\n(.*?)\n```", section, re.DOTALL)
    assert block, "README.md's 'What it prints' section lost its ```text block"
    return block.group(1).splitlines()


def test_the_pasted_output_is_what_the_published_run_prints():
    folder = ROOT / QUICK_RUN
    printed = results_table(load_records(folder), Path(QUICK_RUN)).splitlines()
    pasted = _pasted_output()
    *table, last = pasted
    assert last == f"results: {QUICK_RUN}", "the block ends with the folder `parbench run` names"
    assert table == printed[:len(table)], (
        "README.md's pasted output differs from what the quick comparison's records print: "
        f"paste the first {len(table)} lines of results_table() for {QUICK_RUN} again")
    assert len(table) >= 14, "the pasted table lost its rows (a header and 13 configurations)"


def test_the_pasted_run_is_the_quick_comparison():
    """`parbench run` with no arguments: every strategy that runs here, resnet18 at 128 px,
    batch 32, 3 trials of 1 + 3 steps: 13 configurations (single twice, on the whole batch and
    accumulating)."""
    command = json.loads((ROOT / QUICK_RUN / "command.json").read_text())
    assert command["strategies"] is None and command["experiment"] is None
    assert (command["models"], command["batch_sizes"], command["image_sizes"]) == (
        ["resnet18"], [32], [128])
    assert (command["warmup"], command["steps"], command["repeats"]) == (1, 3, 3)
    records = load_records(ROOT / QUICK_RUN)
    assert len(records) == 13 and records["strategy"].nunique() == 12
    assert (records["status"] == "ok").all()


def _hero_caption() -> str:
    text = README.read_text()
    image = text.index("![", 0)
    return _flat(text[image:text.index("## Quickstart")])


def test_the_hero_caption_quotes_the_tutorial_runs_report():
    """Every bracketed interval the caption quotes (a figure and its 95% interval) is in the
    run's own report, which its records write."""
    report = _flat((ROOT / HERO_RUN / "README.md").read_text())
    quoted = re.findall(r"\d+(?:\.\d+)? \[\d+(?:\.\d+)?, \d+(?:\.\d+)?\]", _hero_caption())
    assert len(quoted) >= 3, "the caption quotes the speedup and its two causes"
    missing = [figure for figure in quoted if figure not in report]
    assert not missing, f"the hero's caption quotes {missing}, not in {HERO_RUN}/README.md"
    assert HERO_RUN in _hero_caption(), "the caption links its run"


@pytest.fixture(scope="module")
def recommend_check():
    """The recommend experiment's judged figures from its stored measurements: the pick's
    hits, always single's, random's expected hits, the mean regrets and the memory calls."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "recommend"))
    try:
        from experiment_baselines import hit_rates, workload_baselines
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "recommend"))
    cases = json.loads((RECOMMEND_RUN / "experiment.json").read_text())["workloads"]
    baselines = [workload_baselines(RECOMMEND_RUN, case) for case in cases]
    rates = hit_rates(cases, baselines)
    fits = [b["single_regret"] for b in baselines if b["single_regret"] is not None]
    picks = [c["confirmed_pick_regret"] for c in cases]
    n = len(cases)
    return dict(
        pick=f"within 5% of the measured best in {rates['pick']['hits']} of {n} workloads",
        single=f"always `single` {rates['single']['hits']} of {n}",
        random=f"{rates['random']['hits']:.2f} of {n} expected",
        regrets=(f"mean regret {sum(picks) / n:.1%}, single's {sum(fits) / len(fits):.1%} "
                 f"where it fits, random's "
                 f"{sum(b['random_regret'] for b in baselines) / n:.1%}"),
        memory=(f"{sum(c['memory_calls_right'] for c in cases)} of "
                f"{sum(len(c['memory_calls']) for c in cases)} memory calls right"))


@pytest.mark.parametrize("page", RECOMMEND_PAGES)
def test_the_recommend_figures_are_its_experiments(page, recommend_check):
    text = _flat((ROOT / page).read_text())
    names = ("pick", "memory", *(("single", "random", "regrets")
                                 if page in RECOMMEND_FULL_PAGES else ()))
    missing = [recommend_check[name] for name in names if recommend_check[name] not in text]
    assert not missing, f"{page} should say, as the experiment's files do: {missing}"


def test_the_reading_of_the_pasted_run_is_what_its_records_say():
    """README.md's "Read here" line: which layouts beat one device, the fastest's speedup and
    what the micro-batches alone cost, from the run's records."""
    records = load_records(ROOT / QUICK_RUN)
    text = _flat(README.read_text())
    two = records[records["devices"] == "cpu,cpu"]
    beyond = set(two.loc[two["verdict"] == "faster", "strategy"])
    assert beyond == set(two["strategy"]) - {"model-parallel"}
    assert "every layout on two devices but model-parallel beats one device beyond the noise" \
        in text
    fastest = two.loc[two["throughput_ips"].idxmax()]
    assert f"{fastest['strategy']} is fastest ({fastest['speedup_vs_baseline']:.1f}x)" in text
    accumulating = records[[bool(options.get("accumulation_split"))
                            for options in records["strategy_options"]]].iloc[0]
    assert f"micro-batches of 4 alone cost {1 - accumulating['speedup_vs_baseline']:.0%}" in text
