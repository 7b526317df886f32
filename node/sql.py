"""``odf sql``: ad-hoc Spark SQL over the workspace's datasets.

Design: the query runs on the engine (the same warm Spark JVM as transforms, started on
demand by `node.engine_manager`) through ``ExecuteRawQuery``: this process never starts
a JVM of its own. The raw query is a multi-step transform: one step per dataset the
query mentions, ``SELECT * FROM parquet.`<dir>``` registered under the dataset's alias
(backtick-quote aliases with dots or slashes: ``SELECT * FROM `acme/my.data```), then
the user's query as the output step. The engine writes the result as one Parquet file,
which is rendered here (table, CSV, JSON) or kept (``--output-format parquet``).

Each ``<dir>`` is a temp directory under ``.odf/run/sql/`` holding hard links (copies
across filesystems) of exactly the data files the dataset's chain references, so
unreferenced objects (left by interrupted commits) are never read; a dataset with a
schema but no data gets an empty Parquet file with its schema. Datasets are picked by a
case-insensitive search of their alias in the query text (cheap, and it keeps Spark
from reading the footers of every dataset); a dataset named but without a schema is
skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from engine.client import raise_for_result
from fbs.model import RawQueryRequest, SqlQueryStep, TransformSql
from fbs.rules import new_data
from node.errors import UsageError

if TYPE_CHECKING:
    from engine.client import EngineClient
    from storage.workspace import DatasetEntry, Workspace

__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_RESULT_ROWS_SHOWN",
    "SqlResult",
    "run_sql",
    "tables_for_query",
]

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
        return pq.read_table(self.path)


def tables_for_query(ws: Workspace, query: str) -> list[DatasetEntry]:
    """Datasets whose alias appears in ``query`` (case-insensitive)."""
    text = query.lower()
    return [e for e in ws.list() if e.alias.lower() in text]


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _stage_dataset(ws: Workspace, entry: DatasetEntry, target: Path) -> bool:
    """Fill ``target`` with the dataset's data files; False if it has nothing to read."""
    from node.transform import arrow_schema_of

    ds = ws.get(entry.id)
    state = ds.state()
    if state is None or state.data_schema is None:
        return False
    target.mkdir(parents=True)
    count = 0
    for _h, _raw, block in ds.iter_blocks():
        d = new_data(block.event)
        if d is not None:
            h = d.physical_hash
            _link(ds.layout.data.path_of(h), target / f"{h.to_multibase()}.parquet")
            count += 1
    if count == 0:
        schema = arrow_schema_of(state.data_schema, entry.alias)
        pq.write_table(schema.empty_table(), target / "empty.parquet")
    return True


@contextlib.contextmanager
def _staged(ws: Workspace) -> Iterator[Path]:
    base = ws.root / "run" / SQL_DIR
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="q-", dir=base))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def run_sql(
    ws: Workspace, query: str, output_path: Path, *, engine: EngineClient | None = None
) -> SqlResult:
    """Run ``query`` over the workspace's datasets; the result goes to ``output_path``.

    Raises:
        UsageError: an empty or oversized query.
        engine.errors.InvalidQuery: Spark refused the query (its message).
        engine.errors.EngineInternalError / EngineUnavailable: the engine failed.
    """
    if not query.strip():
        raise UsageError("empty query")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(f"query longer than {MAX_QUERY_CHARS} characters")
    if engine is None:
        from node.engine_manager import get_engine

        engine = get_engine(ws)
    with _staged(ws) as work:
        steps: list[SqlQueryStep] = []
        for n, entry in enumerate(tables_for_query(ws, query)):
            folder = work / f"t{n}"
            if _stage_dataset(ws, entry, folder):
                steps.append(
                    SqlQueryStep(
                        alias=entry.alias, query=f"SELECT * FROM parquet.{_quote(str(folder))}"
                    )
                )
        steps.append(SqlQueryStep(alias=None, query=query))
        out = work / "result.parquet"
        request = RawQueryRequest(
            input_data_paths=(),
            transform=TransformSql(engine="spark", queries=tuple(steps)),
            output_data_path=str(out),
        )
        response = raise_for_result(engine.execute_raw_query(request))
        output_path = Path(output_path)
        output_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(out, output_path)
    return SqlResult(output_path, int(response.num_records))
