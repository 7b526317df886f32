"""Write committed data slices exactly as kamu lays them out.

A slice is one Parquet file with the columns ``offset`` Int64, ``op`` Int32,
``system_time`` Timestamp(ms, "UTC"), ``event_time`` Timestamp(ms, "UTC") (or Date32),
then the data columns, with names from the dataset vocabulary; rows are ordered by
offset (contiguous from ``start_offset``). Parquet: snappy compression, dictionary
encoding only on ``op`` and ``system_time``, the Arrow schema embedded.

`SliceWriter` streams record batches (memory bounded by one batch); `write_slice`
writes one table. Both return a `WrittenSlice` carrying the logical hash
(`storage.hashing.logical_hash_parquet`, read back from the file as kamu would) and the
physical hash and size (`storage.hashing.physical_hash_file`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fbs.model import DatasetVocabulary, DataSlice, Multihash, OffsetInterval, Timestamp
from node.ingest.errors import SchemaError
from storage.hashing import logical_hash_parquet, physical_hash_file

#: The default system column names.
DEFAULT_VOCAB: Final = DatasetVocabulary()

__all__ = [
    "DEFAULT_VOCAB",
    "EVENT_TIME_TYPE",
    "OFFSET_TYPE",
    "OP_TYPE",
    "PARQUET_COMPRESSION",
    "SYSTEM_TIME_TYPE",
    "SliceWriter",
    "WrittenSlice",
    "event_time_type",
    "slice_schema",
    "write_slice",
]

OFFSET_TYPE: Final = pa.int64()
OP_TYPE: Final = pa.int32()
SYSTEM_TIME_TYPE: Final = pa.timestamp("ms", "UTC")
EVENT_TIME_TYPE: Final = pa.timestamp("ms", "UTC")
PARQUET_COMPRESSION: Final = "snappy"
#: Rows per Parquet row group (bounds writer memory; readers stream by row group).
ROW_GROUP_ROWS: Final = 1 << 20


def event_time_type(t: pa.DataType) -> pa.DataType:
    """The stored type of an event-time column of input type ``t``.

    Dates stay Date32; timestamps (any unit/zone) become Timestamp(ms, "UTC").

    Raises:
        SchemaError: for any other type.
    """
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return EVENT_TIME_TYPE
    raise SchemaError(f"event time column must be a timestamp or a date, got {t}")


def slice_schema(data: pa.Schema, vocab: DatasetVocabulary = DEFAULT_VOCAB) -> pa.Schema:
    """The slice schema for merged data (``op``, event time and data columns, any order).

    System columns come first in the fixed order; data columns keep their order.

    Raises:
        SchemaError: no event time column, or a data column named like a system column.
    """
    off, op, st, et = (
        vocab.offset_column,
        vocab.operation_type_column,
        vocab.system_time_column,
        vocab.event_time_column,
    )
    names = data.names
    for reserved in (off, st):
        if reserved in names:
            raise SchemaError(f"input must not carry the system column {reserved!r}")
    if et not in names:
        raise SchemaError(f"data has no event time column {et!r}")
    et_field = data.field(et)
    fields = [
        pa.field(off, OFFSET_TYPE, nullable=False),
        pa.field(op, OP_TYPE, nullable=False),
        pa.field(st, SYSTEM_TIME_TYPE, nullable=False),
        pa.field(et, event_time_type(et_field.type), nullable=False),
    ]
    fields += [f for f in data if f.name not in (op, et)]
    return pa.schema(fields)


@dataclass(frozen=True, slots=True)
class WrittenSlice:
    """A written slice file and what an AddData needs to reference it.

    Attributes:
        path: the Parquet file.
        num_records: rows written (0: no file worth committing).
        offset_interval: closed offsets ``[start, end]`` (``None`` when empty).
        logical_hash / physical_hash / size: the file's hashes and byte size.
        max_event_time: largest event time written (``None`` if none).
    """

    path: Path
    num_records: int
    offset_interval: OffsetInterval | None
    logical_hash: Multihash
    physical_hash: Multihash
    size: int
    max_event_time: Timestamp | None

    def data_slice(self) -> DataSlice:
        """The `DataSlice` of an AddData for this file.

        Raises:
            SchemaError: for an empty slice (it must not be committed).
        """
        if self.offset_interval is None:
            raise SchemaError("an empty slice has no DataSlice")
        return DataSlice(
            logical_hash=self.logical_hash,
            physical_hash=self.physical_hash,
            offset_interval=self.offset_interval,
            size=self.size,
        )


def _to_timestamp(value: object) -> Timestamp | None:
    """Timestamp of a pyarrow scalar's value (datetime or date)."""
    import datetime as dt

    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return Timestamp.from_datetime(value)
    if isinstance(value, dt.date):
        return Timestamp.from_datetime(
            dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
        )
    return None


