"""The SQL page: a query over the node's datasets on the embedded engine (`node.sql`).

The query runs as ``odf sql`` runs it (DataFusion, in process, queries only: DDL, DML
and statements are refused by the engine's options), one at a time per node (a second
waits), in a worker thread. The page shows at most `MAX_ROWS` rows as a table and a bar
chart of them (`node.web.chart`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from engine.errors import EngineError
from fbs.errors import FbsError
from node.errors import NodeError
from node.web.chart import bar_chart
from node.web.html import esc
from node.web.render import result_table
from storage.errors import StorageError
from storage.workspace import Workspace

__all__ = ["MAX_ROWS", "SqlOutcome", "SqlRunner", "sql_body"]

#: Rows of a result shown on the page (the rest are counted, not shown).
MAX_ROWS: Final = 500
_EXAMPLE: Final = "SELECT 1 AS one"


@dataclass(frozen=True, slots=True)
class SqlOutcome:
    """A query's result (its first `MAX_ROWS` rows and the total), or its error."""

    result: pa.Table | None = None
    total: int = 0
    error: str = ""


class SqlRunner:
    """Runs one query at a time for the node's pages."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def run(self, ws: Workspace, query: str) -> SqlOutcome:
        """The outcome of ``query`` over ``ws`` (errors become the outcome's message)."""
        from node.sql.query import run_embedded

        async with self._lock:
            try:
                table = await asyncio.to_thread(run_embedded, ws.root, query)
            except (EngineError, NodeError, StorageError, FbsError) as e:
                return SqlOutcome(error=str(e).splitlines()[0] if str(e) else type(e).__name__)
        return SqlOutcome(table.slice(0, MAX_ROWS), table.num_rows)


def sql_body(query: str, outcome: SqlOutcome | None) -> str:
    """The page: the query form, then the result's chart and table (or the error)."""
    form = (
        '<form id="sql-form" method="get" action="/ui/sql" data-swap="#sql-result">'
        f'<textarea name="q" rows="5" spellcheck="false" aria-label="SQL query" '
        f'placeholder="{esc(_EXAMPLE)}">{esc(query)}</textarea>'
        '<button type="submit">Run</button>'
        '<p class="muted">Tables are named by dataset alias; quote dotted names with '
        "double quotes. Queries only, on the embedded DataFusion engine.</p></form>"
    )
    return f'<h1>SQL</h1>{form}<section id="sql-result">{_result(outcome)}</section>'


def _result(outcome: SqlOutcome | None) -> str:
    if outcome is None:
        return ""
    if outcome.result is None:
        return f'<p class="error" id="sql-error">{esc(outcome.error)}</p>'
    shown = outcome.result.num_rows
    count = f"{outcome.total} row(s)" + (f", first {shown} shown" if shown < outcome.total else "")
    return (
        f'<p class="muted" id="sql-count">{esc(count)}</p>{bar_chart(outcome.result)}'
        f"{result_table(outcome.result, tid='sql-table')}"
    )
