"""Arrow tables as plain rows for the JSON, YAML and table outputs (``odf tail``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from node.render.csv import json_default

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["plain_cell", "plain_rows", "table_cells"]


def plain_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table``'s rows as plain cells (what ``to_pylist`` and `plain_cell` give)."""
    columns = {name: _column_cells(table.column(name)) for name in table.column_names}
    rows = zip(*columns.values(), strict=True)
    return [dict(zip(columns, cells, strict=True)) for cells in rows]


#: Microseconds per unit of the timestamp units Python's datetime holds exactly.
_TIMESTAMP_US: Final = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _column_cells(col: pa.ChunkedArray) -> list[Any]:
    """`plain_cell` of every value; UTC and naive timestamps are built here because pyarrow's
    own conversion imports pandas (about as slow as the rest of ``odf tail`` together)."""
    import pyarrow as pa

    t = col.type
    if pa.types.is_timestamp(t) and t.unit in _TIMESTAMP_US and t.tz in (None, "UTC"):
        import datetime as dt

        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC if t.tz else None)
        per = _TIMESTAMP_US[t.unit]
        # A zero-copy view, not a cast: casting imports pyarrow.compute (slow too).
        ints = [v for chunk in col.chunks for v in chunk.view(pa.int64()).to_pylist()]
        return [
            None if v is None else plain_cell(epoch + dt.timedelta(microseconds=v * per))
            for v in ints
        ]
    return [plain_cell(v) for v in col.to_pylist()]


def plain_cell(value: Any) -> Any:
    """A plain value for JSON/YAML output: nested values stay lists and mappings."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):  # lists; a map's (key, value) pairs
        return [plain_cell(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_cell(v) for k, v in value.items()}
    return json_default(value)


def table_cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the table output: a nested value shown as its JSON text."""
    from node.render.csv import nested_as_json

    return [{k: nested_as_json(v) for k, v in row.items()} for row in rows]
