"""Round trips over generated values, cross-checked with the flatc-generated reader.

Values are generated generically from the model descriptors, so every table, union
variant and field kind is exercised; the flatc-generated Python code (fbs/generated)
reads our bytes independently and must see the same field values.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fbs.model as m
from fbs.codec import (
    decode_block,
    decode_block_versioned,
    decode_table,
    encode_block,
    encode_table,
    is_canonical,
)
from fbs.did import DatasetId
from fbs.errors import InvalidValue
from fbs.model import FieldDesc, FieldKind, TableDesc, schema_of
from fbs.model.extra import canonical_json
from fbs.multiformats import ARROW0_SHA3_256, SHA2_256, SHA3_256, Multihash
from fbs.timestamp import MAX_YEAR, MIN_YEAR, Timestamp

MAX_DEPTH = 4

# -- strategies over the reflection API ----------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_text = st.text(max_size=6)
_timestamps = st.builds(
    Timestamp,
    st.integers(
        Timestamp.from_ymd_hms(MIN_YEAR, 1, 1).nanos,
        Timestamp.from_ymd_hms(MAX_YEAR, 12, 31, 23, 59, 59).nanos,
    ),
)
_multihashes = st.builds(
    Multihash,
    st.sampled_from([SHA3_256, SHA2_256, ARROW0_SHA3_256]),
    st.binary(min_size=32, max_size=32),
)
_dids = st.builds(DatasetId, st.binary(min_size=32, max_size=32))


def _leafish(desc: TableDesc) -> bool:
    return all(
        f.kind not in (FieldKind.TABLE, FieldKind.UNION, FieldKind.VEC_TABLE, FieldKind.VEC_UNION)
        or f.optional
        for f in desc.fields
    )


@cache
def table_strategy(name: str, depth: int = 0) -> st.SearchStrategy[Any]:
    desc = m.table_by_name(name)
    if desc.name == "ExtraAttributes":
        return st.builds(m.ExtraAttributes, st.dictionaries(_text, _json, max_size=3))
    return st.builds(desc.cls, **{f.name: _field(f, depth) for f in desc.fields})


def _union(name: str, depth: int) -> st.SearchStrategy[Any]:
    variants = m.union_of(name).variants
    if depth >= MAX_DEPTH:
        variants = tuple(v for v in variants if _leafish(schema_of(v.cls)))
    return st.one_of([table_strategy(schema_of(v.cls).name, depth + 1) for v in variants])


def _field(f: FieldDesc, depth: int) -> st.SearchStrategy[Any]:
    k = f.kind
    deep = depth >= MAX_DEPTH
    base: st.SearchStrategy[Any]
    if k is FieldKind.STRING:
        base = _text
    elif k is FieldKind.MULTIHASH:
        base = _multihashes
    elif k is FieldKind.DATASET_ID:
        base = _dids
    elif k is FieldKind.BYTES:
        base = st.binary(max_size=40)
    elif k is FieldKind.JSON:
        base = st.dictionaries(_text, _json, max_size=3)
    elif k is FieldKind.SCALAR:
        assert f.scalar is not None
        base = st.booleans() if f.scalar.is_bool else st.integers(f.scalar.lo, f.scalar.hi)
    elif k is FieldKind.ENUM:
        assert f.enum_type is not None
        base = st.sampled_from(list(f.enum_type))
    elif k is FieldKind.TIMESTAMP:
        base = _timestamps
    elif k is FieldKind.TABLE:
        if deep and f.optional:
            return st.none()
        base = table_strategy(f.table.name, depth + 1)
    elif k is FieldKind.UNION:
        if deep and f.optional:
            return st.none()
        base = _union(f.union.name, depth)
    elif k is FieldKind.VEC_STRING:
        base = st.lists(_text, max_size=3).map(tuple)
    elif k is FieldKind.VEC_TABLE:
        size = 0 if deep else 2
        base = st.lists(table_strategy(f.table.name, depth + 1), max_size=size).map(tuple)
    else:
        size = 0 if deep else 2
        base = st.lists(_union(f.union.name, depth), max_size=size).map(tuple)
    return st.none() | base if f.optional else base


def blocks() -> st.SearchStrategy[m.MetadataBlock]:
    return table_strategy("MetadataBlock")


# -- independent reader: flatc-generated Python ---------------------------------------------


def _gen_class(name: str) -> Any:
    return getattr(importlib.import_module(f"fbs.generated.{name}"), name)


def _acc(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _gen_union_value(table: Any, cls: type) -> Any:
    obj = _gen_class(cls.__name__)()
    obj.Init(table.Bytes, table.Pos)
    return obj


def _bytes_of(gen: Any, acc: str) -> bytes | None:
    if getattr(gen, acc + "IsNone")():
        return None
    return bytes(getattr(gen, acc)(i) for i in range(getattr(gen, acc + "Length")()))


def cross_check(gen: Any, value: Any) -> None:
    """Assert that the generated reader ``gen`` sees exactly ``value``'s fields."""
    desc = schema_of(value)
    for f in desc.fields:
        v = getattr(value, f.name)
        acc = _acc(f.name)
        k = f.kind
        where = f"{desc.name}.{f.name}"
        if k is FieldKind.STRING or k is FieldKind.JSON:
            raw = getattr(gen, acc)()
            expected = None if v is None else (v if k is FieldKind.STRING else canonical_json(v))
            assert (None if raw is None else raw.decode()) == expected, where
        elif k in (FieldKind.MULTIHASH, FieldKind.DATASET_ID, FieldKind.BYTES):
            expected_b = None if v is None else (v if k is FieldKind.BYTES else v.to_bytes())
            assert _bytes_of(gen, acc) == expected_b, where
        elif k is FieldKind.SCALAR or k is FieldKind.ENUM:
            got = getattr(gen, acc)()
            assert got == (None if v is None else int(v)) and (v is None) == (got is None), where
        elif k is FieldKind.TIMESTAMP:
            ts = getattr(gen, acc)()
            if v is None:
                assert ts is None, where
            else:
                got_parts = (ts.Year(), ts.Ordinal(), ts.SecondsFromMidnight(), ts.Nanoseconds())
                assert got_parts == v.to_struct_parts(), where
        elif k is FieldKind.TABLE:
            sub = getattr(gen, acc)()
            assert (sub is None) == (v is None), where
            if v is not None:
                cross_check(sub, v)
        elif k is FieldKind.UNION:
            code = getattr(gen, acc + "Type")()
            if v is None:
                assert code == 0, where
            else:
                assert code == f.union.variant_of(v).code, where
                cross_check(_gen_union_value(getattr(gen, acc)(), type(v)), v)
        else:
            assert getattr(gen, acc + "IsNone")() == (v is None), where
            if v is None:
                continue
            n = getattr(gen, acc + "Length")()
            assert n == len(v), where
            for i, item in enumerate(v):
                elem = getattr(gen, acc)(i)
                if k is FieldKind.VEC_STRING:
                    assert elem.decode() == item, where
                elif k is FieldKind.VEC_TABLE:
                    cross_check(elem, item)
                else:
                    assert elem.ValueType() == f.union.variant_of(item).code, where
                    cross_check(_gen_union_value(elem.Value(), type(item)), item)