class SliceWriter:
    """Stream merged batches (``op`` + data columns) into one slice file.

    Args:
        path: the file to write (replaced if it exists).
        data_schema: schema of the merged batches (``op``, event time, data columns).
        start_offset: offset of the first row.
        system_time: the ``system_time`` of every row.
        vocab: system column names.

    Raises:
        SchemaError: see `slice_schema`.
    """

    def __init__(
        self,
        path: Path,
        data_schema: pa.Schema,
        *,
        start_offset: int,
        system_time: Timestamp,
        vocab: DatasetVocabulary = DEFAULT_VOCAB,
    ) -> None:
        self.path = Path(path)
        self.vocab = vocab
        self.schema = slice_schema(data_schema, vocab)
        self.start_offset = start_offset
        self.next_offset = start_offset
        self._system_ms = system_time.nanos // 1_000_000
        self._max_event: pa.Scalar | None = None
        op, st = vocab.operation_type_column, vocab.system_time_column
        self._writer = pq.ParquetWriter(
            str(self.path),
            self.schema,
            compression=PARQUET_COMPRESSION,
            use_dictionary=[op, st],
            write_statistics=True,
            coerce_timestamps=None,
        )
        self._closed = False

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows (columns by name; ``op`` defaults to ``+A`` if absent).

        Raises:
            SchemaError: a column that is missing or cannot be cast to the slice schema.
        """
        n = batch.num_rows
        if n == 0:
            return
        v = self.vocab
        cols: list[pa.Array | pa.ChunkedArray] = []
        for f in self.schema:
            if f.name == v.offset_column:
                cols.append(pa.array(range(self.next_offset, self.next_offset + n), OFFSET_TYPE))
            elif f.name == v.system_time_column:
                cols.append(pa.array([self._system_ms] * n, pa.int64()).cast(SYSTEM_TIME_TYPE))
            elif f.name == v.operation_type_column and f.name not in batch.schema.names:
                cols.append(pa.array([0] * n, OP_TYPE))
            else:
                if f.name not in batch.schema.names:
                    if not f.nullable:
                        raise SchemaError(f"batch lacks required column {f.name!r}")
                    cols.append(pa.nulls(n, f.type))
                    continue
                col = batch.column(f.name)
                if col.type != f.type:
                    try:
                        # Event time: unit coercion to ms truncates sub-ms digits (as kamu).
                        col = pc.cast(col, f.type, safe=f.name != v.event_time_column)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        raise SchemaError(
                            f"column {f.name!r}: cannot store {col.type} as {f.type}: {e}"
                        ) from None
                if f.name == v.event_time_column:
                    if col.null_count:
                        raise SchemaError(f"event time column {f.name!r} has null values")
                    top = pc.max(col)
                    if self._max_event is None or (
                        top.is_valid and pc.greater(top, self._max_event).as_py()
                    ):
                        self._max_event = top
                cols.append(col)
        table = pa.table(cols, schema=self.schema)
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.next_offset += n

    def close(self) -> WrittenSlice:
        """Finish the file and hash it.

        Raises:
            storage.errors.InvalidDataFile: if the written file cannot be read back.
        """
        if not self._closed:
            self._writer.close()
            self._closed = True
        count = self.next_offset - self.start_offset
        interval = (
            OffsetInterval(start=self.start_offset, end=self.next_offset - 1) if count else None
        )
        logical = logical_hash_parquet(str(self.path))
        physical, size = physical_hash_file(self.path)
        max_et = _to_timestamp(self._max_event.as_py()) if self._max_event is not None else None
        return WrittenSlice(self.path, count, interval, logical, physical, size, max_et)

    def abort(self) -> None:
        """Close without hashing and delete the file."""
        if not self._closed:
            self._writer.close()
            self._closed = True
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> SliceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()


def write_slice(
    path: Path,
    merged: pa.Table,
    *,
    start_offset: int,
    system_time: Timestamp,
    vocab: DatasetVocabulary = DEFAULT_VOCAB,
) -> WrittenSlice:
    """Write ``merged`` (``op`` + data columns) as one slice file starting at ``start_offset``.

    Raises:
        SchemaError: no event time column, reserved column names, uncastable columns.
    """
    writer = SliceWriter(
        path, merged.schema, start_offset=start_offset, system_time=system_time, vocab=vocab
    )
    with writer:
        writer.write(merged)
    return writer.close()
