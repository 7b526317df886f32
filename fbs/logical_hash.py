"""ODF logical data hash: arrow-digest ``RecordDigestV0`` over SHA3-256 (spec digest §3.2).

The logical hash of a data slice does not depend on how the data is laid out in
Parquet (compression, row groups, batch sizes): it is computed from the Arrow values.

Algorithm (all integers little-endian):

* A record hasher walks the schema depth-first and feeds, for every field
  (struct fields before their children), ``u64(len(name)) name u64(level)``.
* Every *leaf* field (non-struct) gets its own SHA3-256 column hasher, first fed
  the field's type descriptor (`type_descriptor`).
* Batches feed each leaf column's values into its hasher (`array_digest` is the
  same procedure for one array): fixed-width values as raw bytes, booleans as
  ``01``/``02``, strings/binaries as ``u64(len) bytes``, lists as ``u64(n)`` and the
  items' stream, and a single ``00`` byte for every null.
* The final digest is the record hasher fed with every column digest in order.

Null masks through structs follow upstream exactly (rule E of the spec digest),
including its quirks: a mask only counts when it is present *and* contains nulls;
when both a parent and a child mask are present with nulls they are combined with
a bitwise **OR** of the validity bits; when one of the two is present without
nulls, neither is used. Arrays' own masks are treated as present only when they
contain nulls, which is what arrow-rs' Parquet reader (kamu's source of batches)
produces. Because masks are evaluated per batch, the struct-null corner case is
the only place where batch boundaries can change the result (as upstream).

Implementation: values are turned into the hash byte stream with vectorized
pyarrow compute kernels (no per-row Python loop), in row chunks of bounded size;
hashing of a chunk runs on a worker thread while the next chunk is prepared
(both pyarrow kernels and ``hashlib`` release the GIL). numpy is not needed.

A column declared with a value type may be fed dictionary-encoded arrays of that value
type (a Parquet reader's cheapest reading of a dictionary-encoded column): they hash as
their decoded values, bit for bit. The stream of each distinct value is built once and
gathered by index, which spares materializing the values and joining length prefixes
row by row. A dictionary *type* in a schema is still refused, as upstream refuses it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from fbs.arrow_values import binary_scalar, int_array_range, int_scalar
from fbs.errors import DataSchemaMismatch, LogicalHashError, UnsupportedDataType
from fbs.multiformats import ARROW0_SHA3_256, Multihash

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "MAX_CHUNK_BYTES",
    "MAX_TYPE_DEPTH",
    "ArrayDigest",
    "RecordDigest",
    "array_digest",
    "logical_hash",
    "type_descriptor",
]

#: Rows turned into one hash-stream chunk at a time (bounds temporary memory).
DEFAULT_CHUNK_ROWS: Final = 1 << 16
#: A variable-size chunk whose payload exceeds this is split further (down to one row).
MAX_CHUNK_BYTES: Final = 32 << 20
#: Deepest list nesting accepted in a column type (guards recursion).
MAX_TYPE_DEPTH: Final = 32
#: Streams shorter than this are hashed inline: a thread hop would cost more than it saves.
_ASYNC_MIN_BYTES: Final = 1 << 20
#: Chunks queued for the hashing thread before the producer waits (bounds memory).
_MAX_PENDING: Final = 2

_NULL_MARKER: Final = b"\x00"
_TYPE_NULL: Final = 0
_TYPE_INT: Final = 1
_TYPE_FLOAT: Final = 2
_TYPE_BINARY: Final = 3
_TYPE_UTF8: Final = 4
_TYPE_BOOL: Final = 5
_TYPE_DECIMAL: Final = 6
_TYPE_DATE: Final = 7
_TYPE_TIME: Final = 8
_TYPE_TIMESTAMP: Final = 9
_TYPE_LIST: Final = 11
_TIME_UNITS: Final[dict[str, int]] = {"s": 0, "ms": 1, "us": 2, "ns": 3}
_DATE_DAY: Final = 0
_DATE_MILLISECOND: Final = 1


def _u16(value: int) -> bytes:
    return struct.pack("<H", value)


def _u64(value: int) -> bytes:
    # Upstream casts signed values (decimal scale) to u64, i.e. sign-extends.
    return struct.pack("<Q", value & 0xFFFF_FFFF_FFFF_FFFF)


def _storage_type(dtype: pa.DataType) -> pa.DataType:
    # arrow-rs has no extension types: it sees the storage type.
    while isinstance(dtype, pa.BaseExtensionType):
        dtype = dtype.storage_type
    return dtype


def _storage_array(array: pa.Array) -> pa.Array:
    while isinstance(array, pa.ExtensionArray):
        array = array.storage
    return array


# -- type descriptors -----------------------------------------------------------------


def type_descriptor(dtype: pa.DataType) -> bytes:
    """Bytes that arrow-digest V0 feeds for a column's data type (spec digest §3.2 C).

    Args:
        dtype: the Arrow type of a leaf column (not a struct).

    Returns:
        The descriptor bytes, e.g. ``01 00 01 40 00 00 00 00 00 00 00`` for Int64.

    Raises:
        UnsupportedDataType: for structs (flattened at record level only), dictionaries,
            maps, unions, durations, intervals, list views, run-end encoded arrays,
            and lists nested deeper than `MAX_TYPE_DEPTH`.
    """
    out = bytearray()
    _type_descriptor_into(dtype, out, 0)
    return bytes(out)


def _type_descriptor_into(dtype: pa.DataType, out: bytearray, depth: int) -> None:
    if depth > MAX_TYPE_DEPTH:
        raise UnsupportedDataType(f"list nesting deeper than {MAX_TYPE_DEPTH} levels")
    t = _storage_type(dtype)
    types = pa.types
    if types.is_null(t):
        out += _u16(_TYPE_NULL)
    elif types.is_boolean(t):
        out += _u16(_TYPE_BOOL)
    elif types.is_integer(t):
        out += _u16(_TYPE_INT) + (b"\x01" if types.is_signed_integer(t) else b"\x00")
        out += _u64(t.bit_width)
    elif types.is_floating(t):
        out += _u16(_TYPE_FLOAT) + _u64(t.bit_width)
    elif (
        types.is_binary(t)
        or types.is_large_binary(t)
        or types.is_binary_view(t)
        or types.is_fixed_size_binary(t)
    ) and not types.is_decimal(t):
        out += _u16(_TYPE_BINARY)
    elif types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        out += _u16(_TYPE_UTF8)
    elif types.is_decimal(t):
        out += _u16(_TYPE_DECIMAL) + _u64(t.bit_width) + _u64(t.precision) + _u64(t.scale)
    elif types.is_date32(t):
        out += _u16(_TYPE_DATE) + _u64(32) + _u16(_DATE_DAY)
    elif types.is_date64(t):
        out += _u16(_TYPE_DATE) + _u64(64) + _u16(_DATE_MILLISECOND)
    elif types.is_time32(t) or types.is_time64(t):
        out += _u16(_TYPE_TIME) + _u64(t.bit_width) + _u16(_TIME_UNITS[t.unit])
    elif types.is_timestamp(t):
        out += _u16(_TYPE_TIMESTAMP) + _u16(_TIME_UNITS[t.unit])
        if t.tz is None:
            out += b"\x00"
        else:
            tz = t.tz.encode("utf-8")
            out += _u64(len(tz)) + tz
    elif types.is_map(t):
        raise UnsupportedDataType(f"arrow-digest V0 cannot hash type {t}")
    elif types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        out += _u16(_TYPE_LIST)
        _type_descriptor_into(t.value_type, out, depth + 1)
    elif types.is_struct(t):
        raise UnsupportedDataType(
            f"struct type {t} is only supported as a record field, not as a column value"
        )
    else:
        raise UnsupportedDataType(f"arrow-digest V0 cannot hash type {t}")


# -- null masks -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Mask:
    """A validity mask that upstream considers *present*.

    ``valid`` is a null-free BooleanArray aligned with the array (offset applied);
    ``has_nulls`` is False only for an OR-combined mask that ended up all-valid,
    which upstream still passes down as present (and which then disables masks below).
    """

    valid: pa.BooleanArray
    has_nulls: bool

    def slice(self, start: int, length: int) -> _Mask:
        return _Mask(self.valid.slice(start, length), self.has_nulls)


def _own_mask(array: pa.Array) -> _Mask | None:
    # arrow-rs array builders drop validity buffers that hold no nulls.
    if array.null_count == 0:
        return None
    return _Mask(pc.is_valid(array), True)


def _combine(parent: _Mask | None, child: _Mask | None) -> _Mask | None:
    """Upstream's mask combination (spec digest §3.2 E, including its quirks)."""
    if parent is None:
        return child if child is not None and child.has_nulls else None
    if child is None:
        return parent if parent.has_nulls else None
    if parent.has_nulls and child.has_nulls:
        # An element counts as valid when valid in *either* mask (upstream behaviour).
        valid = pc.or_(parent.valid, child.valid)
        return _Mask(valid, not pc.all(valid).as_py())
    return None


