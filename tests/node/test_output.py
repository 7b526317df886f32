"""`node.render.output`: tables drawn without rich are the ones rich draws."""

from __future__ import annotations

import io
import string
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.render.output import TABLE_WIDTH, plain_table, render


def rich_table(
    columns: Sequence[str], cells: Sequence[Sequence[str]], *, terminal: bool = False
) -> str:
    """What `node.render.output` drew with rich for every table before the plain path (on a
    colour terminal with ``terminal``)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=None, show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in cells:
        table.add_row(*row)
    out = io.StringIO()
    console = Console(file=out, soft_wrap=False, markup=False, emoji=False)
    if terminal:
        console = Console(
            file=out,
            soft_wrap=False,
            markup=False,
            emoji=False,
            force_terminal=True,
            color_system="standard",
        )
    console.width = max(TABLE_WIDTH, console.width)
    console.print(table)
    return out.getvalue()


TEXT = st.text(alphabet=string.printable[:95] + "é\t\n┃", max_size=24)
#: Long cells of words and spaces, to exercise rich's column collapse and folding.
LONG = st.text(alphabet="ab  -/.", max_size=90) | st.text(alphabet="x", max_size=160)


@settings(max_examples=200, deadline=None)
@given(
    columns=st.lists(TEXT, min_size=1, max_size=6),
    data=st.data(),
)
def test_plain_tables_are_what_rich_draws(columns: list[str], data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.lists(TEXT, min_size=len(columns), max_size=len(columns))))
    plain = plain_table(columns, rows)
    if plain is not None:
        assert plain == rich_table(columns, rows)


@pytest.mark.parametrize(
    ("columns", "rows", "drawn"),
    [
        (["a", "bb"], [["x  ", "  y"], ["", "zz z"]], True),
        (["count(*)"], [["2"]], True),
        (["a", "b"], [], True),
        (["a"], [["x" * (TABLE_WIDTH - 4)]], True),
        (["a"], [["x" * (TABLE_WIDTH - 3)]], True),  # folded
        (["a", "b"], [["word " * 30, "y" * 200]], True),
        (["c"] * 50, [["x"] * 50], False),  # columns narrower than 3
        (["city"], [["Zürich"]], False),
        (["a"], [["two\nlines"]], False),
        ([], [], False),
    ],
)
def test_plain_table_cases(columns: list[str], rows: list[list[str]], drawn: bool) -> None:
    plain = plain_table(columns, rows)
    assert (plain is not None) == drawn
    if plain is not None:
        assert plain == rich_table(columns, rows)


def test_render_draws_without_rich_only_when_rich_would_draw_plainly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [{"dataset": "demo.a", "records": 3, "tags": ["x", "y"], "none": None}]
    cells = [["demo.a", "3", "x, y", ""]]
    columns = ["dataset", "records", "tags", "none"]
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    out = io.StringIO()
    render(rows, "table", out=out)
    assert out.getvalue() == rich_table(columns, cells)
    # A colour terminal (FORCE_COLOR makes rich take even a file for one): bold headers.
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    styled = io.StringIO()
    render(rows, "table", out=styled)
    assert styled.getvalue() == rich_table(columns, cells, terminal=True)
    assert "\x1b[1m" in styled.getvalue()
    # NO_COLOR: left to rich itself.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delitem(sys.modules, "rich.console", raising=False)
    render(rows, "table", out=io.StringIO())
    assert "rich.console" in sys.modules


@settings(max_examples=150, deadline=None)
@given(columns=st.lists(TEXT, min_size=1, max_size=6), data=st.data())
def test_bold_headers_are_what_rich_draws_on_a_terminal(
    columns: list[str], data: st.DataObject
) -> None:
    rows = data.draw(st.lists(st.lists(TEXT, min_size=len(columns), max_size=len(columns))))
    plain = plain_table(columns, rows, bold_header=True)
    if plain is not None:
        assert plain == rich_table(columns, rows, terminal=True)


@settings(max_examples=200, deadline=None)
@given(columns=st.lists(TEXT, min_size=1, max_size=8), data=st.data())
def test_folded_tables_are_what_rich_draws(columns: list[str], data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.lists(LONG, min_size=len(columns), max_size=len(columns))))
    plain = plain_table(columns, rows)
    if plain is not None:
        assert plain == rich_table(columns, rows)
