"""CSV output of tables that may hold nested values (``odf tail``, ``export``, ``sql``).

Arrow's CSV writer refuses lists, structs and maps. A CSV cell holds text, so such a value
is written as its compact JSON text (``["x","y"]``, ``{"lat":1.5,"lon":2.5}``, a map as its
``[key, value]`` pairs): readable back by any JSON parser, unambiguous, the value the
``ndjson`` output gives, and what tables show (`nested_as_json`). Nulls stay empty cells.
Flat columns are left to Arrow's writer untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def json_default(value: Any) -> Any:
    """JSON for the values `json` cannot encode: instants in RFC 3339 UTC (``Z``), dates
    and times in ISO form, decimals as their exact text, bytes in hex."""
    # Imported here, like everything this module needs: `odf` loads it at start for
    # every command, and most never print a nested or decimal value.
    import datetime as dt
    import decimal

    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def nested_as_json(value: Any) -> Any:
    """``value`` itself, or the compact JSON text of a nested one (list, mapping, a map's
    pairs): how a table cell shows it."""
    if isinstance(value, list | tuple | dict):
        import json

        return json.dumps(value, default=json_default, ensure_ascii=False, separators=(",", ":"))
    return value


def _is_nested(dtype: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(dtype):
        return _is_nested(dtype.value_type)
    return bool(
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
        or pa.types.is_struct(dtype)
        or pa.types.is_map(dtype)
        or pa.types.is_union(dtype)
    )


def _json_column(column: pa.ChunkedArray) -> pa.Array:
    import json

    import pyarrow as pa

    cells = [
        None
        if value is None
        else json.dumps(value, default=json_default, ensure_ascii=False, separators=(",", ":"))
        for value in column.to_pylist()
    ]
    return pa.array(cells, type=pa.string())


def csv_ready(table: pa.Table) -> pa.Table:
    """``table`` with every nested column replaced by the JSON text of its values."""
    for i, field in enumerate(table.schema):
        if _is_nested(field.type):
            import pyarrow as pa

            text = pa.field(field.name, pa.string(), nullable=field.nullable)
            table = table.set_column(i, text, _json_column(table.column(i)))
    return table


def write_csv(table: pa.Table, out: Any) -> None:
    """``table`` as CSV (nested values as JSON text) to the binary stream ``out``."""
    import pyarrow.csv as pcsv

    pcsv.write_csv(csv_ready(table), out)


def write_ndjson(table: pa.Table, out: Any) -> None:
    """``table`` as one JSON object per line to the binary stream ``out``."""
    import json

    for batch in table.to_batches():
        for row in batch.to_pylist():
            line = json.dumps(row, default=json_default, ensure_ascii=False) + "\n"
            out.write(line.encode())