def _hash_mask(mask: _Mask | None) -> pa.BooleanArray | None:
    """The mask that decides which elements hash as null (all-valid = no mask)."""
    return mask.valid if mask is not None and mask.has_nulls else None


# -- vectorized hash streams ------------------------------------------------------------


def _kind(t: pa.DataType) -> str:
    types = pa.types
    if types.is_boolean(t):
        return "bool"
    if types.is_fixed_size_binary(t) and not types.is_decimal(t):
        return "fsb"
    if (
        types.is_integer(t)
        or types.is_floating(t)
        or types.is_decimal(t)
        or (types.is_temporal(t) and not (types.is_duration(t) or types.is_interval(t)))
    ):
        return "fixed"
    if types.is_binary(t) or types.is_string(t):
        return "binary"
    if types.is_large_binary(t) or types.is_large_string(t):
        return "large_binary"
    if types.is_binary_view(t) or types.is_string_view(t):
        return "view"
    if types.is_map(t):
        return "unsupported"
    if types.is_list(t) or types.is_large_list(t):
        return "list"
    if types.is_fixed_size_list(t):
        return "fixed_list"
    if types.is_null(t):
        return "null"
    return "unsupported"


def _without_validity(array: pa.Array, dtype: pa.DataType) -> pa.Array:
    """Same buffers, no validity: raw slot values, as upstream reads them."""
    buffers = array.buffers()
    return pa.Array.from_buffers(dtype, len(array), [None, *buffers[1:]], offset=array.offset)


