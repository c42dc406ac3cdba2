"""pytest-benchmark: one training-step benchmark per configuration of the quick comparison's
sweep (`parbench.plan.suite.spec`: what `parbench run` without --strategy and asv measure too,
its accumulating baselines included).

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

from parbench.drive.runner import run_config
from parbench.launch.paced import PacedRun
from parbench.measure.measurement import Measurement
from parbench.plan import Sweep, suite, trials
from parbench.plan.config import Config

DEVICES = os.environ.get("PARBENCH_BENCH_DEVICES", "cpu,cpu")
SWEEP = Sweep.build(suite.spec(DEVICES))
MEASURED = [config for config in SWEEP.configs if config.plan.runs]


def _name(config: Config) -> str:
    """The benchmark's id: the strategy, with its options where it has any."""
    options = ",".join(f"{key}={value}" for key, value in sorted(config.options.items()))
    return f"{config.strategy}:{options}" if options else config.strategy


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
            for _ in range(self.config.warmup_steps):
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
                                       len(self.runs), SWEEP.shuffle_seed)
        return record


@pytest.mark.timeout(900)
@pytest.mark.parametrize("config", MEASURED, ids=_name)
def test_training_step(benchmark, config):
    config = replace(config, timeout_s=600)
    measured = Trials(config)
    benchmark.pedantic(measured.step, setup=measured.setup, iterations=1,
                       rounds=SWEEP.repeats * config.steps)
    record = measured.record()
    assert record.ok, record.reason
    benchmark.extra_info.update(
        {key: getattr(record, key) for key in ("throughput_ips", "intervals", "peak_memory_mib",
                                               "memory_imbalance", "emulated", "devices",
                                               "world_size", "memory_source")},
        record=record.to_dict())
