"""The asv suite's devices, and the one measurement of parbench's suite (`parbench.suite`:
the configurations the CLI's quick comparison and pytest-benchmark measure too) that its
benchmarks share.

The devices come from PARBENCH_ASV_DEVICES (default `cpu,cpu`: two emulated devices on the
CPU; on a GPU host e.g. `cuda:0,cuda:1`).
"""

import os

import strategies
from parbench import suite
from parbench.devices import parse_devices
from parbench.runner import add_comparisons, run_config

DEVICES = os.environ.get("PARBENCH_ASV_DEVICES", "cpu,cpu")
STRATEGIES = strategies.names()
MODELS = list(suite.MODELS)
DATA_PARALLEL = suite.scaled_strategies()
# One measurement may take minutes on a CPU; asv's default timeout is 60 s.
TIMEOUT_S = 3600


def device_set():
    return parse_devices(DEVICES)


def world_sizes() -> list[int]:
    return suite.world_sizes(device_set())


def skipped_strategies() -> list[tuple]:
    """(strategy, model) parameter pairs to skip here."""
    return [(s, m) for s in STRATEGIES for m in MODELS if suite.cannot_run(s, device_set())]


def measure_all() -> dict:
    """Every configuration the suite tracks: {(strategy, model, world size or None): record}."""
    devices = device_set()
    configs = {(s, m, None): suite.config(s, devices, m) for s in STRATEGIES for m in MODELS
               if not suite.cannot_run(s, devices)}
    configs.update({(s, m, n): suite.config(s, devices, m, world_size=n) for s in DATA_PARALLEL
                    for m in MODELS for n in world_sizes()
                    if not suite.cannot_run(s, devices, world_size=n)})
    records = {key: run_config(c) for key, c in configs.items()}
    for key in {(s, m) for s, m, _ in records}:  # scaling against N = 1 of the same strategy
        add_comparisons([r for (s, m, _), r in records.items() if (s, m) == key])
    return records


class Measured:
    """Base of the suite's classes: their setup_cache is this one function, so asv runs the
    measurement once per `asv run` and hands every benchmark its records."""

    timeout = TIMEOUT_S

    def setup_cache(self):
        return measure_all()

    setup_cache.timeout = TIMEOUT_S