def _offsets(array: pa.Array) -> pa.Array:
    """The ``len + 1`` offsets of a (large) binary/list array as an int64 array."""
    offset_type = pa.int64() if _is_large(array.type) else pa.int32()
    raw = pa.Array.from_buffers(
        offset_type, len(array) + 1, [None, array.buffers()[1]], offset=array.offset
    )
    return raw.cast(pa.int64())


def _is_large(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_large_binary(t) or types.is_large_string(t) or types.is_large_list(t))


def _as_u64_elements(lengths: pa.Array) -> pa.Array:
    """An int64 array re-read as 8-byte binary elements (its little-endian bytes)."""
    lengths = lengths.cast(pa.int64())
    fixed = pa.Array.from_buffers(
        pa.binary(8), len(lengths), [None, lengths.buffers()[1]], offset=lengths.offset
    )
    return fixed.cast(pa.large_binary())


_EMPTY: Final = binary_scalar(b"")
_NULL_ELEMENT: Final = binary_scalar(_NULL_MARKER)
_UINT8_ZERO: Final = int_scalar(0, pa.uint8())
_UINT8_ONE: Final = int_scalar(1, pa.uint8())


def _prefixed(prefix: Any, body: pa.Array, mask: pa.BooleanArray | None) -> pa.Array:
    joined = pc.binary_join_element_wise(prefix, body, _EMPTY)
    return _apply_mask(joined, mask)


def _apply_mask(elements: pa.Array, mask: pa.BooleanArray | None) -> pa.Array:
    if mask is None:
        return elements
    return pc.if_else(mask, elements, _NULL_ELEMENT)


def _fixed_width_bytes(t: pa.DataType) -> int:
    return int(t.bit_width) // 8


