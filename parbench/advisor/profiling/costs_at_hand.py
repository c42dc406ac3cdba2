"""A record's fixed costs probed on the devices at hand, or none where its probe cannot run or
fails, saying why: the record is still predicted, and labelled so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from parbench.advisor.models.links import AnyLink, MissingCollective
from parbench.advisor.profiling.fixed_costs import FixedCosts
from parbench.advisor.runs.records import fixed_costs_of

__all__ = ["measured_costs"]


def measured_costs(record: dict, profile_at: Callable, link: AnyLink,
                   cache: Path) -> FixedCosts:
    """`record`'s fixed costs from its probe (records.fixed_costs_of, kept in `cache`); where
    the probe is refused here or its launch fails, none, its `probe` saying why."""
    try:
        return fixed_costs_of(record, profile_at, link, cache)
    except MissingCollective:
        raise
    except (ValueError, RuntimeError) as error:  # refused here; a launch failed (LaunchError)
        reason = " ".join(str(error).split()) or type(error).__name__
        return FixedCosts(probe=f"probe failed, no fixed cost added: {reason}")
