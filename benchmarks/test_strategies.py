"""pytest-benchmark: one training-step benchmark per strategy of parbench's suite that can run
here (`parbench.suite`, the configurations asv and the CLI's quick comparison measure too).

Each timed call is one optimiser step of the whole global batch, returning once every device
and rank has finished it (the same launcher, processes and synchronisation as `parbench run`).
The devices come from PARBENCH_BENCH_DEVICES (default `cpu,cpu`, two emulated devices).
"""

import os
from dataclasses import replace

import pytest

from parbench import suite
from parbench.devices import parse_devices
from parbench.paced import PacedRun
from parbench.runner import run_config

DEVICES = parse_devices(os.environ.get("PARBENCH_BENCH_DEVICES", "cpu,cpu"))
RUNNABLE = suite.runnable(DEVICES)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", RUNNABLE)
def test_training_step(benchmark, strategy):
    config = replace(suite.config(strategy, DEVICES), timeout_s=600)

    def timed_by_pytest_benchmark(config):
        run = PacedRun(config)
        benchmark.pedantic(run.step, rounds=config.steps, warmup_rounds=config.warmup,
                           iterations=1)
        return run.finish()

    record = run_config(config, measure=timed_by_pytest_benchmark)
    assert record.ok, record.reason
    benchmark.extra_info.update(
        {key: getattr(record, key) for key in ("throughput_ips", "peak_memory_mib",
                                               "memory_imbalance", "emulated", "devices",
                                               "world_size", "memory_source")},
        record=record.to_dict())