def _element_stream(array: pa.Array, mask: _Mask | None, depth: int) -> pa.Array:
    """Per-element hash streams as a null-free ``large_binary`` array.

    Concatenating the elements gives exactly the bytes upstream feeds for ``array``
    under the effective mask ``mask``.
    """
    array = _storage_array(array)
    t = array.type
    kind = _kind(t)
    hmask = _hash_mask(mask)
    n = len(array)
    if kind == "fixed":
        width = _fixed_width_bytes(t)
        raw = pa.Array.from_buffers(
            pa.binary(width), n, [None, array.buffers()[1]], offset=array.offset
        )
        return _apply_mask(raw.cast(pa.large_binary()), hmask)
    if kind == "bool":
        codes = _bool_codes(array, hmask)
        raw = pa.Array.from_buffers(pa.binary(1), n, [None, codes.buffers()[1]], codes.offset)
        return raw.cast(pa.large_binary())
    if kind in ("binary", "large_binary", "view", "fsb"):
        body = _binary_body(array, kind)
        if kind == "fsb":
            prefix: Any = binary_scalar(_u64(t.byte_width))
        else:
            prefix = _as_u64_elements(pc.binary_length(body))
        return _prefixed(prefix, body, hmask)
    if kind in ("list", "fixed_list"):
        return _list_elements(array, hmask, depth)
    if kind == "null":
        raise UnsupportedDataType("arrow-digest V0 cannot hash values of the Null type")
    raise UnsupportedDataType(f"arrow-digest V0 cannot hash type {t}")


def _binary_body(array: pa.Array, kind: str) -> pa.Array:
    """Raw slot contents as a null-free binary array (view and fixed types converted)."""
    if kind == "binary":
        # Joining needs one offset width; widening offsets keeps the data buffer.
        return _without_validity(array, pa.binary()).cast(pa.large_binary())
    if kind == "large_binary":
        return _without_validity(array, pa.large_binary())
    if kind == "view":
        view_type = pa.binary_view()
        return _without_validity(array, view_type).cast(pa.large_binary())
    return _without_validity(array, pa.binary(array.type.byte_width)).cast(pa.large_binary())


def _bool_codes(array: pa.Array, mask: pa.BooleanArray | None) -> pa.Array:
    """uint8 array: 1 = false, 2 = true, 0 = null (null-free, offset 0)."""
    bits = _without_validity(array, pa.bool_())
    codes = pc.add(bits.cast(pa.uint8()), _UINT8_ONE)
    if mask is not None:
        codes = pc.if_else(mask, codes, _UINT8_ZERO)
    return codes


def _list_elements(array: pa.Array, mask: pa.BooleanArray | None, depth: int) -> pa.Array:
    if depth >= MAX_TYPE_DEPTH:
        raise UnsupportedDataType(f"list nesting deeper than {MAX_TYPE_DEPTH} levels")
    n = len(array)
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        items = array.values.slice(array.offset * size, n * size)
        bounds = pc.multiply(_arange(n + 1), int_scalar(size, pa.int64()))
    else:
        offsets = _offsets(array)
        first = offsets[0].as_py()
        items = array.values.slice(first, offsets[n].as_py() - first)
        bounds = pc.subtract(offsets, int_scalar(first, pa.int64()))
    lengths = pc.subtract(bounds.slice(1), bounds.slice(0, n))
    # Upstream hashes each valid list's sub-array; a sub-array of the Null type panics.
    if pa.types.is_null(_storage_type(items.type)):
        valid_lists = n if mask is None else pc.sum(mask.cast(pa.int64())).as_py() or 0
        if valid_lists:
            raise UnsupportedDataType("arrow-digest V0 cannot hash values of the Null type")
        return _apply_mask(pa.repeat(_EMPTY, n), mask)
    # Items only see their own validity (upstream passes no parent mask into lists).
    item_streams = _element_stream(items, _own_mask(items), depth + 1)
    item_offsets = _offsets(item_streams)
    grouped_offsets = pc.take(item_offsets, bounds)
    grouped = pa.Array.from_buffers(
        pa.large_binary(), n, [None, grouped_offsets.buffers()[1], item_streams.buffers()[2]]
    )
    return _prefixed(_as_u64_elements(lengths), grouped, mask)


def _arange(count: int) -> pa.Array:
    return int_array_range(0, count, pa.int64())


def _joined(elements: pa.Array) -> Any:
    """The concatenated data of a null-free ``large_binary`` array (a buffer slice)."""
    bounds = _offsets(elements)
    start = bounds[0].as_py()
    return elements.buffers()[2].slice(start, bounds[len(elements)].as_py() - start)


