"""Rendering of command results as table, JSON or YAML.

Commands build plain data (lists of dicts with string/number values) and hand it to
`render`, so every output format shows the same facts.

Tables are drawn by rich, except the common case that rich would draw plainly: output
that is not a terminal (no styles), UTF-8, no title, every header and cell printable
ASCII, and the whole table no wider than the narrowest console rich is given (120
columns, so nothing wraps). That case is written here, character for character as rich
writes it (a test compares them), without importing rich: its import costs about twice
the interpreter's start, more than ``odf list`` or ``odf sql "SELECT 1"`` do otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TextIO

OutputFormat = Literal["table", "json", "yaml"]
OUTPUT_FORMATS: tuple[str, ...] = ("table", "json", "yaml")
#: The narrowest console width tables are drawn for (wider terminals get their width).
TABLE_WIDTH: Final = 120


def render(
    data: Any,
    fmt: str,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    out: TextIO | None = None,
) -> None:
    """Write ``data`` to ``out`` (stdout) in format ``fmt``.

    For ``table``, ``data`` must be a sequence of mappings; ``columns`` picks and orders
    the columns (default: keys of the first row).
    """
    out = out or sys.stdout
    if fmt == "json":
        out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    elif fmt == "yaml":
        import yaml

        out.write(
            yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
        )
    elif fmt == "table":
        _render_table(data, columns, title, out)
    else:
        raise ValueError(f"unknown output format {fmt!r}")


def _render_table(rows: Any, columns: Sequence[str] | None, title: str | None, out: TextIO) -> None:
    if isinstance(rows, Mapping):
        rows = [rows]
    rows = list(rows)
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    plain = None if title is not None or _styled(out) else plain_table(columns, cells)
    if plain is not None:
        out.write(plain)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for row_cells in cells:
        table.add_row(*row_cells)
    # Cells are data, shown verbatim: no console markup ("[bold]") or emoji codes
    # (":x:"), which also spares every table the import of rich's emoji table.
    console = Console(file=out, soft_wrap=False, markup=False, emoji=False)
    console.width = max(TABLE_WIDTH, console.width)
    console.print(table)


def _styled(out: TextIO) -> bool:
    """Whether rich could style or re-encode output to ``out``: a terminal (by its rules:
    ``TTY_COMPATIBLE``, ``FORCE_COLOR``, else ``isatty``) or an encoding other than UTF-8."""
    encoding = (getattr(out, "encoding", None) or "utf-8").lower()
    if not encoding.startswith("utf"):
        return True
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    isatty = getattr(out, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed file
        return False


def plain_table(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> str | None:
    """The table rich draws for ``columns`` and rows of ``cells`` on a plain console of
    `TABLE_WIDTH` columns (heavy head box, one space of padding), or ``None`` when rich
    could draw it otherwise (no columns, a character that is not printable ASCII, too
    wide to fit)."""
    if not columns or not all(_printable(t) for t in (*columns, *(c for r in cells for c in r))):
        return None
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    if sum(widths) + 3 * len(widths) + 1 > TABLE_WIDTH:
        return None

    def rule(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def line(edge: str, texts: Sequence[str]) -> str:
        return edge + edge.join(f" {t:<{w}} " for t, w in zip(texts, widths, strict=True)) + edge

    lines = [rule("┏", "━", "┳", "┓"), line("┃", columns), rule("┡", "━", "╇", "┩")]
    lines += [line("│", r) for r in cells]
    lines.append(rule("└", "─", "┴", "┘"))
    return "\n".join(lines) + "\n"


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)
