"""Rendering of command results as table, JSON or YAML.

Commands build plain data (lists of dicts with string/number values) and hand it to
`render`, so every output format shows the same facts.

Tables are drawn by rich, except the common case that rich would draw plainly: output
that is not a terminal (no styles), UTF-8, no title, every header and cell printable
ASCII. That case is laid out here as rich lays it out on its narrowest console (120
columns: columns narrowed widest first, cells folded at spaces), character for character
(a property test compares them), without importing rich: its import costs about twice
the interpreter's start, more than ``odf list`` or ``odf sql "SELECT 1"`` do otherwise.
"""

from __future__ import annotations

import builtins
import itertools
import json
import os
import re
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
    mode = _console_mode(out)
    plain = None
    if title is None and mode != "rich":
        plain = plain_table(columns, cells, bold_header=mode == "bold")
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


def _console_mode(out: TextIO) -> Literal["plain", "bold", "rich"]:
    """How rich would write a table to ``out``: ``plain`` (not a terminal by its rules:
    ``TTY_COMPATIBLE``, ``FORCE_COLOR``, else ``isatty``), ``bold`` (a terminal with
    colours: bold headers, the width of the terminal), or ``rich``: cases left to rich
    itself (another encoding than UTF-8, a dumb terminal, ``NO_COLOR``, IPython, IDLE,
    Windows)."""
    encoding = (getattr(out, "encoding", None) or "utf-8").lower()
    if not encoding.startswith("utf"):
        return "rich"
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    force = os.environ.get("FORCE_COLOR")
    if compatible in ("0", "1"):
        terminal = compatible == "1"
    elif force is not None:
        terminal = force != ""
    else:
        isatty = getattr(out, "isatty", None)
        try:
            terminal = bool(isatty()) if isatty is not None else False
        except ValueError:  # a closed file
            terminal = False
    if not terminal:
        return "plain"
    unusual = (
        os.environ.get("TERM", "").lower() in ("dumb", "unknown")
        or os.environ.get("NO_COLOR", "") != ""
        or "get_ipython" in vars(builtins)
        or getattr(sys.stdin, "__module__", "").startswith("idlelib")
        or sys.platform == "win32"
    )
    return "rich" if unusual else "bold"


def plain_table(
    columns: Sequence[str], cells: Sequence[Sequence[str]], *, bold_header: bool = False
) -> str | None:
    """The table rich draws for ``columns`` and rows of ``cells`` on a plain console of
    `TABLE_WIDTH` columns (heavy head box, one space of padding, cells folded to fit as
    rich folds them), or ``None`` when rich could draw it otherwise (no columns, a
    character that is not printable ASCII, columns too narrow to lay out here).

    ``bold_header``: as rich draws it on a colour terminal (header cells in bold), for a
    table that fits `TABLE_WIDTH` unfolded (a terminal may be wider: the layout of a
    table that needs folding depends on its width); else ``None``.
    """
    if not columns or not all(_printable(t) for t in (*columns, *(c for r in cells for c in r))):
        return None
    widths = _column_widths(columns, cells)
    if widths is None:
        return None
    inner = [w - 2 for w in widths]
    if bold_header:
        natural = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
        if natural != inner or min(inner) < 1:
            return None
        header = "┃".join(
            f"{_BOLD} {_END}{_BOLD}{c:<{w}}{_END}{_BOLD} {_END}"
            for c, w in zip(columns, inner, strict=True)
        )

    def rule(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * w for w in widths) + right

    def row(edge: str, texts: Sequence[str], *, bottom: bool = False) -> list[str]:
        """The lines of one row; cells aligned to the top (the header: to the bottom)."""
        wrapped = [_wrap(t, w) for t, w in zip(texts, inner, strict=True)]
        height = max(len(lines) for lines in wrapped)
        if bottom:
            wrapped = [[""] * (height - len(lines)) + lines for lines in wrapped]
        return [
            edge
            + edge.join(
                f" {lines[i] if i < len(lines) else '':<{w}} "
                for lines, w in zip(wrapped, inner, strict=True)
            )
            + edge
            for i in range(height)
        ]

    lines = [rule("┏", "━", "┳", "┓")]
    lines += [f"┃{header}┃"] if bold_header else row("┃", columns, bottom=True)
    lines.append(rule("┡", "━", "╇", "┩"))
    for r in cells:
        lines += row("│", r)
    lines.append(rule("└", "─", "┴", "┘"))
    return "\n".join(lines) + "\n"


# The layout below follows rich's (MIT): `Table._calculate_column_widths` and
# `_collapse_widths`, `rich._ratio.ratio_reduce`, and `Text.wrap` / `rich._wrap.divide_line`
# with overflow "fold", restricted to printable ASCII (one cell per character, no line
# breaks or tabs); the test against rich itself keeps them the same.


def _column_widths(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> list[int] | None:
    """Column widths with padding (rich's), or None below 3 (rich's edge cases)."""
    available = TABLE_WIDTH - (len(columns) + 1)  # borders
    texts = [[c, *(r[i] for r in cells)] for i, c in enumerate(columns)]
    widths = [max(min(len(t) + 2, available) for t in col) for col in texts]
    if sum(widths) > available:
        widths = _collapse(widths, available)
        if sum(widths) > available:
            widths = _ratio_reduce(sum(widths) - available, [1] * len(widths), widths, widths)
        if min(widths) < 3:
            return None
        widths = [
            max(min(len(t), w - 2) + 2 for t in col) for col, w in zip(texts, widths, strict=True)
        ]
    return widths if min(widths) >= 3 else None


def _collapse(widths: list[int], max_width: int) -> list[int]:
    """Narrow the widest columns first until the total fits (every column may wrap)."""
    total = sum(widths)
    excess = total - max_width
    while total and excess > 0:
        widest = max(widths)
        second = max((w for w in widths if w != widest), default=0)
        ratios = [1 if w == widest else 0 for w in widths]
        if not widest - second:
            break
        limit = [min(excess, widest - second)] * len(widths)
        widths = _ratio_reduce(excess, ratios, limit, widths)
        total = sum(widths)
        excess = total - max_width
    return widths


def _ratio_reduce(
    total: int, ratios: list[int], maximums: list[int], values: list[int]
) -> list[int]:
    ratios = [ratio if limit else 0 for ratio, limit in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    out = []
    for ratio, limit, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            cut = min(limit, round(ratio * remaining / total_ratio))
            out.append(value - cut)
            remaining -= cut
            total_ratio -= ratio
        else:
            out.append(value)
    return out


_BOLD: Final = "\x1b[1m"
_END: Final = "\x1b[0m"
_WORD: Final = re.compile(r"\s*\S+\s*")
_TRAILING_SPACE: Final = re.compile(r"\s+$")


def _wrap(text: str, width: int) -> list[str]:
    """``text`` folded into lines of at most ``width`` characters."""
    breaks: list[int] = []
    offset = 0
    match = _WORD.match(text, 0)
    while match is not None:
        start, end = match.span()
        word = match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:  # folded across lines
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            for n, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if n == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
        match = _WORD.match(text, end)
    bounds = [0, *breaks, len(text)]
    lines = [text[a:b] for a, b in itertools.pairwise(bounds)]
    return [_fit(line, width) for line in lines]


def _fit(line: str, width: int) -> str:
    """rich's ``rstrip_end(width)`` then ``truncate(width)``."""
    if len(line) > width:
        space = _TRAILING_SPACE.search(line)
        if space is not None:
            line = line[: len(line) - min(len(space.group(0)), len(line) - width)]
    return line[:width]


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)
