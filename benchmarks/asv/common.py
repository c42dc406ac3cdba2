"""The asv suite's parameters, and the one measurement of parbench's suite (`parbench.suite`:
the configurations the CLI's quick comparison and pytest-benchmark measure too) that its
benchmarks share.

asv starts a fresh interpreter for every parameter combination (launch_method spawn), imports
this module there and hands the benchmark the cached measurement: so nothing here imports
torch at import time, and the cache holds plain numbers. Only `setup_cache`, run once per `asv
run`, imports parbench and measures. The devices come from PARBENCH_ASV_DEVICES (default
`cpu,cpu`: two emulated devices on the CPU; on a GPU host e.g. `cuda:0,cuda:1`).
"""

import os

DEVICES = os.environ.get("PARBENCH_ASV_DEVICES", "cpu,cpu")
# strategies.names() and suite.scaled_strategies() and suite.MODELS, as data (importing them
# imports torch); tests/strategies/test_conformance.py checks that they agree.
STRATEGIES = ["single", "model-parallel", "pipeline", "pipeline-gpipe", "pipeline-1f1b",
              "pipeline-interleaved-1f1b", "pipeline-looped-bfs", "pipeline-zero-bubble",
              "pipeline-zbv", "pipeline-dualpipev", "data-parallel", "ddp", "fsdp"]
DATA_PARALLEL = ["data-parallel", "ddp", "fsdp"]
MODELS = ["resnet18"]
# The figures the benchmarks track, kept from each record.
TRACKED = ("status", "reason", "throughput_ips", "peak_memory_mib", "memory_imbalance",
           "scaling_efficiency", "intervals")
# One measurement may take minutes on a CPU; asv's default timeout is 60 s.
TIMEOUT_S = 3600


def device_count() -> int:
    return len([name for name in DEVICES.split(",") if name.strip()])


def world_sizes() -> list[int]:
    """1, 2, 4, ... up to the devices given (as `suite.world_sizes`, without torch)."""
    count = device_count()
    return [2**k for k in range(count.bit_length()) if 2**k <= count]


def measure_all() -> dict:
    """Every configuration the suite tracks, each measured in `suite.REPEATS` trials in
    interleaved rounds (as `parbench run --repeats`): {(strategy, model, world size or
    None): the record's tracked figures}, figures of merit as geometric means over trials."""
    import tempfile

    from parbench import suite
    from parbench.devices import parse_devices
    from parbench.results import RunFolder
    from parbench.runner import run_sweep

    devices = parse_devices(DEVICES)
    # A data-parallel strategy's own configuration is its largest world size, when that is
    # every device (1, 2, 4, ...): measured once, read under both keys.
    alias = device_count() in world_sizes()
    keys: list[tuple[str, str, int | None]] = [
        (s, m, None) for s in STRATEGIES for m in MODELS if not (alias and s in DATA_PARALLEL)]
    keys += [(s, m, n) for s in DATA_PARALLEL for m in MODELS for n in world_sizes()]
    configs = [suite.config(s, devices, m) if n is None else
               suite.config(s, devices, m, world_size=n) for s, m, n in keys]
    with tempfile.TemporaryDirectory(prefix="parbench-asv-") as folder:
        records = run_sweep(configs, RunFolder(folder), {}, repeats=suite.REPEATS)
    # A record's config_key is typed optional; every record here has one.
    by_key: dict[str | None, tuple[str, str, int | None]] = dict(
        zip([c.key() for c in configs], keys, strict=True))
    figures = {by_key[r.config_key]: {name: getattr(r, name) for name in TRACKED}
               for r in records}
    if alias:
        figures.update({(s, m, None): figures[(s, m, device_count())]
                        for s in DATA_PARALLEL for m in MODELS})
    return figures


class Measured:
    """Base of the suite's classes: their setup_cache is this one function, so asv runs the
    measurement once per `asv run` and hands every benchmark its figures. The repetition is
    parbench's trials inside it, so asv runs each benchmark once (rounds = repeat = 1: a
    second round would read the same cache again)."""

    timeout = TIMEOUT_S
    rounds = 1
    repeat = 1

    def setup_cache(self):
        return measure_all()

    setup_cache.timeout = TIMEOUT_S  # type: ignore[attr-defined]  # asv reads it
