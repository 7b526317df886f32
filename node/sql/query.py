"""``odf sql``: ad-hoc SQL over the workspace's datasets, on DataFusion or Spark.

Both engines read the same staging (`node.sql.staging`): for each dataset the query
mentions, a temp directory of exactly the data files its chain references, each
hash-checked first.

Datasets are picked by a case-insensitive search of their alias in the query text as a
whole name (not inside a longer name: ``demo.ds1`` is not mentioned by ``demo.ds10``),
which keeps the engine from reading the footers of every dataset and ``SELECT 1`` from
reading any chain. A query that then fails on a missing table runs once more with every
dataset staged (a name the scan cannot see, e.g. a Unicode escape). A dataset named but
without a schema is skipped. Tables are named by dataset alias (backtick-quote aliases
with dots or slashes: ``SELECT * FROM `acme/my.data```).

``datafusion`` (the default, kamu's choice for ``kamu sql``): the query runs in this
process on an embedded DataFusion session (`node.sql.embedded`: naming, result types,
what is refused); no JVM, no engine process.

``spark``: the query runs on the engine (the same warm Spark JVM as transforms, started
on demand by `node.engine_manager`) through ``ExecuteRawQuery``: this process never
starts a JVM of its own. The raw query is a multi-step transform: one step per staged
dataset, ``SELECT * FROM parquet.`<dir>``` registered under the dataset's alias, then
the user's query as the output step.

Either way the result is one Parquet file, rendered by the CLI (table, CSV, JSON) or kept
(``--output-format parquet``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeVar

import pyarrow as pa

from engine.errors import InvalidQuery
from node.errors import UsageError
from node.sql.embedded import StagedTable
from node.sql.staging import stage, work_dir
from storage.catalog import DatasetEntry, entries

if TYPE_CHECKING:
    from engine.client import EngineClient
    from storage.workspace import Workspace

__all__ = [
    "DEFAULT_SQL_ENGINE",
    "MAX_QUERY_CHARS",
    "MAX_RESULT_ROWS_SHOWN",
    "SQL_ENGINES",
    "SqlEngine",
    "SqlResult",
    "datasets_in_query",
    "run_embedded",
    "run_sql",
    "tables_for_query",
]

SqlEngine = Literal["datafusion", "spark"]
#: The engines ``odf sql --engine`` accepts; the first is the default.
SQL_ENGINES: Final[tuple[SqlEngine, ...]] = ("datafusion", "spark")
DEFAULT_SQL_ENGINE: Final[SqlEngine] = "datafusion"
#: Longest query accepted.
MAX_QUERY_CHARS: Final = 1024 * 1024
#: Rows printed by the table format (all rows go to CSV/JSON/Parquet outputs).
MAX_RESULT_ROWS_SHOWN: Final = 10_000
#: Engine messages of a query that names a table nobody registered (DataFusion: "table
#: '...' not found"; Spark: "[TABLE_OR_VIEW_NOT_FOUND] ... cannot be found").
_MISSING_TABLE: Final = ("not found", "cannot be found")
#: Dataset names listed in the hint of a missing-table error.
_HINT_NAMES: Final = 10

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SqlResult:
    """A query result: the Parquet file the engine wrote and its row count."""

    path: Path
    num_records: int

    def read(self) -> pa.Table:
        """The result as an Arrow table."""
        import pyarrow.parquet as pq

        # Not pq.read_table: that imports pyarrow.dataset (and pandas), 0.3 s of start-up.
        with pq.ParquetFile(self.path) as f:
            return f.read()


def _mentions(text: str, name: str) -> bool:
    """Whether ``name`` occurs in ``text`` not as part of a longer identifier."""
    start = text.find(name)
    while start >= 0:
        end = start + len(name)
        before = text[start - 1] if start > 0 else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_" or after.isalnum() or after == "_"):
            return True
        start = text.find(name, start + 1)
    return False


def datasets_in_query(root: Path, query: str) -> list[DatasetEntry]:
    """Datasets of workspace ``root`` (its ``.odf``) whose alias appears in ``query`` as
    a whole name, case-insensitively (see the module docstring)."""
    text = query.lower()
    return [e for e in entries(root) if _mentions(text, e.alias.lower())]


def tables_for_query(ws: Workspace, query: str) -> list[DatasetEntry]:
    """`datasets_in_query` of workspace ``ws``."""
    return datasets_in_query(ws.root, query)


def _with_tables(root: Path, query: str, work: Path, run: Callable[[list[StagedTable]], T]) -> T:
    """``run`` over the datasets the query mentions; again over every dataset when the
    engine found a table missing and some dataset was left out."""
    mentioned = datasets_in_query(root, query)
    staged = stage(root, mentioned, work)
    try:
        return run(staged)
    except InvalidQuery as e:
        message = str(e).lower()
        if not any(m in message for m in _MISSING_TABLE):
            raise
        _refuse_empty(mentioned, staged, message)
        every = entries(root)
        rest = [d for d in every if d not in mentioned]
        if not rest:
            raise _with_hint(e, query, every) from None
    try:
        return run(staged + stage(root, rest, work, first=len(mentioned)))
    except InvalidQuery as e:
        if not any(m in str(e).lower() for m in _MISSING_TABLE):
            raise
        raise _with_hint(e, query, every) from None


def _with_hint(error: InvalidQuery, query: str, every: Sequence[DatasetEntry]) -> InvalidQuery:
    """A missing-table error with what the user most likely meant: a dataset alias with a
    dot written unquoted (read as schema.table by both engines), else the datasets here."""
    import re

    for entry in every:
        if "." in entry.alias:
            bare = r"(?<![`\"\w.])" + re.escape(entry.alias) + r"(?![`\"\w.])"
            if re.search(bare, query, flags=re.IGNORECASE):
                quoted = '"' + entry.alias + '"'
                return InvalidQuery(f"{error} (quote a dataset name with dots: {quoted})")
    names = sorted(entry.alias for entry in every)
    shown = ", ".join(names[:_HINT_NAMES]) + (", ..." if len(names) > _HINT_NAMES else "")
    return InvalidQuery(f"{error} (datasets here: {shown or 'none'})")


def _refuse_empty(
    mentioned: Sequence[DatasetEntry], staged: list[StagedTable], message: str
) -> None:
    """A missing table that is a dataset with nothing in it yet (no schema: no table to
    register) is said so, not as the engine's "table not found"."""
    have = {t.alias for t in staged}
    for entry in mentioned:
        if entry.alias not in have and entry.alias.lower() in message:
            raise InvalidQuery(
                f"dataset {entry.alias} has no data yet (nothing ingested or pulled into it)"
            )


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _run_spark(staged: list[StagedTable], query: str, out: Path, engine: EngineClient) -> int:
    """Run on the Spark engine (``ExecuteRawQuery``); the row count."""
    from engine.client import raise_for_result
    from fbs.model import RawQueryRequest, SqlQueryStep, TransformSql

    steps = [
        SqlQueryStep(alias=t.alias, query=f"SELECT * FROM parquet.{_quote(str(t.folder))}")
        for t in staged
    ]
    steps.append(SqlQueryStep(alias=None, query=query))
    request = RawQueryRequest(
        input_data_paths=(),
        transform=TransformSql(engine="spark", queries=tuple(steps)),
        output_data_path=str(out),
    )
    response = raise_for_result(engine.execute_raw_query(request))
    return int(response.num_records)


