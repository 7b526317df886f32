"""``odf sql``: ad-hoc SQL over the workspace's datasets, on DataFusion or Spark.

Both engines read the same staging: for each dataset the query mentions, a temp directory
under ``.odf/run/sql/`` holding hard links (copies across filesystems) of exactly the
data files the dataset's chain references, so unreferenced objects (left by interrupted
commits) are never read; a dataset with a schema but no data gets an empty Parquet file
with its schema. Datasets are picked by a case-insensitive search of their alias in the
query text (cheap, and it keeps the engine from reading the footers of every dataset); a
dataset named but without a schema is skipped. Tables are named by dataset alias
(backtick-quote aliases with dots or slashes: ``SELECT * FROM `acme/my.data```).

``datafusion`` (the default, kamu's choice for ``kamu sql``): the query runs in this
process on an embedded DataFusion session (`node.sql_embedded`: naming, result types,
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

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from fbs.rules import new_data
from node.errors import UsageError
from node.sql_embedded import StagedTable
from storage.verified import verified_slice_paths

if TYPE_CHECKING:
    from engine.client import EngineClient
    from fbs.model import SetDataSchema
    from storage.workspace import DatasetEntry, Workspace

__all__ = [
    "DEFAULT_SQL_ENGINE",
    "MAX_QUERY_CHARS",
    "MAX_RESULT_ROWS_SHOWN",
    "SQL_ENGINES",
    "SqlEngine",
    "SqlResult",
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
SQL_DIR: Final = "sql"


@dataclass(frozen=True, slots=True)
class SqlResult:
    """A query result: the Parquet file the engine wrote and its row count."""

    path: Path
    num_records: int

    def read(self) -> pa.Table:
        """The result as an Arrow table."""
        # Not pq.read_table: that imports pyarrow.dataset (and pandas), 0.3 s of start-up.
        with pq.ParquetFile(self.path) as f:
            return f.read()


def tables_for_query(ws: Workspace, query: str) -> list[DatasetEntry]:
    """Datasets whose alias appears in ``query`` (case-insensitive)."""
    text = query.lower()
    return [e for e in ws.list() if e.alias.lower() in text]


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _declared_schema(event: SetDataSchema) -> pa.Schema | None:
    """The Arrow schema of a SetDataSchema, None if it cannot be converted (the
    embedded engine then infers it from the files). Not `node.transform.arrow_schema_of`:
    that module is too heavy to import on the embedded path."""
    from fbs.arrow_schema import arrow_schema_from_data
    from fbs.errors import FbsError

    try:
        if event.schema is not None:
            return arrow_schema_from_data(event.schema)
        if event.raw_arrow_schema is not None:
            return pa.ipc.read_schema(pa.py_buffer(event.raw_arrow_schema))
    except (FbsError, pa.ArrowException, ValueError):
        return None
    return None


def _stage_dataset(ws: Workspace, entry: DatasetEntry, target: Path) -> StagedTable | None:
    """Fill ``target`` with the dataset's data files; None if it has nothing to read."""
    ds = ws.get(entry.id)
    state = ds.state()
    if state is None or state.data_schema is None:
        return None
    target.mkdir(parents=True)
    verified_slice_paths(ds)  # every slice checked against its block before it is staged
    count = 0
    for _h, _raw, block in ds.iter_blocks():
        d = new_data(block.event)
        if d is not None:
            h = d.physical_hash
            _link(ds.layout.data.path_of(h), target / f"{h.to_multibase()}.parquet")
            count += 1
    if count == 0:
        from node.transform import arrow_schema_of

        schema = arrow_schema_of(state.data_schema, entry.alias)
        pq.write_table(schema.empty_table(), target / "empty.parquet")
        return StagedTable(entry.alias, target, schema)
    return StagedTable(entry.alias, target, _declared_schema(state.data_schema))


@contextlib.contextmanager
def _staged(ws: Workspace) -> Iterator[Path]:
    base = ws.root / "run" / SQL_DIR
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="q-", dir=base))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stage_all(ws: Workspace, query: str, work: Path) -> list[StagedTable]:
    staged = []
    for n, entry in enumerate(tables_for_query(ws, query)):
        table = _stage_dataset(ws, entry, work / f"t{n}")
        if table is not None:
            staged.append(table)
    return staged


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
    DataFusion. ``without_pandas``: see `node.sql_embedded.import_datafusion` (for
    short-lived processes such as the CLI).

    Raises:
        UsageError: an empty or oversized query, an unknown engine.
        engine.errors.InvalidQuery: the engine refused the query (its message).
        engine.errors.EngineInternalError / EngineUnavailable: the Spark engine failed.
    """
    if not query.strip():
        raise UsageError("empty query")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(f"query longer than {MAX_QUERY_CHARS} characters")
    if sql_engine is None:
        sql_engine = "spark" if engine is not None else DEFAULT_SQL_ENGINE
    if sql_engine not in SQL_ENGINES:
        raise UsageError(f"unknown SQL engine {sql_engine!r} (one of {', '.join(SQL_ENGINES)})")
    if sql_engine == "spark" and engine is None:
        from node.engine_manager import get_engine

        engine = get_engine(ws)
    with _staged(ws) as work:
        staged = _stage_all(ws, query, work)
        out = work / "result.parquet"
        if engine is not None and sql_engine == "spark":
            num_records = _run_spark(staged, query, out, engine)
        else:
            from node.sql_embedded import run_datafusion

            table = run_datafusion(staged, query, without_pandas=without_pandas)
            pq.write_table(table, out)
            num_records = table.num_rows
        output_path = Path(output_path)
        output_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(out, output_path)
    return SqlResult(output_path, num_records)
