"""Logical hash (arrow-digest RecordDigestV0 / ArrayDigestV0 over SHA3-256).

The oracle is a deliberately naive per-element reference written below from the
spec digest (odf-format.md §3.2): it reads raw Arrow buffers with `struct` and feeds
a hasher element by element, mirroring upstream's control flow (including the
null-mask combination quirks). The vectorized implementation must agree with it on
generated arrays of every supported type, with nulls, slices, chunking and nesting.
"""

from __future__ import annotations

import decimal
import hashlib
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fbs.logical_hash as lh
from fbs.errors import DataSchemaMismatch, LogicalHashError, UnsupportedDataType
from fbs.logical_hash import (
    ArrayDigest,
    RecordDigest,
    array_digest,
    logical_hash,
    type_descriptor,
)
from fbs.multiformats import ARROW0_SHA3_256

# ---------------------------------------------------------------------------------------
# Naive reference implementation (per element, raw buffers, no pyarrow compute)
# ---------------------------------------------------------------------------------------

_UNITS = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def ref_descriptor(t: pa.DataType) -> bytes:
    def u16(v: int) -> bytes:
        return struct.pack("<H", v)

    def u64(v: int) -> bytes:
        return struct.pack("<Q", v % (1 << 64))

    if isinstance(t, pa.BaseExtensionType):
        return ref_descriptor(t.storage_type)
    if t == pa.null():
        return u16(0)
    ints = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
    uints = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}
    floats = {pa.float16(): 16, pa.float32(): 32, pa.float64(): 64}
    if t in ints:
        return u16(1) + b"\x01" + u64(ints[t])
    if t in uints:
        return u16(1) + b"\x00" + u64(uints[t])
    if t in floats:
        return u16(2) + u64(floats[t])
    if t == pa.bool_():
        return u16(5)
    if t in (pa.binary(), pa.large_binary(), pa.binary_view()):
        return u16(3)
    if t in (pa.string(), pa.large_string(), pa.string_view()):
        return u16(4)
    if t == pa.date32():
        return u16(7) + u64(32) + u16(0)
    if t == pa.date64():
        return u16(7) + u64(64) + u16(1)
    name = str(t)
    if name.startswith("decimal"):
        bits = {"decimal32": 32, "decimal64": 64, "decimal128": 128, "decimal256": 256}
        return u16(6) + u64(bits[name.split("(")[0]]) + u64(t.precision) + u64(t.scale)
    if name.startswith("fixed_size_binary"):
        return u16(3)
    if name.startswith("time32"):
        return u16(8) + u64(32) + u16(_UNITS[t.unit])
    if name.startswith("time64"):
        return u16(8) + u64(64) + u16(_UNITS[t.unit])
    if name.startswith("timestamp"):
        tz = b"\x00" if t.tz is None else u64(len(t.tz.encode())) + t.tz.encode()
        return u16(9) + u16(_UNITS[t.unit]) + tz
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return u16(11) + ref_descriptor(t.value_type)
    raise UnsupportedDataType(str(t))


