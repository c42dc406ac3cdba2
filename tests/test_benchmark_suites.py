"""The asv and pytest-benchmark suites load and are wired as documented (measuring with them
is done by `asv run` and `pytest --benchmark-only`, not here)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import plain_pytest_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_asv_check_finds_no_problems():
    done = subprocess.run([sys.executable, "-m", "asv", "check", "--python=same"], cwd=ROOT,
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No problems found" in done.stdout


@pytest.mark.timeout(240)
def test_plain_pytest_skips_the_benchmarks_and_benchmark_only_selects_them():
    # Both at once: each is mostly an interpreter importing torch, one per core.
    processes = [subprocess.Popen([sys.executable, "-m", "pytest", "benchmarks", *flags],
                                  cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                  env=plain_pytest_env())
                 for flags in (["-q", "-rs"], ["--benchmark-only", "--collect-only", "-q"])]
    try:
        plain, listed = (process.communicate(timeout=200)[0] for process in processes)
    finally:
        for process in processes:
            process.kill()
    assert processes[0].returncode == 0, plain
    assert "run it with pytest --benchmark-only" in plain
    assert " passed" not in plain
    assert "test_training_step[single]" in listed
    assert "test_training_step[ddp]" in listed
    assert "test_training_step[data-parallel]" not in listed  # needs CUDA


def test_asv_and_pytest_benchmark_measure_exactly_the_quick_comparison(load_harness):
    """`parbench run` without --strategy, asv's first sweep and pytest-benchmark's parameters:
    the same configurations, the accumulating baselines included."""
    from parbench.cli import parser
    from parbench.commands.run import build_sweep, spec_of

    quick = build_sweep(spec_of(parser().parse_args(["run", "--devices", "cpu,cpu"])))
    assert any(config.options.get("accumulation_split") for config in quick.configs)
    asv = load_harness("benchmarks/asv/common.py")
    assert [c.key() for c in asv.sweeps()[0].configs] == [c.key() for c in quick.configs]
    benchmarked = load_harness("benchmarks/test_strategies.py").MEASURED
    assert [c.key() for c in benchmarked] == [c.key() for c in quick.configs if c.plan.runs]
    assert asv.sweeps()[0].repeats == quick.repeats == 3
