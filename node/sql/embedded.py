"""The embedded engine of ``odf sql``: DataFusion, in this process, over staged slices.

`node.sql.query` stages each dataset the query names (hard links to exactly the data files its
chain references) and calls `run_datafusion` with the folders; this module knows nothing
of workspaces (no import of `node.sql.query`, `storage`).

Names: each folder is registered as a table named by the dataset's alias, exactly (a
quoted identifier, so dots and slashes are part of the name, not catalog/schema
separators). DataFusion's SQL dialect accepts both quote styles for identifiers, so the
Spark spelling ``SELECT * FROM `com.example.cities``` works unchanged, as does
``"com.example.cities"``. Unquoted identifiers are lower-cased (DataFusion's rule, unlike
Spark's case-insensitive lookup), so a mixed-case alias is also registered under its
lower-case form; mixed-case *column* names must be quoted.

Schemas: each table gets the dataset's declared schema (its last ``SetDataSchema``) rather
than one inferred from the files: no footer is read at registration and slices written
before a column was added read it as NULL.

Results are normalized to what the Spark path produces, so the renderings (table, CSV,
JSON, Parquet) are the same: timestamps become ``timestamp[ms, UTC]`` (the Spark engine
writes ``TIMESTAMP_MILLIS`` in session time zone UTC; a time zone-less DataFusion
timestamp is read as UTC), view types (``string_view``, ``binary_view``) their plain
forms. Auto-generated column names differ between the engines (``count(*)`` vs Spark's
``count(1)``): alias computed columns for stable names.

Only queries run: DDL (``CREATE EXTERNAL TABLE``), DML (``COPY``, ``INSERT``) and
statements (``SET``) are refused, like any other planning or execution error, as
`engine.errors.InvalidQuery` with DataFusion's message on one line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Final

import pyarrow as pa

from engine.errors import InvalidQuery

__all__ = ["ENGINE_NAME", "StagedTable", "import_datafusion", "normalize", "run_datafusion"]

ENGINE_NAME: Final = "datafusion"
_TS: Final = pa.timestamp("ms", tz="UTC")
# View types appeared in pyarrow 16 (the project accepts 15): compare type ids.
_STRING_VIEW_ID: Final = pa.string_view().id if hasattr(pa, "string_view") else -1
_BINARY_VIEW_ID: Final = pa.binary_view().id if hasattr(pa, "binary_view") else -1


def _is_list_view(t: pa.DataType) -> bool:
    check = getattr(pa.types, "is_list_view", None)
    return bool(check(t)) if check is not None else False


@dataclass(frozen=True, slots=True)
class StagedTable:
    """A dataset staged for a query: its alias, folder of Parquet files and schema."""

    alias: str
    folder: Path
    schema: pa.Schema | None


class _NoPandas:
    """A meta-path finder that makes ``import pandas`` fail (see `import_datafusion`)."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def import_datafusion(*, without_pandas: bool = False) -> ModuleType:
    """The ``datafusion`` module.

    ``without_pandas``: import it while pandas cannot be imported. DataFusion builds
    pyarrow scalars at import time and pyarrow then imports pandas to check whether they
    are pandas objects: a quarter of a second that a short-lived process (the CLI) that
    never uses pandas need not pay. Afterwards pyarrow's implicit pandas checks answer
    "no pandas" in this process (explicit conversions such as ``to_pandas`` still import
    it), so only such a process should ask for it.
    """
    if "datafusion" in sys.modules or not without_pandas or "pandas" in sys.modules:
        import datafusion

        return datafusion
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        import datafusion
    finally:
        sys.meta_path.remove(finder)
    return datafusion


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _normal_type(t: pa.DataType) -> pa.DataType:
    """The type the Spark path would produce for a DataFusion result type."""
    if pa.types.is_timestamp(t):
        return _TS
    if t.id == _STRING_VIEW_ID:
        return pa.string()
    if t.id == _BINARY_VIEW_ID:
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or _is_list_view(t):
        return pa.list_(t.value_field.with_type(_normal_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_normal_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_normal_type(t.key_type), _normal_type(t.item_type))
    return t


def normalize(table: pa.Table) -> pa.Table:
    """``table`` with the column types the Spark path gives (see the module docstring)."""
    fields = [f.with_type(_normal_type(f.type)) for f in table.schema]
    target = pa.schema(fields, metadata=table.schema.metadata)
    if target.equals(table.schema):
        return table
    # safe=False: nanosecond/microsecond timestamps are truncated to milliseconds.
    return table.cast(target, safe=False)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def run_datafusion(
    tables: Sequence[StagedTable], query: str, *, without_pandas: bool = False
) -> pa.Table:
    """Run ``query`` over ``tables`` in an embedded DataFusion session.

    Raises:
        engine.errors.InvalidQuery: DataFusion refused or failed the query (one line).
    """
    datafusion = import_datafusion(without_pandas=without_pandas)
    ctx = datafusion.SessionContext()
    taken = {t.alias for t in tables}
    for t in tables:
        names = [t.alias]
        lower = t.alias.lower()
        if lower != t.alias and lower not in taken:
            taken.add(lower)
            names.append(lower)
        for name in names:
            ctx.register_parquet(
                _quoted(name), str(t.folder), file_extension=".parquet", schema=t.schema
            )
    options = (
        datafusion.SQLOptions()
        .with_allow_ddl(False)
        .with_allow_dml(False)
        .with_allow_statements(False)
    )
    try:
        result = ctx.sql_with_options(query, options).to_arrow_table()
    except Exception as e:  # DataFusion raises plain Exceptions (planning, execution)
        raise InvalidQuery(_one_line(e)) from None
    if not isinstance(result, pa.Table):  # pragma: no cover - a DataFusion API change
        raise TypeError(f"DataFusion returned {type(result).__name__}, not a pyarrow Table")
    return normalize(result)