def _bit(buf: pa.Buffer, index: int) -> bool:
    return bool(buf.to_pybytes()[index // 8] >> (index % 8) & 1)


def ref_own_mask(arr: pa.Array) -> list[bool] | None:
    """Upstream sees a validity buffer only when it holds nulls (arrow-rs builders)."""
    if arr.null_count == 0:
        return None
    validity = arr.buffers()[0]
    return [_bit(validity, arr.offset + i) for i in range(len(arr))]


def ref_combine(p: list[bool] | None, o: list[bool] | None) -> list[bool] | None:
    p_nulls = p is not None and not all(p)
    o_nulls = o is not None and not all(o)
    if p is None and o is not None and o_nulls:
        return o
    if p is not None and o is None and p_nulls:
        return p
    if p is not None and o is not None and p_nulls and o_nulls:
        return [a or b for a, b in zip(p, o, strict=True)]
    return None


def _offsets(arr: pa.Array, large: bool) -> list[int]:
    fmt, width = ("<q", 8) if large else ("<i", 4)
    raw = arr.buffers()[1].to_pybytes()
    return [struct.unpack_from(fmt, raw, (arr.offset + i) * width)[0] for i in range(len(arr) + 1)]


def _view_value(arr: pa.Array, i: int) -> bytes:
    bufs = arr.buffers()
    view: bytes = bufs[1].to_pybytes()[(arr.offset + i) * 16 : (arr.offset + i + 1) * 16]
    length = struct.unpack_from("<i", view, 0)[0]
    if length <= 12:
        return view[4 : 4 + length]
    buf_index, off = struct.unpack_from("<ii", view, 8)
    data: bytes = bufs[2 + buf_index].to_pybytes()
    return data[off : off + length]


def ref_update(h: Any, arr: pa.Array, parent: list[bool] | None) -> None:
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    mask = ref_combine(parent, ref_own_mask(arr))

    def valid(i: int) -> bool:
        return mask is None or mask[i]

    n = len(arr)
    if t == pa.null():
        raise UnsupportedDataType("null")
    if t == pa.bool_():
        for i in range(n):
            if valid(i):
                h.update(bytes([_bit(arr.buffers()[1], arr.offset + i) + 1]))
            else:
                h.update(b"\x00")
        return
    if t in (pa.binary(), pa.string(), pa.large_binary(), pa.large_string()):
        large = t in (pa.large_binary(), pa.large_string())
        offs = _offsets(arr, large)
        data = arr.buffers()[2].to_pybytes() if arr.buffers()[2] is not None else b""
        for i in range(n):
            if valid(i):
                value = data[offs[i] : offs[i + 1]]
                h.update(struct.pack("<Q", len(value)) + value)
            else:
                h.update(b"\x00")
        return
    if t in (pa.binary_view(), pa.string_view()):
        for i in range(n):
            if valid(i):
                value = _view_value(arr, i)
                h.update(struct.pack("<Q", len(value)) + value)
            else:
                h.update(b"\x00")
        return
    if pa.types.is_fixed_size_binary(t) and not pa.types.is_decimal(t):
        w = t.byte_width
        data = arr.buffers()[1].to_pybytes()
        for i in range(n):
            if valid(i):
                h.update(
                    struct.pack("<Q", w) + data[(arr.offset + i) * w : (arr.offset + i + 1) * w]
                )
            else:
                h.update(b"\x00")
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
            offs = [(arr.offset + i) * k for i in range(n + 1)]
        else:
            offs = _offsets(arr, pa.types.is_large_list(t))
        for i in range(n):
            if valid(i):
                sub = arr.values.slice(offs[i], offs[i + 1] - offs[i])
                h.update(struct.pack("<Q", len(sub)))
                ref_update(h, sub, None)
            else:
                h.update(b"\x00")
        return
    # fixed width
    w = t.bit_width // 8
    data = arr.buffers()[1].to_pybytes()
    for i in range(n):
        if valid(i):
            h.update(data[(arr.offset + i) * w : (arr.offset + i + 1) * w])
        else:
            h.update(b"\x00")


def ref_array_digest(arr: pa.Array | pa.ChunkedArray) -> bytes:
    h = hashlib.sha3_256(ref_descriptor(arr.type))
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    for chunk in chunks:
        ref_update(h, chunk, None)
    return h.digest()


def ref_record_digest(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    record = hashlib.sha3_256()
    columns: list[Any] = []

    def walk_fields(fields: list[pa.Field], level: int) -> None:
        for f in fields:
            record.update(struct.pack("<Q", len(f.name.encode())) + f.name.encode())
            record.update(struct.pack("<Q", level))
            if pa.types.is_struct(f.type):
                walk_fields(list(f.type), level + 1)
            else:
                columns.append(hashlib.sha3_256(ref_descriptor(f.type)))

    walk_fields(list(schema), 0)
    for batch in batches:
        index = 0

        def walk(arr: pa.Array, parent: list[bool] | None) -> None:
            nonlocal index
            if pa.types.is_struct(arr.type):
                combined = ref_combine(parent, ref_own_mask(arr))
                for j in range(arr.type.num_fields):
                    walk(arr.field(j), combined)
            else:
                ref_update(columns[index], arr, parent)
                index += 1

        for column in batch.columns:
            walk(column, None)
    for c in columns:
        record.update(c.digest())
    return record.digest()


# ---------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------


def _int_range(bits: int, signed: bool) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return st.integers(0, (1 << bits) - 1)


def _decimal_values(precision: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    limit = 10**precision - 1
    exact = decimal.Context(prec=100)  # the default 28 digits would round wide decimals
    return st.integers(-limit, limit).map(lambda v: decimal.Decimal(v).scaleb(-scale, exact))


LEAF_TYPES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.int8(), _int_range(8, True)),
    (pa.int16(), _int_range(16, True)),
    (pa.int32(), _int_range(32, True)),
    (pa.int64(), _int_range(64, True)),
    (pa.uint8(), _int_range(8, False)),
    (pa.uint16(), _int_range(16, False)),
    (pa.uint32(), _int_range(32, False)),
    (pa.uint64(), _int_range(64, False)),
    (pa.float16(), st.floats(width=16)),
    (pa.float32(), st.floats(width=32)),
    (pa.float64(), st.floats()),
    (pa.bool_(), st.booleans()),
    (pa.binary(), st.binary(max_size=20)),
    (pa.large_binary(), st.binary(max_size=20)),
    (pa.binary_view(), st.binary(max_size=20)),
    (pa.binary(3), st.binary(min_size=3, max_size=3)),
    (pa.string(), st.text(max_size=15)),
    (pa.large_string(), st.text(max_size=15)),
    (pa.string_view(), st.text(max_size=15)),
    (pa.decimal32(7, 2), _decimal_values(7, 2)),
    (pa.decimal64(15, -3), _decimal_values(15, -3)),
    (pa.decimal128(38, 10), _decimal_values(38, 10)),
    (pa.decimal256(60, 5), _decimal_values(60, 5)),
    (pa.date32(), st.integers(-100_000, 100_000)),
    (pa.date64(), st.integers(-(10**12), 10**12)),
    (pa.time32("s"), st.integers(0, 86_399)),
    (pa.time32("ms"), st.integers(0, 86_399_999)),
    (pa.time64("us"), st.integers(0, 86_399_999_999)),
    (pa.time64("ns"), st.integers(0, 86_399_999_999_999)),
    (pa.timestamp("s"), _int_range(48, True)),
    (pa.timestamp("ms", "UTC"), _int_range(48, True)),
    (pa.timestamp("us", "+01:00"), _int_range(64, True)),
    (pa.timestamp("ns", "Europe/Kyiv"), _int_range(64, True)),
]


@st.composite
def typed_values(draw: st.DrawFn, depth: int = 0) -> tuple[pa.DataType, st.SearchStrategy[Any]]:
    choice = draw(st.integers(0, 3 if depth < 2 else 0))
    if choice <= 1:
        leaf: tuple[pa.DataType, st.SearchStrategy[Any]] = draw(st.sampled_from(LEAF_TYPES))
        return leaf
    item_type, item_values = draw(typed_values(depth + 1))
    item = st.none() | item_values
    kind = draw(st.sampled_from(["list", "large_list", "fixed"]))
    if kind == "fixed":
        return pa.list_(item_type, 2), st.lists(item, min_size=2, max_size=2)
    list_type = pa.list_(item_type) if kind == "list" else pa.large_list(item_type)
    return list_type, st.lists(item, max_size=4)


@st.composite
def arrays(draw: st.DrawFn) -> pa.Array:
    dtype, values = draw(typed_values())
    null_share = draw(st.sampled_from([0.0, 0.3, 1.0]))
    element = values if null_share == 0.0 else (st.none() | values)
    items = draw(st.lists(element, max_size=25))
    arr = pa.array(items, dtype)
    if draw(st.booleans()) and len(arr) > 0:
        start = draw(st.integers(0, len(arr)))
        arr = arr.slice(start, draw(st.integers(0, len(arr) - start)))
    return arr


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------
# Vectors (odf-format.md §7.5)
# ---------------------------------------------------------------------------------------


def test_vector_int32() -> None:
    digest = array_digest(pa.array([1, 2, 3], pa.int32()))
    assert digest.hex() == "95d11399ecaed3721501c76f154c3430744d178831b53896cb8f54fed36fb321"


def test_vector_utf8() -> None:
    digest = array_digest(pa.array(["foo", "bar", "baz"], pa.string()))
    assert digest.hex() == "c09fe3b0cabaef56d03b408feb328d0f0e523d130f1af88799669c88317bab85"


def test_vector_record_readme() -> None:
    table = pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": pa.array(["a", "b", "c"])})
    mh = logical_hash(table.schema, table)
    assert mh.code == ARROW0_SHA3_256
    expected = "5684f7bfdcaf4ff7d1f9bf0fd766c98d8ded335e933fb4eec245054f3206b61a"
    assert mh.digest.hex() == expected
    assert mh.to_multibase() == "f9680c00120" + expected


def test_descriptor_examples() -> None:
    assert type_descriptor(pa.timestamp("ms", "UTC")).hex() == "0900010003000000000000005554" + "43"
    assert type_descriptor(pa.int64()).hex() == "0100014000000000000000"
    assert type_descriptor(pa.timestamp("us")).hex() == "0900020000"
    # Negative decimal scale is sign-extended to u64.
    assert type_descriptor(pa.decimal128(10, -2))[-8:] == b"\xfe" + b"\xff" * 7
    assert type_descriptor(pa.list_(pa.list_(pa.bool_()))).hex() == "0b000b000500"


@pytest.mark.parametrize(("dtype", "_values"), LEAF_TYPES)
def test_descriptor_matches_reference(dtype: pa.DataType, _values: Any) -> None:
    assert type_descriptor(dtype) == ref_descriptor(dtype)


# ---------------------------------------------------------------------------------------
# Property tests against the reference
# ---------------------------------------------------------------------------------------


@_SETTINGS
@given(arrays())
def test_array_digest_matches_reference(arr: pa.Array) -> None:
    assert array_digest(arr) == ref_array_digest(arr)


@settings(max_examples=150, deadline=None)
@given(arrays(), st.integers(1, 7))
def test_chunked_and_small_chunk_rows(arr: pa.Array, chunk_rows: int) -> None:
    expected = ref_array_digest(arr)
    digest = ArrayDigest(arr.type, chunk_rows=chunk_rows)
    digest.update(arr)
    assert digest.finalize() == expected
    # Splitting into chunks of a chunked array does not change the digest.
    pieces = [arr.slice(i, chunk_rows) for i in range(0, len(arr), chunk_rows)]
    if pieces:
        assert array_digest(pa.chunked_array(pieces, arr.type)) == expected


@st.composite
def struct_tables(draw: st.DrawFn) -> pa.Table:
    """Tables with nested structs whose parents and children both carry nulls."""
    n = draw(st.integers(0, 12))

    def mask() -> pa.Array | None:
        share = draw(st.sampled_from([None, 0.0, 0.4]))
        if share is None:
            return None
        bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        return pa.array(bits if share else [False] * n, pa.bool_())

    def leaf() -> pa.Array:
        dtype, values = draw(st.sampled_from(LEAF_TYPES[:22]))
        return pa.array(draw(st.lists(st.none() | values, min_size=n, max_size=n)), dtype)

    def struct(depth: int) -> pa.Array:
        width = draw(st.integers(1, 3))
        children = [
            struct(depth + 1) if depth < 2 and draw(st.booleans()) else leaf() for _ in range(width)
        ]
        names = [f"f{depth}_{i}" for i in range(width)]
        return pa.StructArray.from_arrays(children, names=names, mask=mask())

    columns = {"top": leaf(), "s": struct(0), "tail": leaf()}
    table = pa.table(columns)
    if n and draw(st.booleans()):
        start = draw(st.integers(0, n))
        table = table.slice(start, draw(st.integers(0, n - start)))
    return table


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(struct_tables())
def test_record_digest_matches_reference(table: pa.Table) -> None:
    batches = table.to_batches()
    assert logical_hash(table.schema, batches).digest == ref_record_digest(table.schema, batches)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(arrays(), min_size=1, max_size=3), st.data())
def test_batch_splitting_does_not_change_record_hash(cols: list[pa.Array], data: Any) -> None:
    n = min(len(c) for c in cols)
    table = pa.table({f"c{i}": c.slice(0, n) for i, c in enumerate(cols)})
    whole = logical_hash(table.schema, table.combine_chunks())
    size = data.draw(st.integers(1, max(1, n)))
    batches = table.to_batches(max_chunksize=size)
    assert logical_hash(table.schema, batches) == whole
    assert whole.digest == ref_record_digest(table.schema, table.to_batches())


# ---------------------------------------------------------------------------------------
# Spec §3.2 F equivalences and upstream test facts
# ---------------------------------------------------------------------------------------


def test_string_variants_equal() -> None:
    values = ["foo", "bar", None, "a much longer string than twelve bytes"]
    expected = array_digest(pa.array(values, pa.string()))
    assert array_digest(pa.array(values, pa.large_string())) == expected
    assert array_digest(pa.array(values, pa.string_view())) == expected


def test_binary_variants_equal() -> None:
    values = [b"one", b"two", b"", b"three", None]
    expected = array_digest(pa.array(values, pa.binary()))
    assert array_digest(pa.array(values, pa.large_binary())) == expected
    assert array_digest(pa.array(values, pa.binary_view())) == expected


def test_fixed_size_binary_equals_binary() -> None:
    fixed = pa.Array.from_buffers(pa.binary(3), 2, [None, pa.py_buffer(b"onetwo")])
    assert array_digest(fixed) == array_digest(pa.array([b"one", b"two"]))


def test_bitpacked_bool_and_padding_bits() -> None:
    literal = pa.array([True, False, True, False, True, True])
    packed = pa.Array.from_buffers(pa.bool_(), 6, [None, pa.py_buffer(bytes([0b0011_0101]))])
    padded = pa.Array.from_buffers(pa.bool_(), 6, [None, pa.py_buffer(bytes([0b1111_0101]))])
    assert array_digest(packed) == array_digest(literal) == array_digest(padded)
    assert array_digest(literal) != array_digest(pa.array([True, False, True, False, True, False]))
    with_nulls = pa.Array.from_buffers(
        pa.bool_(), 6, [pa.py_buffer(bytes([0b1110_1110])), pa.py_buffer(bytes([0b1111_0101]))]
    )
    assert array_digest(with_nulls) == array_digest(
        pa.array([None, False, True, False, None, True])
    )


def test_signedness_and_nulls_matter() -> None:
    assert array_digest(pa.array([1, 2, 3], pa.int32())) != array_digest(
        pa.array([1, 2, 3], pa.uint32())
    )
    assert array_digest(pa.array([1, 2, 3], pa.int32())) != array_digest(
        pa.array([1, 2, None, 3], pa.int32())
    )
    assert array_digest(pa.array(["foo", "bar", "baz"])) != array_digest(
        pa.array(["foo", "bar", "", "baz"])
    )


def test_floats_hash_by_bit_pattern() -> None:
    assert array_digest(pa.array([0.0])) != array_digest(pa.array([-0.0]))


def test_list_element_moving_across_boundary_changes_hash() -> None:
    t = pa.list_(pa.int32())
    a = pa.array([[0, 1, 2], None, [3, None, 4, 5], [6, 7]], t)
    b = pa.array([[0, 1, 2], None, [3, None, 4], [5, 6, 7]], t)
    assert array_digest(a) != array_digest(b)
    assert array_digest(a) == ref_array_digest(a)


def _nested(name: str, mask: pa.Array | None = None) -> pa.Table:
    c = pa.array(["a", "b", "c"])
    d = pa.array([3, 2, 1], pa.int32())
    s = pa.StructArray.from_arrays([c, d], names=["c", "d"], mask=mask)
    return pa.table({"a": pa.array([1, 2, 3], pa.int32()), name: s})


def test_struct_rename_and_validity() -> None:
    base = logical_hash(_nested("b").schema, _nested("b"))
    assert logical_hash(_nested("bee").schema, _nested("bee")) != base
    all_valid = _nested("b", pa.array([False, False, False]))
    assert logical_hash(all_valid.schema, all_valid) == base
    one_null = _nested("b", pa.array([False, True, False]))
    assert logical_hash(one_null.schema, one_null) != base


def test_struct_mask_or_rule() -> None:
    # Parent null at row 0, child null at row 1: OR makes both rows valid, so the
    # child's raw slot values are hashed everywhere (upstream behaviour).
    child = pa.array([10, None, 30], pa.int64())
    parent = pa.StructArray.from_arrays([child], names=["x"], mask=pa.array([True, False, False]))
    table = pa.table({"s": parent})
    raw = child.buffers()[1].to_pybytes()[:24]
    column = hashlib.sha3_256(type_descriptor(pa.int64()) + raw).digest()
    record = hashlib.sha3_256()
    record.update(struct.pack("<Q", 1) + b"s" + struct.pack("<Q", 0))
    record.update(struct.pack("<Q", 1) + b"x" + struct.pack("<Q", 1))
    record.update(column)
    assert logical_hash(table.schema, table).digest == record.digest()


def _hidden_values(dtype: pa.DataType) -> pa.Array:
    """Three values whose slot 1 holds real data hidden by the validity bitmap."""
    validity = pa.py_buffer(bytes([0b101]))
    if pa.types.is_list(dtype):
        plain = pa.array([[1, 2], [3], [4]], dtype)
        return pa.Array.from_buffers(
            dtype, 3, [validity, plain.buffers()[1]], children=[plain.values]
        )
    values = {pa.bool_(): [True, True, False], pa.string(): ["a", "hidden", "c"]}
    plain = pa.array(values.get(dtype, [1, 2, 3]), dtype)
    return pa.Array.from_buffers(dtype, 3, [validity, *plain.buffers()[1:]])


@pytest.mark.parametrize("dtype", [pa.int32(), pa.bool_(), pa.string(), pa.list_(pa.int8())])
def test_or_rule_hashes_hidden_slot_values(dtype: pa.DataType) -> None:
    child = _hidden_values(dtype)
    assert child.null_count == 1
    mask = pa.array([True, False, False])
    table = pa.table({"s": pa.StructArray.from_arrays([child], names=["x"], mask=mask)})
    digest = logical_hash(table.schema, table).digest
    assert digest == ref_record_digest(table.schema, table.to_batches())
    # Row 1 is valid in the parent, so its hidden value is hashed (not a null marker).
    visible = pa.table({"s": pa.StructArray.from_arrays([child], names=["x"])})
    assert digest != logical_hash(visible.schema, visible).digest


def test_struct_all_valid_or_disables_grandchild_mask() -> None:
    # Two struct levels with complementary nulls OR to an all-valid mask; upstream
    # passes it down as present, which then drops the leaf's own nulls.
    leaf = pa.array([None, 2, 3], pa.int32())
    inner = pa.StructArray.from_arrays([leaf], names=["v"], mask=pa.array([False, True, False]))
    outer = pa.StructArray.from_arrays([inner], names=["i"], mask=pa.array([True, False, False]))
    table = pa.table({"o": outer})
    digest = logical_hash(table.schema, table).digest
    assert digest == ref_record_digest(table.schema, table.to_batches())
    leaf_raw = hashlib.sha3_256(type_descriptor(pa.int32()) + leaf.buffers()[1].to_pybytes()[:12])
    record = hashlib.sha3_256()
    for name, level in (("o", 0), ("i", 1), ("v", 2)):
        record.update(struct.pack("<Q", 1) + name.encode() + struct.pack("<Q", level))
    record.update(leaf_raw.digest())
    assert digest == record.digest()


def test_parent_nulls_mask_child_values() -> None:
    child = pa.array(["x", "y", "z"])
    parent = pa.StructArray.from_arrays([child], names=["x"], mask=pa.array([False, True, False]))
    table = pa.table({"s": parent})
    expected_column = array_digest(pa.array(["x", None, "z"]))
    record = hashlib.sha3_256()
    record.update(struct.pack("<Q", 1) + b"s" + struct.pack("<Q", 0))
    record.update(struct.pack("<Q", 1) + b"x" + struct.pack("<Q", 1))
    record.update(expected_column)
    assert logical_hash(table.schema, table).digest == record.digest()


def test_extension_type_hashes_as_storage() -> None:
    storage = pa.array([b"0123456789abcdef", None], pa.binary(16))
    uuids = pa.ExtensionArray.from_storage(pa.uuid(), storage)
    assert array_digest(uuids) == array_digest(storage)


# ---------------------------------------------------------------------------------------
# Errors and limits
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype",
    [
        pa.dictionary(pa.int32(), pa.string()),
        pa.map_(pa.string(), pa.int32()),
        pa.duration("s"),
        pa.month_day_nano_interval(),
        pa.list_(pa.struct([("a", pa.int32())])),
        pa.dense_union([pa.field("a", pa.int32())]),
        pa.run_end_encoded(pa.int32(), pa.string()),
        pa.list_view(pa.int32()),
    ],
)
def test_unsupported_types(dtype: pa.DataType) -> None:
    with pytest.raises(UnsupportedDataType):
        type_descriptor(dtype)
    with pytest.raises(UnsupportedDataType):
        RecordDigest(pa.schema([("c", dtype)]))


