"""The asv suite's parameters, and the one measurement of parbench's suite (`parbench.plan.suite`:
the configurations the CLI's quick comparison and pytest-benchmark measure too) that its
benchmarks share.

asv starts a fresh interpreter for every parameter combination (launch_method spawn), imports
this module there and hands the benchmark the cached measurement: so nothing here imports
torch at import time, and the cache holds plain numbers. Only `setup_cache`, run once per `asv
run`, imports parbench and measures. The devices come from PARBENCH_ASV_DEVICES (default
`cpu,cpu`: two emulated devices on the CPU; on a GPU host e.g. `cuda:0,cuda:1`).
"""

import itertools
import os

DEVICES = os.environ.get("PARBENCH_ASV_DEVICES", "cpu,cpu")
# strategies.names() and suite.scaled_strategies() and suite.MODELS, as data (importing them
# imports torch); tests/parbench/strategies/test_conformance.py checks that they agree.
STRATEGIES = ["single", "model-parallel", "pipeline", "pipeline-gpipe", "pipeline-1f1b",
              "pipeline-interleaved-1f1b", "pipeline-looped-bfs", "pipeline-zero-bubble",
              "pipeline-zbv", "pipeline-dualpipev", "pipeline-fsdp", "data-parallel", "ddp", "fsdp",
              "hsdp", "tp", "fsdp-tp"]
DATA_PARALLEL = ["data-parallel", "ddp", "fsdp", "hsdp"]
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


def sweeps() -> list:
    """The sweeps asv measures: the quick comparison's (`suite.spec`, exactly what `parbench
    run` measures without --strategy, baselines included), then the data-parallel strategies
    at each world size (`suite.scaling_spec`)."""
    from parbench.plan import Sweep, suite

    specs = [suite.spec(DEVICES), suite.scaling_spec(DEVICES)]
    return [Sweep.build(spec) for spec in specs if spec is not None]


def _key(config, scaling: bool) -> tuple[str, str, int | None]:
    """A configuration's asv parameters: (strategy, model, world size in the scaling sweep)."""
    world_size = config.options.get("world_size") if scaling else None
    return config.strategy, config.workload.model, world_size


def measure_all() -> dict:
    """Every sweep's records, each configuration measured in `suite.REPEATS` trials in
    interleaved rounds (as `parbench run --repeats`): {(strategy, model, world size or None):
    the record's tracked figures}, figures of merit as geometric means over trials. The
    quick comparison's accumulating baselines are measured too (its records' speedups are
    split with them) but tracked by no benchmark; a strategy it leaves out says why."""
    import tempfile

    from parbench.drive.runner import run_sweep
    from parbench.results.folder import RunFolder

    figures: dict[tuple[str, str, int | None], dict] = {}
    for index, sweep in enumerate(sweeps()):
        with tempfile.TemporaryDirectory(prefix="parbench-asv-") as folder:
            records = run_sweep(sweep, RunFolder(folder), {})
        for config, record in zip(sweep.configs, records, strict=True):
            if not config.options.get("accumulation_split"):
                figures[_key(config, index > 0)] = {name: getattr(record, name)
                                                    for name in TRACKED}
        for name, reason in sweep.left_out.items():
            for model, world_size in itertools.product(MODELS, [None, *world_sizes()]):
                figures[(name, model, world_size)] = dict(status="skipped", reason=reason)
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