def _stream_bytes(array: pa.Array, mask: _Mask | None) -> Any:
    """The hash stream of a whole (small enough) array as one buffer-like object."""
    array = _storage_array(array)
    t = array.type
    kind = _kind(t)
    hmask = _hash_mask(mask)
    n = len(array)
    if kind == "fixed" and hmask is None:
        width = _fixed_width_bytes(t)
        # Values are contiguous and valid: the value buffer slice *is* the stream.
        return array.buffers()[1].slice(array.offset * width, n * width)
    if kind == "bool":
        codes = _bool_codes(array, hmask)
        return codes.buffers()[1].slice(codes.offset, n)
    if kind == "null":
        raise UnsupportedDataType("arrow-digest V0 cannot hash values of the Null type")
    return _joined(_element_stream(array, mask, 0))


def _payload_bytes(array: pa.Array, kind: str) -> int:
    """Cheap size estimate of a chunk's variable-size payload (for chunk splitting).

    Binaries count data bytes; lists count first-level items (a lower bound: a list's
    items are not split further, so one huge list stays one chunk).
    """
    if kind in ("binary", "large_binary", "list"):
        bounds = _offsets(array)
        return int(bounds[len(array)].as_py() - bounds[0].as_py())
    return 0


def _stream_chunks(array: pa.Array, mask: _Mask | None, chunk_rows: int) -> Iterator[Any]:
    """Yield the hash stream of ``array`` in bounded chunks, in order."""
    array = _storage_array(array)
    kind = _kind(array.type)
    if kind == "unsupported":
        raise UnsupportedDataType(f"arrow-digest V0 cannot hash type {array.type}")
    if kind == "null":
        raise UnsupportedDataType("arrow-digest V0 cannot hash values of the Null type")
    n = len(array)
    if kind == "fixed" and _hash_mask(mask) is None:
        yield _stream_bytes(array, None)
        return
    for start in range(0, n, chunk_rows):
        length = min(chunk_rows, n - start)
        sub_mask = mask.slice(start, length) if mask is not None else None
        chunk = array.slice(start, length)
        if kind == "view":
            # Views have no offsets to size a chunk by: materialize the chunk first.
            chunk = _binary_body(chunk, kind)
            yield from _split_chunk(chunk, sub_mask, "large_binary")
        else:
            yield from _split_chunk(chunk, sub_mask, kind)


def _split_chunk(array: pa.Array, mask: _Mask | None, kind: str) -> Iterator[Any]:
    n = len(array)
    if n > 1 and _payload_bytes(array, kind) > MAX_CHUNK_BYTES:
        half = n // 2
        for start, length in ((0, half), (half, n - half)):
            sub_mask = mask.slice(start, length) if mask is not None else None
            yield from _split_chunk(array.slice(start, length), sub_mask, kind)
        return
    yield _stream_bytes(array, mask)


def _dictionary_chunks(array: pa.DictionaryArray, chunk_rows: int) -> Iterator[Any]:
    """The hash stream of a dictionary array whose values hold no null, in bounded chunks.

    Each distinct value's element stream is built once; a chunk gathers them by index
    (a null index is a null element, hashed as ``00``).
    """
    entries = _element_stream(array.dictionary, None, 0)
    sizes = pc.binary_length(entries)
    indices = array.indices
    n = len(indices)
    for start in range(0, n, chunk_rows):
        yield from _split_gather(entries, sizes, indices.slice(start, min(chunk_rows, n - start)))


def _split_gather(entries: pa.Array, sizes: pa.Array, indices: pa.Array) -> Iterator[Any]:
    n = len(indices)
    if n > 1 and (pc.sum(pc.take(sizes, indices)).as_py() or 0) > MAX_CHUNK_BYTES:
        half = n // 2
        yield from _split_gather(entries, sizes, indices.slice(0, half))
        yield from _split_gather(entries, sizes, indices.slice(half))
        return
    elements = pc.take(entries, indices)
    own = _own_mask(indices)
    yield _joined(_apply_mask(elements, own.valid if own is not None else None))


# -- hashing pipeline -------------------------------------------------------------------


