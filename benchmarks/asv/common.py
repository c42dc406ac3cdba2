"""The fixed configurations the asv suite measures, and the one measurement they share.

Append only: changing a configuration breaks the history asv keeps for it. The devices come
from PARBENCH_ASV_DEVICES (default `cpu,cpu`: two emulated devices on the CPU; on a GPU host
e.g. `cuda:0,cuda:1`).
"""

import os

import strategies
from parbench.config import Config
from parbench.devices import parse_devices
from parbench.runner import add_comparisons, run_config
from parbench.workloads import Workload

DEVICES = os.environ.get("PARBENCH_ASV_DEVICES", "cpu,cpu")
MODELS = ["resnet18"]
GLOBAL_BATCH, IMAGE_SIZE, WARMUP, STEPS = 32, 128, 2, 5
STRATEGIES = strategies.names()
DATA_PARALLEL = ["ddp", "fsdp", "data-parallel"]
# One measurement may take minutes on a CPU; asv's default timeout is 60 s.
TIMEOUT_S = 3600


def device_set():
    return parse_devices(DEVICES)


def world_sizes() -> list[int]:
    """1, 2, 4, ... up to the devices given."""
    sizes, n = [], 1
    while n <= len(device_set()):
        sizes.append(n)
        n *= 2
    return sizes


def config(strategy: str, model: str, **options) -> Config:
    return Config(strategy, Workload(model=model, image_size=IMAGE_SIZE), GLOBAL_BATCH,
                  device_set(), warmup=WARMUP, steps=STEPS, options=options)


def cannot_run(strategy: str, **options) -> str | None:
    """Why `strategy` cannot run on these devices here, or None."""
    cls = strategies.lookup(strategy).cls
    try:
        used = cls.select_devices(device_set().logical, **options)
        cls.check_config(GLOBAL_BATCH, device_set().logical, **options)
    except strategies.StrategyError as error:
        return str(error)
    return cls.unavailable_reason(used)


def skipped_strategies() -> list[tuple]:
    """(strategy, model) parameter pairs to skip here."""
    return [(s, m) for s in STRATEGIES for m in MODELS if cannot_run(s)]


def measure_all() -> dict:
    """Every configuration the suite tracks: {(strategy, model, world size or None): record}."""
    configs = {(s, m, None): config(s, m) for s in STRATEGIES for m in MODELS
               if not cannot_run(s)}
    configs.update({(s, m, n): config(s, m, world_size=n) for s in DATA_PARALLEL
                    for m in MODELS for n in world_sizes() if not cannot_run(s, world_size=n)})
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