def _check_query(query: str) -> None:
    if not query.strip():
        raise UsageError("empty query")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(f"query longer than {MAX_QUERY_CHARS} characters")


def run_embedded(root: Path, query: str, *, without_pandas: bool = False) -> pa.Table:
    """Run ``query`` over the datasets of workspace ``root`` (its ``.odf`` directory) on
    the embedded DataFusion engine; the result, as `run_sql` would write it.

    Needs no `storage.workspace.Workspace` (nor, when every dataset the query mentions
    has a current slice-list cache, the metadata model): the short path of ``odf sql``.
    ``without_pandas``: see `node.sql.embedded.import_datafusion`.

    Raises:
        UsageError: an empty or oversized query.
        engine.errors.InvalidQuery: DataFusion refused the query (its message).
    """
    from node.sql.embedded import run_datafusion

    _check_query(query)
    with work_dir(root) as work:
        return _with_tables(
            root,
            query,
            work,
            lambda staged: run_datafusion(staged, query, without_pandas=without_pandas),
        )


def run_sql(
    ws: Workspace,
    query: str,
    output_path: Path,
    *,
    engine: EngineClient | None = None,
    sql_engine: SqlEngine | None = None,
    without_pandas: bool = False,
) -> SqlResult:
    """Run ``query`` over the workspace's datasets; the result goes to ``output_path``.

    ``sql_engine``: ``"datafusion"`` (embedded) or ``"spark"`` (the engine ``engine``, or
    the workspace's shared one); by default Spark when ``engine`` is given, else
    DataFusion. ``without_pandas``: see `node.sql.embedded.import_datafusion` (for
    short-lived processes such as the CLI).

    Raises:
        UsageError: an empty or oversized query, an unknown engine.
        engine.errors.InvalidQuery: the engine refused the query (its message).
        engine.errors.EngineInternalError / EngineUnavailable: the Spark engine failed.
    """
    import pyarrow.parquet as pq

    _check_query(query)
    if sql_engine is None:
        sql_engine = "spark" if engine is not None else DEFAULT_SQL_ENGINE
    if sql_engine not in SQL_ENGINES:
        raise UsageError(f"unknown SQL engine {sql_engine!r} (one of {', '.join(SQL_ENGINES)})")
    if sql_engine == "spark" and engine is None:
        from node.engine_manager import get_engine

        engine = get_engine(ws)
    output_path = Path(output_path)
    if engine is not None and sql_engine == "spark":
        spark = engine
        with work_dir(ws.root) as work:
            out = work / "result.parquet"
            num_records = _with_tables(
                ws.root, query, work, lambda staged: _run_spark(staged, query, out, spark)
            )
            output_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(out, output_path)
        return SqlResult(output_path, num_records)
    table = run_embedded(ws.root, query, without_pandas=without_pandas)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = output_path.with_name(f".{output_path.name}.{os.getpid()}.tmp")
    try:  # the file appears whole or not at all, as with the Spark engine's
        pq.write_table(table, tmp)
        os.replace(tmp, output_path)
    finally:
        tmp.unlink(missing_ok=True)
    return SqlResult(output_path, table.num_rows)