class _Feeder:
    """Feeds hashers from a worker thread so hashing overlaps stream preparation.

    One worker keeps per-hasher order (FIFO); at most `_MAX_PENDING` chunks wait,
    which bounds memory. Small chunks are hashed inline when nothing is queued.
    """

    __slots__ = ("_executor", "_pending")

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    def feed(self, hasher: Any, data: Any) -> None:
        self._pending = [f for f in self._pending if not f.done()]
        if not self._pending and len(data) < _ASYNC_MIN_BYTES:
            hasher.update(data)
            return
        while len(self._pending) >= _MAX_PENDING:
            self._pending.pop(0).result()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="logical-hash")
        self._pending.append(self._executor.submit(hasher.update, data))

    def drain(self) -> None:
        for future in self._pending:
            future.result()
        self._pending = []
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def _new_sha3() -> Any:
    return hashlib.sha3_256()


class ArrayDigest:
    """Streaming ``ArrayDigestV0<Sha3_256>`` of one column.

    Feed arrays of the declared type with `update`; `finalize` returns the digest.
    """

    __slots__ = ("_chunk_rows", "_descriptor", "_feeder", "_hasher")

    def __init__(
        self,
        dtype: pa.DataType,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        _feeder: _Feeder | None = None,
    ) -> None:
        """Start a digest for arrays of type ``dtype``.

        Raises:
            UnsupportedDataType: if ``dtype`` cannot be hashed (see `type_descriptor`).
        """
        self._descriptor = type_descriptor(dtype)
        self._hasher = _new_sha3()
        self._hasher.update(self._descriptor)
        self._chunk_rows = max(1, chunk_rows)
        self._feeder = _feeder if _feeder is not None else _Feeder()

    @property
    def descriptor(self) -> bytes:
        """The type descriptor this digest was started with."""
        return self._descriptor

    def update(self, array: pa.Array | pa.ChunkedArray) -> None:
        """Hash the values of ``array`` (its own validity only).

        A dictionary-encoded array of the declared type hashes as its decoded values.

        Raises:
            DataSchemaMismatch: if the array's type hashes differently from the declared one.
            UnsupportedDataType: for values of the Null type (upstream panics).
        """
        self._update(array, None)

    def _update(self, array: pa.Array | pa.ChunkedArray, parent: _Mask | None) -> None:
        if isinstance(array, pa.ChunkedArray):
            if parent is not None:  # pragma: no cover - record level passes plain arrays
                raise DataSchemaMismatch("chunked arrays cannot carry a parent mask")
            for chunk in array.chunks:
                self._update(chunk, None)
            return
        if pa.types.is_dictionary(array.type):
            self._update_dictionary(array, parent)
            return
        if type_descriptor(array.type) != self._descriptor:
            raise DataSchemaMismatch(
                f"array of type {array.type} does not match the digest's column type"
            )
        storage = _storage_array(array)
        if pa.types.is_null(storage.type):
            raise UnsupportedDataType("arrow-digest V0 cannot hash values of the Null type")
        mask = _combine(parent, _own_mask(storage))
        for chunk in _stream_chunks(storage, mask, self._chunk_rows):
            self._feeder.feed(self._hasher, chunk)

    def _update_dictionary(self, array: pa.DictionaryArray, parent: _Mask | None) -> None:
        if type_descriptor(array.type.value_type) != self._descriptor:
            raise DataSchemaMismatch(
                f"array of type {array.type} does not match the digest's column type"
            )
        if parent is not None or array.dictionary.null_count:
            # Masks combine with a parent's, and null values mask like null indices:
            # the decoded array takes the general path (rare: Parquet dictionaries of
            # top-level columns hold no null).
            self._update(array.dictionary_decode(), parent)
            return
        for chunk in _dictionary_chunks(array, self._chunk_rows):
            self._feeder.feed(self._hasher, chunk)

    def finalize(self) -> bytes:
        """The 32-byte SHA3-256 digest (the digest may not be updated afterwards)."""
        self._feeder.drain()
        return bytes(self._hasher.digest())


def array_digest(array: pa.Array | pa.ChunkedArray) -> bytes:
    """``ArrayDigestV0<Sha3_256>`` of a single array (32 bytes).

    Raises:
        UnsupportedDataType: for types arrow-digest V0 cannot hash (incl. structs and
            Null-typed arrays).
    """
    digest = ArrayDigest(array.type)
    digest.update(array)
    return digest.finalize()


