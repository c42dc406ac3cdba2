"""Parts of the model files (version.MODEL_FILES) under public names, for the scripts of
benchmarks/ and of published runs (results/*/) that take a model apart. A model file's own
names are hashed into version.FINGERPRINT, so a part is made public here rather than renamed
there; each calls the model's own function, so what it returns is what the models use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from unittest import mock

from parbench.advisor.models import models
from parbench.advisor.models.links import AnyLink
from parbench.advisor.profiling import contention, fixed_costs
from parbench.advisor.profiling.fixed_costs import NO_FIXED_COSTS, FixedCosts
from parbench.advisor.profiling.profile import Profile
from parbench.advisor.runs import records
from parbench.families.workloads import Workload

__all__ = ["Answer", "measure_probe", "measure_slowdown_answers", "modelled_prediction",
           "probe_path", "read_slowdowns"]

# One process's answer in one round of a contention measurement: (round, its median step alone
# (NaN but on rank 0), together at its own pace, in lock-step), in seconds.
Answer = tuple[int, float, float, float]


def read_slowdowns(answers: list[Answer]) -> dict[str, float]:
    """The slowdowns contention.measure_slowdown returns, read from its processes' answers."""
    return contention._slowdowns(answers)


def measure_slowdown_answers(workload: Workload, micro_batch: int, processes: int,
                             threads: int = 1) -> tuple[dict[str, float], list[Answer]]:
    """One contention.measure_slowdown, its slowdowns with the answers they were read from (to
    read the same rounds another way)."""
    kept: list[list[Answer]] = []
    read = contention._slowdowns  # the model's own, not the reading that replaces it below

    def reading(answers: list[Answer]) -> dict[str, float]:
        kept.append(list(answers))
        return read(answers)

    with mock.patch.object(contention, "_slowdowns", reading):
        slowdowns = contention.measure_slowdown(workload, micro_batch, processes, threads)
    [answers] = kept
    return slowdowns, answers


def probe_path(cache: Path, probe: dict, workload: Workload) -> Path:
    """Where a fixed-cost probe's measurement is kept in `cache` (fixed_costs.load_or_probe's)."""
    return fixed_costs._path(cache, probe, workload)


def measure_probe(probe: dict, workload: Workload) -> dict:
    """A fixed-cost probe run once through the core's launcher, as load_or_probe keeps it: its
    median step (`step_s`), `global_batch`, `partition` and `micro_batches`."""
    return fixed_costs._measured(probe, workload)


def modelled_prediction(record: dict, profile_at: Callable[[int], Profile], link: AnyLink,
                        fixed: FixedCosts = NO_FIXED_COSTS) -> models.Prediction:
    """A record's step by its layout's timing model with `fixed` costs, whether or not the
    models cover its settings (records.predict_record asks that first)."""
    return records._modelled_prediction(record, profile_at, link, fixed)
