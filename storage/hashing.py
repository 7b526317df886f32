"""Hashes of data files: the physical hash (bytes) and the logical hash (Arrow values).

Physical hash: ``Multihash(sha3-256)`` of the file bytes plus the file size, streamed
in chunks (spec digest §3.1).

Logical hash: kamu opens a Parquet file with arrow-rs, takes the Arrow schema that
arrow-rs derives and feeds batches of 10 000 rows to arrow-digest (spec digest §3.2).
We read with pyarrow, stream batches of the same size (pyarrow, like arrow-rs, fills
batches across row-group boundaries) and then correct the few places where pyarrow
derives a different Arrow type than arrow-rs, because types are part of the hash.

Decisions (checked with pyarrow 26 on files written with and without ``ARROW:schema``):

* ``TIMESTAMP(unit, isAdjustedToUTC=true)`` without an embedded schema: pyarrow and
  arrow-rs both give ``Timestamp(unit, "UTC")`` (exactly ``UTC``, not ``+00:00``);
  ``isAdjustedToUTC=false`` gives a timestamp without time zone in both.
* With an embedded schema, arrow-rs only takes the hinted time zone when the hinted
  unit equals the stored unit; otherwise it keeps ``"UTC"``. pyarrow keeps the hinted
  zone even when it had to coerce the unit (``timestamp[s, +01:00]`` is stored as
  millis and read back as ``timestamp[ms, +01:00]``). We re-derive the arrow-rs type.
* A hinted ``date64`` stored as ``DATE`` comes back from pyarrow as ``date32``; arrow-rs
  coerces it to ``Date64`` (values × 86 400 000). We cast likewise.
* ``INT96`` is ``Timestamp(ns, None)`` in both, except that arrow-rs takes a hinted
  second/milli/micro unit (and zone) from the embedded schema; we cast likewise
  (pyarrow's cast truncates toward zero where arrow-rs floors: only pre-1970 values
  with sub-unit digits could differ).
* Strings may come back as Utf8, LargeUtf8 or Utf8View and binaries as any binary
  variant, and lists as List/LargeList/FixedSizeList: these hash identically, so
  they are left as pyarrow reads them. Nullability is not part of the hash.
* Dictionary-typed columns (restored from an embedded schema) are refused, as
  upstream cannot hash them either (`fbs.errors.UnsupportedDataType`).
* A dictionary-encoded string or binary column is read as Arrow dictionaries when the
  schema has no struct (batch boundaries then cannot change the hash): the logical hash
  hashes them as their values (`fbs.logical_hash`), without materializing every row's
  value. A column chunk whose writer fell back to plain pages (too many distinct values)
  makes pyarrow grow the dictionary batch after batch, so once a batch's dictionary holds
  more than `MAX_DICTIONARY_FRACTION` of a batch the rest of the file is read plainly.
* Known gap: ``FIXED_LEN_BYTE_ARRAY`` decimals longer than 16 bytes with precision
  <= 38 are ``Decimal256`` in arrow-rs but ``decimal128`` in pyarrow (no common writer
  produces them; Spark uses the minimal length).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from typing import IO, Any, Final, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from fbs.logical_hash import RecordDigest
from fbs.multiformats import ARROW0_SHA3_256, SHA3_256, Multihash
from storage.errors import InvalidDataFile, ObjectTooLarge

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "KAMU_BATCH_ROWS",
    "MAX_DICTIONARY_FRACTION",
    "HashedFile",
    "arrow_rs_schema",
    "logical_hash_parquet",
    "physical_hash_file",
]

#: Bytes read per step when hashing a file.
DEFAULT_CHUNK_SIZE: Final = 1 << 20
#: Batch size of kamu's Parquet reader; batch boundaries matter only for struct nulls.
KAMU_BATCH_ROWS: Final = 10_000
#: Batch size used when the schema has no struct column (the hash is then split-invariant).
_FAST_BATCH_ROWS: Final = 1 << 16
#: A dictionary read stops paying once a batch's dictionary has more entries than this
#: fraction of the batch rows (each entry's stream is built besides each row's gather).
MAX_DICTIONARY_FRACTION: Final = 0.5

_UNITS: Final[dict[str, str]] = {
    "milliseconds": "ms",
    "microseconds": "us",
    "nanoseconds": "ns",
}

Source = str | os.PathLike[str] | IO[bytes]


def arrow_input(source: Source) -> Any:
    """What to hand Arrow's Parquet reader for ``source``: an Arrow-native file if possible.

    Arrow reads column chunks through its I/O thread pool, whose task keeps a reference to
    the file and may drop it after the read has returned. Dropping the last reference to a
    Python file object takes the GIL, and a pool thread that takes the GIL while the
    interpreter exits is ended with ``pthread_exit``: the unwind through Arrow's
    ``std::thread`` aborts the process ("terminate called without an active exception").
    So an OS-level file is reopened natively through ``/proc/self/fd`` (the
    very file the descriptor names, whatever its path names now); paths are returned as
    they are (Arrow opens them natively); other file objects (no descriptor, no /proc)
    are returned unchanged. The caller closes what it gets if it is not ``source``.
    """
    if isinstance(source, str | os.PathLike):
        return source
    try:
        proc = f"/proc/self/fd/{source.fileno()}"
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
        return source
    try:
        return pa.OSFile(proc)
    except (OSError, pa.ArrowException):
        return source


class HashedFile(NamedTuple):
    """Physical hash of a file and its size in bytes."""

    multihash: Multihash
    size: int


def physical_hash_file(
    source: Source, chunk_size: int = DEFAULT_CHUNK_SIZE, *, max_size: int | None = None
) -> HashedFile:
    """SHA3-256 multihash and size of a file (or of a binary reader, read to its end).

    Args:
        source: a path, or a readable binary file object positioned at the start.
        chunk_size: bytes read per step (memory bound); values below 1 mean 1.
        max_size: refuse inputs longer than this many bytes (``None`` = no limit).

    Raises:
        ObjectTooLarge: if more than ``max_size`` bytes are read.
        OSError: if the file cannot be read.
    """
    chunk_size = max(1, chunk_size)
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return _hash_stream(f, chunk_size, max_size)
    return _hash_stream(source, chunk_size, max_size)


def _hash_stream(stream: IO[bytes], chunk_size: int, max_size: int | None) -> HashedFile:
    hasher = hashlib.sha3_256()
    size = 0
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        # Reuse one buffer: no allocation per chunk.
        buf = bytearray(chunk_size)
        view = memoryview(buf)
        while n := readinto(view):
            size += n
            _check_size(size, max_size)
            hasher.update(view[:n])
    else:
        while chunk := stream.read(chunk_size):
            size += len(chunk)
            _check_size(size, max_size)
            hasher.update(chunk)
    return HashedFile(Multihash(SHA3_256, hasher.digest()), size)


def _check_size(size: int, max_size: int | None) -> None:
    if max_size is not None and size > max_size:
        raise ObjectTooLarge(f"input exceeds the limit of {max_size} bytes")


# -- logical hash of Parquet files --------------------------------------------------------


def logical_hash_parquet(
    source: Source, observe: Callable[[pa.RecordBatch], None] | None = None
) -> Multihash:
    """ODF logical hash (``f9680c00120...``) of a Parquet file, as kamu computes it.

    Batches are streamed: memory stays bounded by one batch plus hashing chunks.

    Args:
        source: a path or a readable binary file (random access).
        observe: called with every batch hashed, in row order (so a caller can check
            the values without decoding the file again); string and binary columns may
            be dictionary-encoded. It should not raise: what it raises propagates.

    Raises:
        InvalidDataFile: if the file is not readable Parquet.
        UnsupportedDataType: if a column type cannot be hashed (as in upstream).
        OSError: if the file cannot be read.
    """
    native = arrow_input(source)
    try:
        try:
            pf = pq.ParquetFile(native)
        except (pa.ArrowException, ValueError) as e:
            raise InvalidDataFile(f"not a readable Parquet file: {e}") from None
        schema = arrow_rs_schema(pf)
        digest = RecordDigest(schema)
        for batch in _batches(native, pf, schema):
            digest.update(batch)
            if observe is not None:
                observe(batch)
        return Multihash(ARROW0_SHA3_256, digest.finalize())
    finally:
        if native is not source:
            native.close()


def _batches(native: Any, pf: pq.ParquetFile, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    has_struct = any(_contains_struct(f.type) for f in schema)
    batch_rows = KAMU_BATCH_ROWS if has_struct else _FAST_BATCH_ROWS
    casts = [
        None if f.type == g.type else g.type for f, g in zip(pf.schema_arrow, schema, strict=True)
    ]
    try:
        dictionaries = [] if has_struct else _dictionary_columns(pf, casts)
        done = 0
        if dictionaries:
            reader = pq.ParquetFile(native, read_dictionary=dictionaries)
            limit = batch_rows * MAX_DICTIONARY_FRACTION
            for batch in reader.iter_batches(batch_size=batch_rows, use_threads=False):
                yield _cast(batch, casts, schema)
                done += batch.num_rows
                if any(len(batch.column(name).dictionary) > limit for name in dictionaries):
                    break  # plain pages: go on without dictionaries
            else:
                return
        yield from (_cast(b, casts, schema) for b in _plain_batches(pf, done, batch_rows))
    except (pa.ArrowException, ValueError) as e:
        raise InvalidDataFile(f"cannot decode Parquet data: {e}") from None


def _cast(batch: pa.RecordBatch, casts: list[pa.DataType | None], schema: pa.Schema) -> Any:
    """``batch`` with arrow-rs' types where pyarrow reads another (`arrow_rs_schema`)."""
    if all(c is None for c in casts):
        return batch
    columns = [
        col if target is None else col.cast(target, safe=False)
        for col, target in zip(batch.columns, casts, strict=True)
    ]
    # Names, not the schema: a column read as a dictionary keeps its dictionary type.
    return pa.RecordBatch.from_arrays(columns, names=schema.names)


