"""Parquet reader (`ReadStepParquet`): row groups streamed with ``iter_batches``.

With a declared schema, columns are matched by name (others are not read) and cast with
safe casts; a declared column missing from the file is an error. Without one, the file's
own types are kept except that timestamps become ms UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fbs.model.source import ReadStepParquet
from node.ingest.errors import ReadError
from node.ingest.readers._common import Conformer, Location


def read_parquet(
    step: ReadStepParquet, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream the batches of a Parquet file.

    Raises:
        ReadError: not a Parquet file, a missing declared column, a value that does not
            fit (named by row number and column).
    """
    del step
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise ReadError(f"not a readable Parquet file: {e}", path=path) from None
    names = pf.schema_arrow.names
    columns = None
    if schema is not None:
        missing = [n for n in schema.names if n not in names]
        if missing:
            raise ReadError(
                f"missing column {missing[0]!r} (file has {', '.join(names)})",
                path=path,
                column=missing[0],
            )
        columns = list(schema.names)
    conformer = Conformer(schema, missing_as_null=False)
    rows = 0
    with pf:
        batches = pf.iter_batches(batch_size=batch_rows, columns=columns)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as e:
                raise ReadError(f"corrupt Parquet data after row {rows}: {e}", path=path) from None
            loc = Location(path, rows, lambda r: None)
            rows += batch.num_rows
            if batch.num_rows:
                yield conformer.conform(batch, loc)
