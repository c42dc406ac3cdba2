"""The largest global batch a strategy trains without running out of memory: doubling, then
bisection, each trial a real configuration (its warm-up, one step or the
layout's two, and one measured step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from parbench.drive.runner import run_config
from parbench.plan.config import Config
from parbench.results.record import Record

__all__ = ["MaxBatchError", "batch_unit", "find_max_batch"]


class MaxBatchError(RuntimeError):
    """A trial failed for a reason other than memory, so no limit can be told."""


def batch_unit(config: Config) -> int:
    """The smallest batch step the strategy can cut on its devices (data-parallel: one image
    per replica; process-per-stage pipelines: one image per default micro-batch)."""
    for unit in range(1, 8 * len(config.devices) + 1):
        if _allows(config, unit, _CUTS):
            return unit
    return len(config.devices)


def first_batch(config: Config, limit: int, unit: int | None = None) -> int:
    """Where the search starts: config.global_batch rounded up to whole units (`batch_unit`'s,
    unless given), then up to the first batch the strategy accepts (one whose micro-batches
    the model family trains on); the rounded batch itself where none up to `limit` is (its
    plan then says why)."""
    unit = unit or batch_unit(config)
    start = max(1, -(-config.global_batch // unit)) * unit
    batch = start
    while batch <= limit and not _accepts(config, batch):
        batch += unit
    return batch if batch <= limit else start


def find_max_batch(config: Config, limit: int,
                   on_trial: Callable[[Record], None] = lambda record: None
                   ) -> tuple[int, bool, list[Record]]:
    """(largest batch that trained, whether `limit` stopped the search first, every trial's
    record). Batches are multiples of `batch_unit`, from `first_batch`."""
    unit = batch_unit(config)
    trials: list[Record] = []

    def fits(multiple: int) -> bool:
        record = run_config(replace(config, global_batch=multiple * unit), index=len(trials))
        trials.append(record)
        on_trial(record)
        if record.status not in ("ok", "oom"):
            raise MaxBatchError(f"batch {multiple * unit}: {record.status}: {record.reason}")
        return record.ok

    fitting, failing = 0, None  # largest multiple known to fit; smallest known not to
    multiple = first_batch(config, limit, unit) // unit
    while multiple * unit <= limit and _accepts(config, multiple * unit):
        if not fits(multiple):
            failing = multiple
            break
        fitting, multiple = multiple, multiple * 2
    if failing is None:
        return fitting * unit, True, trials
    while failing - fitting > 1:
        middle = (fitting + failing) // 2
        while middle > fitting and not _accepts(config, middle * unit):
            middle -= 1  # e.g. a batch the pipeline cannot cut into equal micro-batches
        if middle == fitting:
            break
        if fits(middle):
            fitting = middle
        else:
            failing = middle
    return fitting * unit, False, trials


# The refusals of how a batch is cut (equal shards or micro-batches); "batch" adds a piece
# too small for the model family. Where the machine cannot run it, the trial records that.
_CUTS = ("devices", "options")


def _allows(config: Config, batch: int, kinds: tuple[str, ...]) -> bool:
    return replace(config, global_batch=batch).plan.reason(*kinds) is None


def _accepts(config: Config, batch: int) -> bool:
    """Whether the strategy can train this batch: cut as it must, into pieces the model family
    trains on."""
    return _allows(config, batch, (*_CUTS, "batch"))
