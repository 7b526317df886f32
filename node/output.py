"""Rendering of command results as table, JSON or YAML.

Commands build plain data (lists of dicts with string/number values) and hand it to
`render`, so every output format shows the same facts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TextIO

OutputFormat = Literal["table", "json", "yaml"]
OUTPUT_FORMATS: tuple[str, ...] = ("table", "json", "yaml")


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
    from rich.console import Console
    from rich.table import Table

    if isinstance(rows, Mapping):
        rows = [rows]
    rows = list(rows)
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    table = Table(title=title, show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    # Cells are data, shown verbatim: no console markup ("[bold]") or emoji codes
    # (":x:"), which also spares every table the import of rich's emoji table.
    console = Console(file=out, soft_wrap=False, markup=False, emoji=False)
    console.width = max(120, console.width)
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)
