"""What a strategy raises when it is asked to run where or how it cannot."""

from __future__ import annotations

__all__ = ["BatchTooSmall", "ModelRefused", "StrategyError", "Unavailable", "WorkloadRefused"]


class StrategyError(ValueError):
    """A strategy asked to run where or how it cannot; the message says how to fix it."""


class Unavailable(StrategyError):
    """This machine or PyTorch cannot run the strategy here: recorded as skipped, not an error
    of the user's."""


class WorkloadRefused(Unavailable):
    """The strategy cannot train this workload (fp16, --compile): refused up front when the
    user named the strategy, recorded as skipped in the comparison of every strategy."""


class BatchTooSmall(WorkloadRefused):
    """A forward pass on fewer images than the model family trains on (a micro-batch or a
    replica's share): refused for that batch alone, so a sweep's other batches still run."""


class ModelRefused(WorkloadRefused):
    """The strategy cannot lay out this model at all (tensor parallelism of a ResNet), in any
    precision or with any option: left out of the comparison of every strategy, with a note,
    as what the machine lacks is; refused when the user named the strategy for nothing else."""