def generated_block(data: bytes) -> Any:
    manifest = _gen_class("Manifest").GetRootAs(data, 0)
    assert manifest.Kind() == 0x400000 and manifest.Version() in (2, 3)
    inner = _bytes_of(manifest, "Content")
    assert inner is not None
    return _gen_class("MetadataBlock").GetRootAs(inner, 0)


# -- tests ----------------------------------------------------------------------------------

_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(blocks(), st.sampled_from([2, 3]))
def test_block_round_trip_and_cross_check(block: m.MetadataBlock, version: int) -> None:
    data = encode_block(block, version)
    assert decode_block_versioned(data) == (block, version)
    assert is_canonical(data)
    cross_check(generated_block(data), block)


@pytest.mark.parametrize("variant", m.METADATA_EVENT.variants, ids=lambda v: v.tag)
def test_every_event_type_round_trips(variant: m.VariantDesc) -> None:
    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(table_strategy(schema_of(variant.cls).name, 1), _timestamps, st.integers(0, 2**64 - 1))
    def check(event: Any, ts: Timestamp, seq: int) -> None:
        block = m.MetadataBlock(system_time=ts, sequence_number=seq, event=event)
        data = encode_block(block)
        assert decode_block(data) == block
        cross_check(generated_block(data), block)

    check()


