"""pytest-benchmark: one training-step benchmark per strategy of parbench's suite that can run
here (`parbench.suite`, the configurations asv and the CLI's quick comparison measure too).

Each timed call (a pytest-benchmark round) is one optimiser step of the whole global batch,
returning once every device and rank has finished it (the same launcher, processes and
synchronisation as `parbench run`). The rounds fall into `suite.REPEATS` trials of
`suite.STEPS` steps, each trial a fresh launch whose warm-up steps run untimed in
pytest-benchmark's `setup`, as `parbench run --repeats` measures them; the record in
extra_info gathers them as its trials, with intervals. The devices come from
PARBENCH_BENCH_DEVICES (default `cpu,cpu`, two emulated devices).
"""

import os
from collections.abc import Callable
from dataclasses import replace

import pytest

from parbench import suite, trials
from parbench.config import Config
from parbench.devices import parse_devices
from parbench.paced import PacedRun
from parbench.runner import run_config
from parbench.worker import Measurement

DEVICES = parse_devices(os.environ.get("PARBENCH_BENCH_DEVICES", "cpu,cpu"))
RUNNABLE = suite.runnable(DEVICES)


def _finished(run: PacedRun) -> Callable[[Config], Measurement]:
    """`run`'s measurement, as `run_config` takes it."""
    return lambda config: run.finish()


class Trials:
    """The trials of one configuration, started one after another as the rounds need them."""

    def __init__(self, config):
        self.config, self.runs, self.steps_left = config, [], 0

    def setup(self):
        """Before each round (untimed): a new trial when the last one has made its steps."""
        if self.steps_left == 0:
            if self.runs:
                self.runs[-1].finish()
            run = PacedRun(self.config)
            for _ in range(self.config.warmup):
                run.step()
            self.runs.append(run)
            self.steps_left = self.config.steps

    def step(self):
        self.steps_left -= 1
        self.runs[-1].step()

    def record(self):
        """parbench's record of the trials, as `parbench run --repeats` keeps it."""
        record = None
        for round_, run in enumerate(self.runs):
            measured = run_config(self.config, measure=_finished(run))
            record = trials.with_trial(record, measured, trials.trial_of(measured, round_),
                                       len(self.runs), seed=0)
        return record


@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", RUNNABLE)
def test_training_step(benchmark, strategy):
    config = replace(suite.config(strategy, DEVICES), timeout_s=600)
    measured = Trials(config)
    benchmark.pedantic(measured.step, setup=measured.setup, iterations=1,
                       rounds=suite.REPEATS * config.steps)
    record = measured.record()
    assert record.ok, record.reason
    benchmark.extra_info.update(
        {key: getattr(record, key) for key in ("throughput_ips", "intervals", "peak_memory_mib",
                                               "memory_imbalance", "emulated", "devices",
                                               "world_size", "memory_source")},
        record=record.to_dict())
