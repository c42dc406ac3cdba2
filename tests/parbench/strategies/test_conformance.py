"""What every registered strategy must do, whatever it is: one step equals the baseline's, its
options refuse bad values with one line (cases made from its Options fields), its record has
the schema, it declares its layout, and every harness lists it. Runs over the registry, so a
new strategy or option is checked without a new test."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from parbench import strategies
from parbench.cli import main
from parbench.drive.runner import run_config
from parbench.drive.verify import verify
from parbench.families.workloads import Workload
from parbench.machine.devices import DeviceSet, parse_devices
from parbench.plan import suite
from parbench.plan.config import Config, options_for
from parbench.results.record import FIELDS
from tests.support import CPU2, plain_pytest_env

ROOT = Path(__file__).resolve().parents[3]
NAMES = strategies.names()
# Micro-batches of 2 for the strategies that take a split (the verifier's baseline accumulates
# over the same ones); every other option at its default.
OPTIONS = {"split_size": 2}


def _bad_value(spec: strategies.OptionSpec) -> tuple[list[str], str]:
    """Command-line arguments giving `spec` a value it refuses, and what the refusal quotes
    (a switch's other refusals depend on devices: REFUSED_HERE)."""
    if spec.type is bool:
        return [spec.flag, "maybe"], f"{spec.flag} 'maybe' is not on or off"
    if spec.choices:
        return [spec.flag, "random"], "'random'"
    if spec.minimum is not None:
        return [spec.flag, f"{spec.minimum - 1:g}"], f"{spec.flag} must be at least"
    if spec.above is not None:
        return [spec.flag, f"{spec.above:g}"], f"{spec.flag} must be above"
    return [spec.flag, "x"], f"{spec.flag} 'x' is not"


# Options refused on two CPU devices whatever their value.
REFUSED_HERE = {"sync_batchnorm": (["--sync-batchnorm"], "SyncBatchNorm runs on CUDA devices "
                                                         "only")}


def _workload(name: str, tiny_workload):
    """The tiny ResNet at 64 px (BatchNorm well conditioned at layer4), or for a strategy that
    splits layers (tensor parallelism, which refuses a ResNet) the smallest ViT at its
    smallest size."""
    if strategies.layout_of(name).splits_layers:
        return replace(tiny_workload, model="vit_b_16", image_size=16)
    return replace(tiny_workload, image_size=64)


def _devices(name: str) -> DeviceSet:
    """The fewest CPU devices, two at least, the strategy plans on (hsdp: 4)."""
    vit = Workload(model="vit_b_16", image_size=16, num_classes=10)
    for count in (2, 3, 4):
        devices = parse_devices(",".join(["cpu"] * count))
        try:
            strategies.plan(name, vit, 8, devices.logical, OPTIONS)
        except strategies.Unavailable:
            return devices
        except strategies.StrategyError:
            continue
        return devices
    raise AssertionError(f"{name} plans on no 2 to 4 CPU devices")


def _plan(name: str, workload, **options):
    return strategies.plan(name, workload, 8, _devices(name).logical, options)


def _skip_where_it_cannot_run(name: str, workload) -> None:
    try:
        _plan(name, workload)
    except strategies.Unavailable as error:
        pytest.skip(f"{name} cannot run on {_devices(name)} here: {error}")


# A ViT step on every rank takes a few seconds of these two cores: the end-to-end cases of the
# strategies that train one run in the slow tier.
NAMES_WITH_VIT_SLOW = [pytest.param(name, marks=pytest.mark.slow)
                       if strategies.layout_of(name).splits_layers else name for name in NAMES]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", NAMES_WITH_VIT_SLOW)
def test_one_step_equals_the_baseline(name, tiny_workload, child_pids):
    workload = _workload(name, tiny_workload)
    _skip_where_it_cannot_run(name, workload)
    [verdict] = verify(workload, _devices(name), [name], 8, OPTIONS, tolerance=1e-5)
    assert verdict.error is None, verdict.error
    assert verdict.baseline_update > 1e-4  # the step really moved the parameters
    assert verdict.max_abs_difference <= 1e-5, verdict
    assert child_pids() == []


@pytest.mark.parametrize("name", NAMES)
def test_bad_option_values_are_refused_with_one_line(name, capsys):
    specs = [spec for spec in strategies.lookup(name).Options.specs() if not spec.preset]
    cases = [case for spec in specs
             for case in (_bad_value(spec), REFUSED_HERE.get(spec.name)) if case]
    if not cases:
        pytest.skip(f"{name} takes no option with a bad value")
    for argv, message in cases:
        status = main(["run", "--strategy", name, "--devices", "cpu,cpu", *argv])
        out, err = capsys.readouterr()
        assert status == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", NAMES_WITH_VIT_SLOW)
def test_its_record_has_the_schema(name, tiny_workload):
    workload = _workload(name, tiny_workload)
    config = Config(name, workload, 8, _devices(name), warmup=0, steps=1,
                    options=options_for(name, OPTIONS))
    record = run_config(config)
    assert list(record.to_dict())[:len(FIELDS)] == list(FIELDS)
    assert record.strategy == name
    if config.unavailable_reason():
        assert record.status == "skipped" and record.reason
        return
    assert record.status == "ok", record.reason
    assert record.throughput_ips > 0
    assert len(record.peak_memory_mib) == len(config.used_devices)
    assert record.micro_batches >= 1 and record.stages >= 1
    # The options as planned (defaults resolved), never a value the strategy does not take.
    assert record.strategy_options == config.plan.training_plan.options.given()
    # The parallel degrees as planned, taking exactly the devices used.
    dims = config.plan.training_plan.dims
    assert record.parallel_dims == dims.as_record() and dims.devices == len(config.used_devices)


@pytest.mark.parametrize("name", NAMES)
def test_it_declares_how_it_lays_a_step_out(name):
    """What parbench.advisor picks a timing model by (never the strategy's name)."""
    assert isinstance(strategies.layout_of(name), strategies.Layout)


def test_importing_the_asv_suite_does_not_import_torch():
    """asv imports the suite's module in a fresh interpreter for each parameter combination,
    then hands it the cache; only setup_cache (once per run) may import torch."""
    pytest.importorskip("asv_runner")
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import asv.training, asv.common; "
            "print('torch' in sys.modules)")
    imported = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert imported.stdout.strip() == "False", imported.stderr


@pytest.mark.slow  # loads the asv and pytest-benchmark harnesses: about 10 s
def test_every_harness_lists_every_strategy(capsys, load_harness):
    assert main(["strategies", "--devices", "cpu,cpu"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == NAMES
    asv = load_harness("benchmarks/asv/common.py")  # its names as data, without torch
    assert (asv.STRATEGIES, asv.DATA_PARALLEL, asv.MODELS) == (
        NAMES, suite.scaled_strategies(), list(suite.MODELS))
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_strategies.py", "--benchmark-only",
         "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=200, env=plain_pytest_env()).stdout
    for name in NAMES:  # each is benchmarked here, or cannot run here and says why
        reason = suite.cannot_run(name, CPU2)
        assert (f"test_training_step[{name}]" in collected) == (reason is None), reason
