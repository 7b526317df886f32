"""Read step: a local file → Arrow record batches under the declared schema.

`read_batches` dispatches on the read step (`ReadStepCsv`, `ReadStepJson`,
`ReadStepNdJson`, `ReadStepParquet`, `ReadStepGeoJson`, `ReadStepNdGeoJson`,
`ReadStepEsriShapefile`; format details in `node.ingest.readers.*`). The declared schema
(``ddlSchema`` or the RFC-016 ``schema``, see `read_schema`) is applied while reading:
columns are selected by name (CSV: by header name or position) and cast with safe casts;
a value that does not fit is a `ReadError` naming the file, line (or record number) and
column. Timestamps always come out as ``timestamp("ms", "UTC")``. Batches hold at most
``batch_rows`` rows and the readers stream, so memory follows the batch size (JSON and
GeoJSON *documents* are the exception: they are parsed whole, up to a named limit).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from fbs.arrow_schema import arrow_schema_from_data, parse_ddl_schema
from fbs.errors import InvalidDdlSchema, SchemaConversionError
from fbs.model.source import (
    ReadStep,
    ReadStepCsv,
    ReadStepEsriShapefile,
    ReadStepGeoJson,
    ReadStepJson,
    ReadStepNdGeoJson,
    ReadStepNdJson,
    ReadStepParquet,
)
from node.ingest.errors import ReadError, SchemaError, UnsupportedFormat
from node.ingest.readers._common import DEFAULT_BATCH_ROWS, TIMESTAMP_TYPE

__all__ = ["DEFAULT_BATCH_ROWS", "TIMESTAMP_TYPE", "read_batches", "read_schema"]


def read_schema(read: ReadStep) -> pa.Schema | None:
    """The schema declared by a read step (``ddlSchema`` or ``schema``), or None.

    Raises:
        SchemaError: both are set, the DDL does not parse, or the RFC-016 schema has no
            Arrow equivalent.
    """
    ddl = read.ddl_schema
    schema = read.schema
    if ddl is not None and schema is not None:
        raise SchemaError("a read step may declare ddlSchema or schema, not both")
    try:
        if ddl is not None:
            return parse_ddl_schema(ddl)
        if schema is not None:
            return arrow_schema_from_data(schema)
    except (InvalidDdlSchema, SchemaConversionError) as e:
        raise SchemaError(str(e)) from None
    return None


def read_batches(
    read: ReadStep, path: Path, *, batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Stream the record batches of ``path`` as ``read`` describes.

    Args:
        read: the read step.
        path: the (fetched and prepared) local file.
        batch_rows: most rows per batch (> 0).

    Raises:
        ReadError: unreadable or malformed input, a missing column, a value that does not
            fit its declared type (the message names file, line/record and column).
        SchemaError: an unusable declared schema, encoding or time format.
        UnsupportedFormat: an unknown read step, or a shapefile without ``pyshp``.
    """
    if batch_rows <= 0:
        raise ReadError(f"batch_rows must be positive, got {batch_rows}")
    path = Path(path)
    schema = read_schema(read)
    if not path.is_file():
        raise ReadError("no such file", path=path)
    # Each format imports only its own reader (a CLI ingest pays for one).
    if isinstance(read, ReadStepCsv):
        from node.ingest.readers.csv import read_csv

        yield from read_csv(read, path, schema, batch_rows)
    elif isinstance(read, ReadStepNdJson):
        from node.ingest.readers.json import read_ndjson

        yield from read_ndjson(read, path, schema, batch_rows)
    elif isinstance(read, ReadStepJson):
        from node.ingest.readers.json import read_json

        yield from read_json(read, path, schema, batch_rows)
    elif isinstance(read, ReadStepParquet):
        from node.ingest.readers.parquet import read_parquet

        yield from read_parquet(read, path, schema, batch_rows)
    elif isinstance(read, ReadStepGeoJson):
        from node.ingest.readers.geojson import read_geojson

        yield from read_geojson(read, path, schema, batch_rows)
    elif isinstance(read, ReadStepNdGeoJson):
        from node.ingest.readers.geojson import read_ndgeojson

        yield from read_ndgeojson(read, path, schema, batch_rows)
    elif isinstance(read, ReadStepEsriShapefile):
        from node.ingest.readers.shapefile import read_shapefile

        yield from read_shapefile(read, path, schema, batch_rows)
    else:
        raise UnsupportedFormat(f"unknown read step {type(read).__name__}")
