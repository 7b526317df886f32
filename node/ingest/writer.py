"""Write committed data slices exactly as kamu lays them out.

A slice is one Parquet file with the columns ``offset`` Int64, ``op`` Int32,
``system_time`` Timestamp(ms, "UTC"), ``event_time`` Timestamp(ms, "UTC") (or Date32),
then the data columns, with names from the dataset vocabulary; rows are ordered by
offset (contiguous from ``start_offset``). Parquet: snappy compression, the Arrow schema
embedded, row groups of `ROW_GROUP_ROWS` rows (batches are gathered up to that, or up to
`ROW_GROUP_MAX_BYTES` of Arrow data), and encodings that make the system columns nearly
free: ``offset``, an arithmetic sequence, as ``DELTA_BINARY_PACKED`` (a few
bytes per 256 values); every other column dictionary-encoded as pyarrow does by default
(a constant ``op`` or ``system_time`` is one dictionary entry and a run), except a flat
column whose first rows are mostly distinct values (`dictionary_columns`): it is written
with plain pages from the start instead of filling a dictionary page that pyarrow would
abandon for plain pages anyway. kamu writes plain pages except for ``op`` and
``system_time``; both encodings are standard and read by arrow-rs, DataFusion and Spark
(tests/engine/test_arrow_rs_compat.py).

`SliceWriter` streams record batches (memory bounded by two row groups: one gathered
while the previous one is encoded, and `HASH_QUEUE_TABLES` batches waiting for the
hash; 376 MiB peak RSS for the CLI ingest of the benchmark's 10M-row CSV, with the
pipeline's read-ahead); `write_slice` writes one table. Both return a `WrittenSlice`
carrying the logical hash and the physical hash and size (SHA3 of the bytes as the
Parquet writer emits them, as `storage.hashing.physical_hash_file` would compute on the
file).

The logical hash must be what `storage.hashing.logical_hash_parquet` computes on the
written file (kamu hashes the batches arrow-rs reads back). To avoid reading the file a
second time, the batches are hashed as they are written (`fbs.logical_hash.RecordDigest`)
when that is known to give the same result: every column has a flat type whose values
survive the Parquet round trip unchanged (`streamable_type`; structs are excluded because
their null masks make the hash depend on batch boundaries, lists and dictionaries to stay
on the safe side), and, checked after closing from the file footer alone, the Arrow
schema arrow-rs derives for the file (`storage.hashing.arrow_rs_schema`) has exactly the
names and types that were hashed (a timestamp unit coerced by Parquet, say, would change
the hash). Otherwise the file is read back and hashed. ``verify_hash`` (or the
environment variable `VERIFY_HASH_ENV` set to ``1``) always does both and compares them.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fbs.arrow_values import int_array_range, int_scalar
from fbs.logical_hash import RecordDigest
from fbs.model import DatasetVocabulary, DataSlice, Multihash, OffsetInterval, Timestamp
from fbs.multiformats import ARROW0_SHA3_256, SHA3_256
from node.ingest.errors import SchemaError
from storage.errors import InvalidDataFile
from storage.hashing import arrow_rs_schema, logical_hash_parquet, physical_hash_file

#: The default system column names.
DEFAULT_VOCAB: Final = DatasetVocabulary()

__all__ = [
    "DEFAULT_VOCAB",
    "DICTIONARY_MAX_DISTINCT_SHARE",
    "DICTIONARY_SAMPLE_ROWS",
    "EVENT_TIME_TYPE",
    "HASH_QUEUE_TABLES",
    "OFFSET_ENCODING",
    "OFFSET_TYPE",
    "OP_TYPE",
    "PARQUET_COMPRESSION",
    "ROW_GROUP_MAX_BYTES",
    "ROW_GROUP_ROWS",
    "SYSTEM_TIME_TYPE",
    "VERIFY_HASH_ENV",
    "SliceWriter",
    "WrittenSlice",
    "dictionary_columns",
    "event_time_type",
    "parquet_leaf_paths",
    "slice_schema",
    "streamable_type",
    "write_slice",
]

OFFSET_TYPE: Final = pa.int64()
OP_TYPE: Final = pa.int32()
SYSTEM_TIME_TYPE: Final = pa.timestamp("ms", "UTC")
EVENT_TIME_TYPE: Final = pa.timestamp("ms", "UTC")
PARQUET_COMPRESSION: Final = "snappy"
#: Rows per Parquet row group (readers stream by row group). A quarter of pyarrow's
#: default: a row group is encoded on a thread while the next one is read, and only the
#: last one after the input ends (1M rows: a fifth of the encoding, not all of it).
#: Neither the benchmark's slice size nor the encoding CPU changes with it (dictionaries
#: are per row group, but mostly-distinct columns have none, see `dictionary_columns`).
ROW_GROUP_ROWS: Final = 1 << 18
#: Arrow bytes gathered for one row group before it is written whatever its rows (bounds
#: writer memory for wide rows).
ROW_GROUP_MAX_BYTES: Final = 128 << 20
#: Encoding of the offset column (an arithmetic sequence: every delta is 1).
OFFSET_ENCODING: Final = "DELTA_BINARY_PACKED"
#: Rows (the first ones written) whose distinct values decide each column's encoding.
DICTIONARY_SAMPLE_ROWS: Final = 1 << 16
#: A flat column whose sampled values are more than this share distinct gets plain pages,
#: not a dictionary: ids, prices, names... would fill pyarrow's dictionary page and fall
#: back to plain pages anyway, after costing encoding time and bytes (0.95x the file size
#: and ~25% less encoding CPU on the benchmark's CSV).
DICTIONARY_MAX_DISTINCT_SHARE: Final = 0.5
#: Tables queued for the logical hash before `SliceWriter.write` waits: the hash thread
#: absorbs the uneven pace of parsing and encoding without holding up the reader.
HASH_QUEUE_TABLES: Final = 3
#: Bytes the Parquet writer's output is buffered in natively before each Python-level
#: write to the hashing sink (the writer emits every page header and page as a piece of
#: its own: ~0.2 CPU-s of Python calls for a 10M-row slice without the buffer).
_SINK_BUFFER_BYTES: Final = 1 << 20
#: Environment variable: ``1`` makes every writer re-read its file and compare hashes.
VERIFY_HASH_ENV: Final = "ODF_INGEST_VERIFY_HASH"


def streamable_type(t: pa.DataType) -> bool:
    """Whether values of type ``t`` hash the same before writing and after reading back.

    Flat types whose values Parquet stores exactly. Excluded: structs (null masks make
    the hash batch-dependent), lists/maps/unions/dictionaries/extensions (kept on the
    re-reading path for safety), ``date64`` (stored as whole days), the null type and
    half floats.
    """
    types = pa.types
    return (
        types.is_integer(t)
        or (types.is_floating(t) and not types.is_float16(t))
        or types.is_boolean(t)
        or types.is_string(t)
        or types.is_large_string(t)
        or types.is_binary(t)
        or types.is_large_binary(t)
        or types.is_fixed_size_binary(t)
        or types.is_date32(t)
        or types.is_timestamp(t)
        or types.is_decimal128(t)
    ) and not isinstance(t, pa.BaseExtensionType)


def parquet_leaf_paths(schema: pa.Schema) -> list[str]:
    """The Parquet column paths (``s.a``, ``l.list.element``) pyarrow writes for ``schema``.

    Per-column writer options name leaves by these paths: a struct's top-level name
    does not reach its fields. Taken from the footer of an empty file written in memory.
    """
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema):
        pass
    parquet_schema = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return [parquet_schema.column(i).path for i in range(len(parquet_schema))]


def dictionary_columns(schema: pa.Schema, sample: pa.Table | None, *, skip: str) -> list[str]:
    """The Parquet leaf paths of ``schema`` to dictionary-encode, all but ``skip``'s.

    A flat column whose values in ``sample`` (the first rows written) are more than
    `DICTIONARY_MAX_DISTINCT_SHARE` distinct is left out. Nested leaves always keep one,
    and every column does without a sample.
    """
    leaves = [p for p in parquet_leaf_paths(schema) if p != skip]
    if sample is None or sample.num_rows == 0:
        return leaves
    flat = {f.name for f in schema if not pa.types.is_nested(f.type)}
    return [p for p in leaves if p not in flat or not _mostly_distinct(sample.column(p))]


def _mostly_distinct(column: pa.ChunkedArray) -> bool:
    """Whether more than `DICTIONARY_MAX_DISTINCT_SHARE` of the non-null values differ."""
    values: int = len(column) - column.null_count
    if values == 0:
        return False
    try:
        # ``unique`` (null counts as one value) costs a third of ``count_distinct``.
        distinct: int = len(pc.unique(column)) - (1 if column.null_count else 0)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return False  # a type the kernel does not hash: keep pyarrow's default
    return distinct > values * DICTIONARY_MAX_DISTINCT_SHARE


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


class _HashWorker:
    """One worker thread for the slice's logical hash, fed in write order.

    The logical digest (`RecordDigest`, when ``schema`` is given) is fed one table at a
    time. Hashing (pyarrow kernels and SHA3, both releasing the GIL) then overlaps with
    parsing the next input batches and encoding Parquet. At most `HASH_QUEUE_TABLES`
    tables wait for the hash: memory stays bounded by a few batches. A
    failure inside the logical digest does not fail the write: the digest is dropped and
    `finalize` returns None (the caller then hashes the file).
    """

    def __init__(self, schema: pa.Schema | None) -> None:
        self._digest = RecordDigest(schema) if schema is not None else None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="slice-hash")
        self._pending: list[Future[None]] = []

    def _wait(self, keep: int = 0) -> None:
        """Wait until at most ``keep`` queued tables are not hashed yet."""
        while len(self._pending) > keep:
            try:
                self._pending.pop(0).result()
            except Exception:  # any failure only disables the shortcut: the file is hashed
                self._digest = None

    def update(self, table: pa.Table) -> None:
        """Queue ``table`` for the logical digest (at most `HASH_QUEUE_TABLES` wait)."""
        self._wait(keep=HASH_QUEUE_TABLES - 1)
        if self._digest is not None:
            self._pending.append(self._executor.submit(self._digest.update, table))

    def finalize(self) -> bytes | None:
        """Wait for all queued work; the logical digest (None: dropped or not kept)."""
        self._wait()
        self._executor.shutdown(wait=True)
        if self._digest is None:
            return None
        try:
            return self._digest.finalize()
        except Exception:  # see _wait
            return None

    def discard(self) -> None:
        """Wait for queued work and drop everything."""
        self._wait()
        self._executor.shutdown(wait=True)
        self._digest = None


class _HashingFile:
    """The slice file as the Parquet writer's sink: bytes are SHA3'd as they are written.

    This gives the physical hash without reading the file again. The bytes are hashed
    on the thread that writes them, the encoder's (they arrive `_SINK_BUFFER_BYTES` at a
    time; SHA3 releases the GIL): no copies queued, no thread hop, and the logical
    hash's thread, the busier of the two (10M rows: 2.3 vs 1.6 CPU-s), carries only the
    logical hash. Writes come one row group at a time from the encoder, then from
    `SliceWriter.close`: always in file order.
    """

    def __init__(self, path: Path) -> None:
        self._file = path.open("wb")
        self._sha3 = hashlib.sha3_256()
        self.size = 0
        self.failed = False

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, data: bytes) -> int:
        written = self._file.write(data)
        self.size += len(data)
        if not self.failed:
            try:
                self._sha3.update(data)
            except Exception:  # the file is hashed instead
                self.failed = True
        return written

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def digest(self) -> bytes:
        """SHA3-256 of the bytes written (call after the last write)."""
        return self._sha3.digest()


_UNIT_NANOS: Final = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_DAY_NANOS: Final = 86_400 * 1_000_000_000


def _to_timestamp(scalar: pa.Scalar) -> Timestamp | None:
    """Timestamp of an event-time scalar (a timestamp, or a date as its midnight UTC).

    Read from the scalar's raw integer: converting it to a datetime would import pandas.
    """
    if not scalar.is_valid:
        return None
    t = scalar.type
    if pa.types.is_timestamp(t):
        return Timestamp(int(scalar.value) * _UNIT_NANOS[t.unit])
    if pa.types.is_date32(t):
        return Timestamp(int(scalar.value) * _DAY_NANOS)
    return None


class SliceWriter:
    """Stream merged batches (``op`` + data columns) into one slice file.

    Args:
        path: the file to write (replaced if it exists).
        data_schema: schema of the merged batches (``op``, event time, data columns).
        start_offset: offset of the first row.
        system_time: the ``system_time`` of every row.
        vocab: system column names.
        verify_hash: also hash the file read back and compare (default: the
            `VERIFY_HASH_ENV` environment variable).

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
        verify_hash: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self.vocab = vocab
        self.schema = slice_schema(data_schema, vocab)
        self.start_offset = start_offset
        self.next_offset = start_offset
        self._system_time = int_scalar(system_time.nanos // 1_000_000, SYSTEM_TIME_TYPE)
        self._op_append = int_scalar(0, OP_TYPE)
        self._arange = int_array_range(0, 0, OFFSET_TYPE)
        self._max_event: pa.Scalar | None = None
        if verify_hash is None:
            verify_hash = os.environ.get(VERIFY_HASH_ENV) == "1"
        self._verify = verify_hash
        streamable = all(streamable_type(f.type) for f in self.schema)
        self._worker = _HashWorker(self.schema if streamable else None)
        self._sink = _HashingFile(self.path)
        self._out = pa.BufferedOutputStream(
            pa.PythonFile(self._sink, mode="w"), buffer_size=_SINK_BUFFER_BYTES
        )
        self._hashed_while_writing = False
        # Opened with the first row group: its first rows choose the dictionaries.
        self._writer: pq.ParquetWriter | None = None
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="slice-encode")
        self._encoding: Future[None] | None = None
        self._gathered: list[pa.Table] = []
        self._gathered_rows = 0
        self._gathered_bytes = 0
        self._closed = False
        self._result: WrittenSlice | None = None

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
                cols.append(self._offsets(n))
            elif f.name == v.system_time_column:
                cols.append(pa.repeat(self._system_time, n))
            elif f.name == v.operation_type_column and f.name not in batch.schema.names:
                cols.append(pa.repeat(self._op_append, n))
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
        self._worker.update(table)
        self._gather(table)
        self.next_offset += n

    def _gather(self, table: pa.Table) -> None:
        """Add rows to the row group being gathered; write every full row group."""
        self._gathered.append(table)
        self._gathered_rows += table.num_rows
        self._gathered_bytes += table.nbytes
        if self._gathered_rows >= ROW_GROUP_ROWS or self._gathered_bytes >= ROW_GROUP_MAX_BYTES:
            self._flush(final=False)

    def _parquet_writer(self, first_rows: pa.Table | None) -> pq.ParquetWriter:
        """The Parquet writer, opened on first use with encodings chosen from ``first_rows``."""
        if self._writer is None:
            off = self.vocab.offset_column
            sample = None if first_rows is None else first_rows.slice(0, DICTIONARY_SAMPLE_ROWS)
            self._writer = pq.ParquetWriter(
                self._out,
                self.schema,
                compression=PARQUET_COMPRESSION,
                use_dictionary=dictionary_columns(self.schema, sample, skip=off),
                column_encoding={off: OFFSET_ENCODING},
                write_statistics=True,
                coerce_timestamps=None,
            )
        return self._writer

    def _wait_encoded(self) -> None:
        """Wait for the row group being encoded (its error is raised here)."""
        pending, self._encoding = self._encoding, None
        if pending is not None:
            pending.result()

    def _flush(self, *, final: bool) -> None:
        """Write the gathered rows as full row groups (all of them when ``final``)."""
        if not self._gathered_rows:
            return
        rows = pa.concat_tables(self._gathered)
        keep = 0 if final else rows.num_rows % ROW_GROUP_ROWS
        if self._gathered_bytes >= ROW_GROUP_MAX_BYTES:
            keep = 0
        head = rows.slice(0, rows.num_rows - keep)
        # Encoding (GIL released) overlaps with reading the next rows; one row group at a
        # time, so at most one is encoded while the next is gathered.
        self._wait_encoded()
        self._encoding = self._encoder.submit(
            self._parquet_writer(head).write_table, head, row_group_size=ROW_GROUP_ROWS
        )
        rest = rows.slice(rows.num_rows - keep) if keep else None
        self._gathered = [rest] if rest is not None else []
        self._gathered_rows = keep
        self._gathered_bytes = rest.nbytes if rest is not None else 0

    @property
    def hashed_while_writing(self) -> bool:
        """True once `close` took the logical hash from the batches (no second read)."""
        return self._hashed_while_writing

    def _offsets(self, n: int) -> pa.Array:
        """``next_offset .. next_offset + n - 1`` (from a cached 0..n range: no Python loop)."""
        if len(self._arange) < n:
            self._arange = int_array_range(0, max(n, 2 * len(self._arange)), OFFSET_TYPE)
        return pc.add(self._arange.slice(0, n), int_scalar(self.next_offset, OFFSET_TYPE))

    def _logical_hash(self) -> Multihash:
        """The logical hash of the closed file (see the module docstring).

        Raises:
            storage.errors.InvalidDataFile: the file cannot be read back.
            AssertionError: with verification on, the streamed hash differs from the
                file's (a bug: the streaming conditions are wrong).
        """
        streamed: Multihash | None = None
        digest = self._worker.finalize()
        if digest is not None and self._file_schema_matches():
            streamed = Multihash(ARROW0_SHA3_256, digest)
        self._hashed_while_writing = streamed is not None
        if streamed is not None and not self._verify:
            return streamed
        from_file = logical_hash_parquet(str(self.path))
        if streamed is not None and streamed != from_file:
            raise AssertionError(
                f"{self.path.name}: streamed logical hash {streamed} != file's {from_file}"
            )
        return from_file

    def _file_schema_matches(self) -> bool:
        """Whether arrow-rs reads the file back with exactly the hashed names and types."""
        try:
            read_back = arrow_rs_schema(pq.ParquetFile(self.path))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise InvalidDataFile(f"written slice is not readable: {e}") from None
        return [(f.name, f.type) for f in read_back] == [(f.name, f.type) for f in self.schema]

    def close(self) -> WrittenSlice:
        """Finish the file and hash it (calling it again returns the same result).

        Raises:
            storage.errors.InvalidDataFile: if the written file cannot be read back.
        """
        if self._result is not None:
            return self._result
        if not self._closed:
            try:
                self._flush(final=True)
                self._wait_encoded()
            except BaseException:
                self.abort()
                raise
            self._encoder.shutdown()
            self._parquet_writer(None).close()  # an empty slice: a file with the schema
            self._out.close()  # the last buffered bytes reach the sink
            self._sink.close()
            self._closed = True
        count = self.next_offset - self.start_offset
        interval = (
            OffsetInterval(start=self.start_offset, end=self.next_offset - 1) if count else None
        )
        logical = self._logical_hash()
        physical, size = self._physical_hash()
        max_et = _to_timestamp(self._max_event) if self._max_event is not None else None
        self._result = WrittenSlice(self.path, count, interval, logical, physical, size, max_et)
        return self._result

    def _physical_hash(self) -> tuple[Multihash, int]:
        """Hash and size of the bytes written (re-read only if something went wrong).

        Raises:
            AssertionError: with verification on, the file's hash differs (a bug).
        """
        streamed = Multihash(SHA3_256, self._sink.digest())
        try:
            on_disk = self.path.stat().st_size
        except OSError as e:
            raise InvalidDataFile(f"written slice is not readable: {e}") from None
        if self._sink.failed or on_disk != self._sink.size:
            physical, size = physical_hash_file(self.path)
            return physical, size
        if self._verify:
            from_file = tuple(physical_hash_file(self.path))
            if from_file != (streamed, self._sink.size):
                raise AssertionError(f"{self.path.name}: streamed physical hash differs")
        return streamed, self._sink.size

    def abort(self) -> None:
        """Close without hashing and delete the file."""
        try:
            if not self._closed:
                self._closed = True
                try:
                    self._encoder.shutdown(wait=True)  # a row group being encoded ends first
                    if self._writer is not None:
                        self._writer.close()
                finally:
                    try:
                        self._out.close()
                    finally:
                        self._sink.close()
        finally:
            self._worker.discard()
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
