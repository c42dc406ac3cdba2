"""What every registered strategy must do, whatever it is: one step equals the baseline's, its
options refuse bad values with one line, its record has the schema, and every harness lists
it. Runs over the registry, so a new strategy is checked without a new test."""

import importlib.util
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import strategies
from parbench import suite
from parbench.cli import main
from parbench.config import Config
from parbench.devices import parse_devices
from parbench.results import FIELDS
from parbench.runner import run_config
from parbench.verify import verify

ROOT = Path(__file__).resolve().parents[2]
CPU2 = parse_devices("cpu,cpu")
NAMES = strategies.names()
# Micro-batches of 2 for the strategies that take a split (the verifier's baseline accumulates
# over the same ones); every other option at its default.
OPTIONS = {"split_size": 2}

# A bad value for every option a strategy may take, and what the one-line refusal says. A new
# option needs its row here (test_every_option_has_a_bad_value_case); None: a plain switch.
BAD_VALUES = {
    "split_size": (["--split-size", "0"], "--split-size must be at least 1, got 0"),
    "stages": (["--stages", "1"], "--stages must be at least 2, got 1"),
    "balance": (["--balance", "random"], "unknown balance 'random'"),
    "world_size": (["--world-size", "0"], "--world-size must be at least 1, got 0"),
    "bucket_cap_mb": (["--bucket-cap-mb", "0"], "--bucket-cap-mb must be above 0"),
    "sync_batchnorm": (["--sync-batchnorm"], "SyncBatchNorm runs on CUDA devices only"),
    "gradient_as_bucket_view": None,
    "static_graph": None,
}


def _skip_where_it_cannot_run(name: str, workload) -> None:
    reason = strategies.skip_reason(name, workload, CPU2.logical)
    if reason:
        pytest.skip(f"{name} cannot run on cpu,cpu here: {reason}")


def _load(path: Path):
    """A harness module by its path (benchmarks/ is not an installed package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", NAMES)
def test_one_step_equals_the_baseline(name, tiny_workload, child_pids):
    workload = replace(tiny_workload, image_size=64)  # BatchNorm well conditioned at layer4
    _skip_where_it_cannot_run(name, workload)
    [verdict] = verify(workload, CPU2, [name], 8, OPTIONS, tolerance=1e-5)
    assert verdict.error is None, verdict.error
    assert verdict.baseline_update > 1e-4  # the step really moved the parameters
    assert verdict.max_abs_difference <= 1e-5, verdict
    assert child_pids() == []


def test_every_option_has_a_bad_value_case():
    taken = {option for name in NAMES for option in strategies.accepted_options(name)}
    assert taken <= set(BAD_VALUES), f"add a bad value for {sorted(taken - set(BAD_VALUES))}"


@pytest.mark.parametrize("name", NAMES)
def test_bad_option_values_are_refused_with_one_line(name, capsys):
    cases = [BAD_VALUES[o] for o in strategies.accepted_options(name) if BAD_VALUES[o]]
    if not cases:
        pytest.skip(f"{name} takes no option with a bad value")
    for argv, message in cases:
        status = main(["run", "--strategy", name, "--devices", "cpu,cpu", *argv])
        out, err = capsys.readouterr()
        assert status == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", NAMES)
def test_its_record_has_the_schema(name, tiny_workload):
    workload = replace(tiny_workload, image_size=64)
    config = Config(name, workload, 8, CPU2, warmup=1, steps=1,
                    options=strategies.options_for(name, OPTIONS))
    record = run_config(config)
    assert set(FIELDS) <= set(record)
    assert record["strategy"] == name
    if strategies.skip_reason(name, workload, config.used_devices.logical):
        assert record["status"] == "skipped" and record["reason"]
        return
    assert record["status"] == "ok", record["reason"]
    assert record["throughput_ips"] > 0
    assert len(record["peak_memory_mib"]) == len(config.used_devices)
    assert record["micro_batches"] >= 1 and record["stages"] >= 1


def test_every_harness_lists_every_strategy(capsys):
    assert main(["strategies", "--devices", "cpu,cpu"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == NAMES
    assert _load(ROOT / "benchmarks" / "asv" / "common.py").STRATEGIES == NAMES
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_strategies.py", "--benchmark-only",
         "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=200).stdout
    for name in NAMES:  # each is benchmarked here, or cannot run here and says why
        reason = suite.cannot_run(name, CPU2)
        assert (f"test_training_step[{name}]" in collected) == (reason is None), reason