def test_dictionary_array_unsupported() -> None:
    arr = pa.array(["a", "b", "a"]).dictionary_encode()
    with pytest.raises(UnsupportedDataType):
        array_digest(arr)


def test_null_type_column() -> None:
    schema = pa.schema([("n", pa.null())])
    assert type_descriptor(pa.null()) == b"\x00\x00"
    # Schema-only digest works; feeding values fails like upstream's panic.
    assert len(RecordDigest(schema).finalize()) == 32
    with pytest.raises(UnsupportedDataType):
        logical_hash(schema, [pa.record_batch([pa.nulls(2)], schema=schema)])
    # A list of Null items fails only when a list is valid (upstream hashes sub-arrays).
    all_null = pa.array([None, None], pa.list_(pa.null()))
    assert array_digest(all_null) == ref_array_digest(all_null)
    with pytest.raises(UnsupportedDataType):
        array_digest(pa.array([[None], None], pa.list_(pa.null())))


def test_too_deep_list_nesting() -> None:
    t: pa.DataType = pa.int8()
    for _ in range(lh.MAX_TYPE_DEPTH + 2):
        t = pa.list_(t)
    with pytest.raises(UnsupportedDataType):
        type_descriptor(t)


def test_schema_mismatch_and_misuse() -> None:
    schema = pa.schema([("a", pa.int32())])
    digest = RecordDigest(schema)
    with pytest.raises(DataSchemaMismatch):
        digest.update(pa.record_batch([pa.array([1], pa.int64())], names=["a"]))
    with pytest.raises(DataSchemaMismatch):
        digest.update(pa.record_batch([pa.array([1], pa.int32())] * 2, names=["a", "b"]))
    # Utf8 and LargeUtf8 hash identically, so either is accepted for a string column.
    strings = RecordDigest(pa.schema([("s", pa.string())]))
    strings.update(pa.record_batch([pa.array(["x"], pa.large_string())], names=["s"]))
    digest.finalize()
    with pytest.raises(LogicalHashError):
        digest.update(pa.record_batch([pa.array([1], pa.int32())], names=["a"]))
    with pytest.raises(LogicalHashError):
        digest.finalize()


def test_large_chunks_use_worker_and_split(monkeypatch: pytest.MonkeyPatch) -> None:
    # Big enough for the hashing thread: must equal a direct hash of the buffer.
    values = pa.array(range(300_000), pa.int64())
    expected = hashlib.sha3_256(type_descriptor(pa.int64()) + values.buffers()[1].to_pybytes())
    assert array_digest(values) == expected.digest()
    strings = pa.array([f"value-{i}" if i % 7 else None for i in range(200_000)])
    assert array_digest(strings) == array_digest(strings.cast(pa.large_string()))
    small = strings.slice(5, 3_000)
    before = array_digest(small)
    assert before == ref_array_digest(small)
    # A tiny payload limit forces recursive splitting of every chunk.
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 256)
    assert array_digest(small) == before
