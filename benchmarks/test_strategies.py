"""pytest-benchmark: one training-step benchmark per strategy that can run here.

Each timed call is one optimiser step of the whole global batch, returning once every device
and rank has finished it (the same launcher, processes and synchronisation as `parbench run`).
The devices come from PARBENCH_BENCH_DEVICES (default `cpu,cpu`, two emulated devices).
"""

import os

import pytest

import strategies
from parbench.config import Config
from parbench.devices import parse_devices
from parbench.paced import PacedRun
from parbench.runner import run_config
from parbench.workloads import Workload

DEVICES = parse_devices(os.environ.get("PARBENCH_BENCH_DEVICES", "cpu,cpu"))
WORKLOAD = Workload(model="resnet18", image_size=128)
GLOBAL_BATCH, WARMUP, STEPS = 32, 2, 5


def _can_run(name: str) -> bool:
    cls = strategies.lookup(name).cls
    try:
        cls.check_config(GLOBAL_BATCH, DEVICES.logical)
    except strategies.StrategyError:
        return False
    return strategies.available(DEVICES.logical)[name] is None


RUNNABLE = [name for name in strategies.names() if _can_run(name)]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", RUNNABLE)
def test_training_step(benchmark, strategy):
    config = Config(strategy, WORKLOAD, GLOBAL_BATCH, DEVICES, warmup=WARMUP, steps=STEPS,
                    timeout_s=600)

    def timed_by_pytest_benchmark(config):
        run = PacedRun(config)
        benchmark.pedantic(run.step, rounds=config.steps, warmup_rounds=config.warmup,
                           iterations=1)
        return run.finish()

    record = run_config(config, measure=timed_by_pytest_benchmark)
    assert record["status"] == "ok", record["reason"]
    benchmark.extra_info.update(
        {key: record[key] for key in ("throughput_ips", "peak_memory_mib", "memory_imbalance",
                                      "emulated", "devices", "world_size", "memory_source")},
        record=record)