def _walk_fields(fields: Iterable[pa.Field], level: int) -> Iterator[tuple[pa.Field, int]]:
    for field in fields:
        yield field, level
        t = _storage_type(field.type)
        if pa.types.is_struct(t):
            yield from _walk_fields((t.field(i) for i in range(t.num_fields)), level + 1)


class RecordDigest:
    """Streaming ``RecordDigestV0<Sha3_256>``: the ODF logical hash of record batches.

    Splitting the same rows into different batches gives the same digest (except the
    struct-null corner case described in the module docstring, as upstream).
    """

    __slots__ = ("_columns", "_feeder", "_finalized", "_hasher", "_schema")

    def __init__(self, schema: pa.Schema, *, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
        """Start a digest for batches of ``schema``.

        Raises:
            UnsupportedDataType: if a leaf column's type cannot be hashed.
        """
        self._schema = schema
        self._hasher = _new_sha3()
        self._feeder = _Feeder()
        self._columns: list[ArrayDigest] = []
        self._finalized = False
        for field, level in _walk_fields(schema, 0):
            name = field.name.encode("utf-8")
            self._hasher.update(_u64(len(name)) + name + _u64(level))
            if not pa.types.is_struct(_storage_type(field.type)):
                self._columns.append(
                    ArrayDigest(field.type, chunk_rows=chunk_rows, _feeder=self._feeder)
                )

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Hash one record batch (a table is hashed batch by batch).

        Raises:
            DataSchemaMismatch: if the batch's columns do not match the schema.
            UnsupportedDataType: for values of the Null type (upstream panics).
        """
        if self._finalized:
            raise LogicalHashError("digest already finalized")
        if isinstance(batch, pa.Table):
            for record_batch in batch.to_batches():
                self.update(record_batch)
            return
        if batch.num_columns != len(self._schema):
            raise DataSchemaMismatch(
                f"batch has {batch.num_columns} columns, schema has {len(self._schema)}"
            )
        leaves: list[tuple[pa.Array, _Mask | None]] = []
        for field, column in zip(self._schema, batch.columns, strict=True):
            self._collect_leaves(field, column, None, leaves)
        for digest, (array, parent) in zip(self._columns, leaves, strict=True):
            digest._update(array, parent)

    def _collect_leaves(
        self,
        field: pa.Field,
        array: pa.Array,
        parent: _Mask | None,
        out: list[tuple[pa.Array, _Mask | None]],
    ) -> None:
        t = _storage_type(field.type)
        array = _storage_array(array)
        if not pa.types.is_struct(t):
            out.append((array, parent))
            return
        if not pa.types.is_struct(array.type) or array.type.num_fields != t.num_fields:
            raise DataSchemaMismatch(f"column {field.name!r}: expected {t}, got {array.type}")
        combined = _combine(parent, _own_mask(array))
        for i in range(t.num_fields):
            self._collect_leaves(t.field(i), array.field(i), combined, out)

    def finalize(self) -> bytes:
        """The 32-byte logical digest; the digest cannot be updated afterwards."""
        if self._finalized:
            raise LogicalHashError("digest already finalized")
        self._finalized = True
        for column in self._columns:
            self._hasher.update(column.finalize())
        self._feeder.drain()
        return bytes(self._hasher.digest())


def logical_hash(schema: pa.Schema, batches: Iterable[pa.RecordBatch] | pa.Table) -> Multihash:
    """ODF logical hash (``arrow0-sha3-256``, text ``f9680c00120...``) of record batches.

    Args:
        schema: the Arrow schema of the data (as arrow-rs would report it for the file).
        batches: record batches (or a table) with that schema, in row order.

    Raises:
        UnsupportedDataType: for column types arrow-digest V0 cannot hash.
        DataSchemaMismatch: if a batch does not match ``schema``.
    """
    digest = RecordDigest(schema)
    if isinstance(batches, pa.Table):
        digest.update(batches)
    else:
        for batch in batches:
            digest.update(batch)
    return Multihash(ARROW0_SHA3_256, digest.finalize())