_ROOTS = [
    "DatasetSnapshot",
    "TransformRequest",
    "TransformResponseRoot",
    "RawQueryRequest",
    "RawQueryResponseRoot",
    "DataSchema",
]


@pytest.mark.parametrize("root", _ROOTS)
def test_standalone_tables_round_trip(root: str) -> None:
    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(table_strategy(root), st.sampled_from([2, 3]))
    def check(value: Any, version: int) -> None:
        data = encode_table(value, version)
        assert decode_table(type(value), data) == value
        cross_check(_gen_class(root).GetRootAs(data, 0), value)

    check()


def test_engine_response_example() -> None:
    resp = m.TransformResponseRoot(
        value=m.TransformResponseSuccess(
            new_offset_interval=m.OffsetInterval(start=0, end=10), new_watermark=Timestamp.now()
        )
    )
    assert decode_table(m.TransformResponseRoot, encode_table(resp)) == resp


def test_default_elision_and_optional_scalars() -> None:
    # Non-optional scalar equal to default -> not written; optional present 0 -> written.
    ts = Timestamp(0)
    seed_root = m.MetadataBlock(
        system_time=ts,
        sequence_number=0,
        event=m.Seed(dataset_id=DatasetId(b"\x01" * 32), dataset_kind=m.DatasetKind.Root),
    )
    gen = generated_block(encode_block(seed_root))
    seed = _gen_union_value(gen.Event(), m.Seed)
    assert seed.DatasetKind() == 0
    # vtable entry 1 (dataset_kind) absent: table offset for slot 1 is 0
    assert seed._tab.Offset(6) == 0
    block = m.MetadataBlock(system_time=ts, sequence_number=1, event=m.AddData(prev_offset=0))
    add = _gen_union_value(generated_block(encode_block(block)).Event(), m.AddData)
    assert add.PrevOffset() == 0 and add._tab.Offset(6) != 0


#: Untyped view of the model for deliberately ill-typed constructions.
U: Any = m
T0 = Timestamp(0)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: U.MetadataBlock(system_time=T0, sequence_number=-1, event=U.SetInfo()),
        lambda: U.MetadataBlock(system_time=T0, sequence_number=2**64, event=U.SetInfo()),
        lambda: U.MetadataBlock(system_time=T0, sequence_number=True, event=U.SetInfo()),
        lambda: U.MetadataBlock(system_time=0, sequence_number=0, event=U.SetInfo()),
        lambda: U.MetadataBlock(
            system_time=T0, sequence_number=0, event=U.OffsetInterval(start=0, end=0)
        ),
        lambda: U.MetadataBlock(
            system_time=T0, sequence_number=0, event=U.SetInfo(description=b"x")
        ),
        lambda: U.MetadataBlock(
            system_time=T0, sequence_number=0, event=U.SetInfo(description="\ud800")
        ),
        lambda: U.MetadataBlock(system_time=T0, sequence_number=0, event=U.SetInfo(keywords="abc")),
        lambda: U.MetadataBlock(
            system_time=T0, sequence_number=0, event=U.DisablePushSource(source_name=None)
        ),
        lambda: U.MetadataBlock(
            system_time=T0,
            sequence_number=0,
            event=U.Seed(dataset_id=DatasetId(b"\0" * 32), dataset_kind=0),
        ),
        lambda: U.MetadataBlock(
            system_time=Timestamp(10**30), sequence_number=0, event=U.SetInfo()
        ),
    ],
)
def test_encode_rejects_invalid_values(bad: Any) -> None:
    with pytest.raises(InvalidValue):
        encode_block(bad())


def test_encode_rejects_deep_nesting_and_bad_version() -> None:
    t: Any = m.DataTypeString()
    for _ in range(80):
        t = m.DataTypeOption(inner=t)
    schema = m.DataSchema(fields=(m.DataField(name="x", type=t),))
    with pytest.raises(InvalidValue):
        encode_block(
            m.MetadataBlock(
                system_time=Timestamp(0), sequence_number=0, event=m.SetDataSchema(schema=schema)
            )
        )
    with pytest.raises(InvalidValue):
        encode_block(
            m.MetadataBlock(system_time=Timestamp(0), sequence_number=0, event=m.SetInfo()), 4
        )
    with pytest.raises(InvalidValue):
        encode_block(U.SetInfo())
    with pytest.raises(InvalidValue):
        encode_table(object())
