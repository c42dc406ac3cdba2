"""Markdown tables for the reports: values formatted as cells, rows under a header."""

from __future__ import annotations

__all__ = ["cell", "markdown_table"]


def cell(value) -> str:
    """A value as a table cell: '-' for none, 3 significant figures, one value per device."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):  # one value per device
        return ", ".join(cell(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
