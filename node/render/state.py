"""Rows of ``odf inspect state``: what each derivative's stream state keeps, and its size."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from engine.streaming.summary import StateSummary

__all__ = ["STATE_COLUMNS", "size_text", "state_row"]

#: Columns of the table form, in order.
STATE_COLUMNS: Final = ("alias", "state", "keeps", "rows", "checkpoint")
_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB")


def size_text(size: int) -> str:
    """``size`` bytes in the largest binary unit that keeps it at or above 1."""
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def state_row(alias: str, summary: StateSummary | None, *, table: bool) -> dict[str, Any]:
    """One dataset's row (``summary`` None: no checkpoint yet). The table form names
    the rows kept in words and the size in units; the other forms give numbers."""
    if summary is None:
        row: dict[str, Any] = {"alias": alias, "state": "none", "keeps": "no checkpoint yet"}
        return row | ({"rows": "", "checkpoint": ""} if table else {"checkpointBytes": 0})
    kept = {
        "inputRows": summary.input_rows,
        "outputRows": summary.output_rows,
        "groups": summary.groups,
        "values": summary.values,
    }
    if not table:
        return (
            {"alias": alias, "state": summary.kind, "keeps": summary.keeps}
            | kept
            | {"checkpointBytes": summary.size}
        )
    words = [
        f"{summary.input_rows} input",
        f"{summary.output_rows} output",
        f"{summary.groups} groups",
        f"{summary.values} min/max values",
    ]
    shown = [w for w, n in zip(words, kept.values(), strict=True) if n]
    return {
        "alias": alias,
        "state": summary.kind,
        "keeps": summary.keeps,
        "rows": ", ".join(shown) or "0",
        "checkpoint": size_text(summary.size),
    }