def _plain_batches(pf: pq.ParquetFile, skip: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Batches of every row from row ``skip`` on (whole row groups before it are not read)."""
    groups: list[int] = []
    first = 0
    for i in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(i).num_rows
        if groups or first + rows > skip:
            groups.append(i)
        else:
            first += rows
    if not groups:
        return
    drop = skip - first
    for batch in pf.iter_batches(batch_size=batch_rows, row_groups=groups, use_threads=False):
        if drop >= batch.num_rows:
            drop -= batch.num_rows
            continue
        yield batch.slice(drop) if drop else batch
        drop = 0


def _dictionary_columns(pf: pq.ParquetFile, casts: list[pa.DataType | None]) -> list[str]:
    """Top-level string/binary columns every row group stores dictionary-encoded."""
    metadata = pf.metadata
    leaves = {pf.schema.column(i).path: i for i in range(len(pf.schema))}
    names = [f.name for f in pf.schema_arrow]
    out = []
    for field, cast in zip(pf.schema_arrow, casts, strict=True):
        t = field.type
        if cast is not None or names.count(field.name) != 1 or field.name not in leaves:
            continue
        if not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
        ):
            continue
        leaf = leaves[field.name]
        if metadata.num_row_groups and all(
            metadata.row_group(g).column(leaf).has_dictionary_page
            for g in range(metadata.num_row_groups)
        ):
            out.append(field.name)
    return out


def _contains_struct(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):
        return _contains_struct(t.storage_type)
    return bool(pa.types.is_struct(t))


def arrow_rs_schema(pf: pq.ParquetFile) -> pa.Schema:
    """The Arrow schema arrow-rs would derive for ``pf`` (see the module docstring).

    Starts from pyarrow's schema and re-derives temporal leaf types with arrow-rs'
    rules (Parquet type + embedded ``ARROW:schema`` hint).

    Raises:
        InvalidDataFile: if the Parquet schema cannot be mapped.
    """
    try:
        arrow_schema = pf.schema_arrow
        hint = _embedded_schema(pf)
        columns = iter([pf.schema.column(i) for i in range(len(pf.schema))])
        fields = []
        for i, field in enumerate(arrow_schema):
            hint_type = hint.field(i).type if hint is not None and i < len(hint) else None
            fields.append(field.with_type(_derive(field.type, hint_type, columns)))
        return pa.schema(fields, metadata=arrow_schema.metadata)
    except (pa.ArrowException, ValueError, StopIteration) as e:
        raise InvalidDataFile(f"cannot map the Parquet schema: {e}") from None


def _embedded_schema(pf: pq.ParquetFile) -> pa.Schema | None:
    metadata = pf.metadata.metadata or {}
    encoded = metadata.get(b"ARROW:schema")
    if encoded is None:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))
    except (pa.ArrowException, ValueError):
        return None  # arrow-rs ignores an unreadable hint as well


def _derive(t: pa.DataType, hint: pa.DataType | None, columns: Iterator[Any]) -> pa.DataType:
    """Rebuild ``t`` with arrow-rs' temporal leaf types, consuming Parquet leaf columns."""
    if isinstance(t, pa.BaseExtensionType) or pa.types.is_dictionary(t):
        # Extension storage / dictionaries are hashed (or refused) as pyarrow reads them.
        for _ in range(_leaf_count(t)):
            next(columns)
        return t
    if pa.types.is_struct(t):
        fields = []
        for i in range(t.num_fields):
            child = t.field(i)
            child_hint = None
            if hint is not None and pa.types.is_struct(hint) and i < hint.num_fields:
                child_hint = hint.field(i).type
            fields.append(child.with_type(_derive(child.type, child_hint, columns)))
        return pa.struct(fields)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item_hint = None
        if hint is not None and (
            pa.types.is_list(hint)
            or pa.types.is_large_list(hint)
            or pa.types.is_fixed_size_list(hint)
        ):
            item_hint = hint.value_type
        item = t.value_field.with_type(_derive(t.value_type, item_hint, columns))
        if pa.types.is_list(t):
            return pa.list_(item)
        if pa.types.is_large_list(t):
            return pa.large_list(item)
        return pa.list_(item, t.list_size)
    if pa.types.is_map(t):
        for _ in range(_leaf_count(t)):
            next(columns)
        return t
    return _derive_leaf(t, hint, next(columns))


def _leaf_count(t: pa.DataType) -> int:
    if isinstance(t, pa.BaseExtensionType):
        return _leaf_count(t.storage_type)
    if pa.types.is_dictionary(t):
        return _leaf_count(t.value_type)
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1


def _parquet_base(column: Any) -> pa.DataType | None:
    """arrow-rs' type for a temporal/int Parquet leaf before hints (None = not relevant)."""
    physical = column.physical_type
    logical = json.loads(column.logical_type.to_json())
    kind = logical.get("Type")
    if physical == "INT96":
        return pa.timestamp("ns")
    if physical == "INT64" and kind == "Timestamp":
        tz = "UTC" if logical.get("isAdjustedToUTC") else None
        return pa.timestamp(_UNITS[logical["timeUnit"]], tz)
    if physical == "INT64" and column.converted_type in ("TIMESTAMP_MILLIS", "TIMESTAMP_MICROS"):
        unit = "ms" if column.converted_type == "TIMESTAMP_MILLIS" else "us"
        return pa.timestamp(unit, "UTC")
    if physical == "INT32" and kind == "Date":
        return pa.date32()
    if physical in ("INT32", "INT64") and kind == "None" and column.converted_type == "NONE":
        return pa.int32() if physical == "INT32" else pa.int64()
    return None


def _apply_hint(base: pa.DataType, hint: pa.DataType) -> pa.DataType:
    """arrow-rs' hint rules, restricted to the temporal cases that change the hash."""
    types = pa.types
    if (types.is_int32(base) or types.is_int64(base)) and types.is_timestamp(hint):
        return hint
    if types.is_int32(base) and types.is_time32(hint):
        return hint
    if types.is_int64(base) and (types.is_time64(hint) or types.is_date64(hint)):
        return hint
    if types.is_date32(base) and types.is_date64(hint):
        return hint
    if types.is_timestamp(base) and types.is_timestamp(hint):
        if base.unit == hint.unit and hint.tz is not None:
            return hint
        if base == pa.timestamp("ns") and hint.unit in ("s", "ms", "us"):
            return hint  # INT96 read at the hinted resolution
    return base


def _derive_leaf(t: pa.DataType, hint: pa.DataType | None, column: Any) -> pa.DataType:
    base = _parquet_base(column)
    if base is None:
        return t
    derived = base if hint is None else _apply_hint(base, hint)
    temporal = pa.types.is_temporal(derived) and not pa.types.is_duration(derived)
    # Only temporal types are corrected; plain ints keep pyarrow's reading.
    if temporal and (pa.types.is_temporal(t) or pa.types.is_integer(t)) and derived != t:
        return derived
    return t
