"""A record's numbers as the models read them: None where a record has none."""

from __future__ import annotations

import math

__all__ = ["number"]


def number(value) -> float | None:
    """A record's number; None where it has none (missing, NaN in a table, or not a number)."""
    try:
        read = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(read) else read
