"""Arrow ↔ RFC-016 schema conversions and DDL parsing."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.arrow_schema import (
    BUFFER_ENCODING_KEY,
    arrow_schema_from_data,
    data_schema_from_arrow,
    parse_ddl_schema,
    strip_encoding,
)
from fbs.errors import InvalidDdlSchema, SchemaConversionError
from fbs.model import (
    DataField,
    DataSchema,
    DataTypeDate,
    DataTypeDecimal,
    DataTypeInt64,
    DataTypeOption,
    DataTypeString,
    DataTypeTimestamp,
    ExtraAttributes,
    TimeUnit,
)

# -- kamu facts (odf-format.md 6.4) -----------------------------------------------------------


def test_kamu_encodings_kept_when_not_stripped() -> None:
    schema = pa.schema(
        [
            pa.field("utf8", pa.string(), nullable=False),
            pa.field("utf8_large", pa.large_string(), nullable=False),
            pa.field("utf8_view", pa.string_view(), nullable=False),
            pa.field("date32", pa.date32(), nullable=False),
            pa.field("date64", pa.date64(), nullable=False),
            pa.field("decimal128", pa.decimal128(20, 5), nullable=False),
            pa.field("decimal256", pa.decimal256(20, 5), nullable=False),
        ]
    )
    odf = data_schema_from_arrow(schema, strip_encoding=False)
    extras = {f.name: (f.extra.attributes if f.extra else None) for f in odf.fields}
    assert extras["utf8"] == {BUFFER_ENCODING_KEY: {"kind": "Contiguous", "offsetBitWidth": 32}}
    assert extras["utf8_large"] == {
        BUFFER_ENCODING_KEY: {"kind": "Contiguous", "offsetBitWidth": 64}
    }
    assert extras["utf8_view"] == {BUFFER_ENCODING_KEY: {"kind": "View", "offsetBitWidth": 32}}
    assert extras["date32"] is None
    assert extras["date64"] == {"arrow.apache.org/dateEncoding": {"unit": "Millisecond"}}
    assert extras["decimal256"] == {"arrow.apache.org/decimalEncoding": {"bitWidth": 256}}
    assert odf.fields[5].type == DataTypeDecimal(precision=20, scale=5)
    assert arrow_schema_from_data(odf).equals(schema)


def test_stripped_nullable_string_is_bare_option() -> None:
    odf = data_schema_from_arrow(pa.schema([pa.field("city", pa.string())]))
    assert odf == DataSchema(
        fields=(DataField(name="city", type=DataTypeOption(inner=DataTypeString())),)
    )


def test_strip_keeps_other_attributes() -> None:
    extra = ExtraAttributes(
        {BUFFER_ENCODING_KEY: {"kind": "View", "offsetBitWidth": 32}, "foo.com/foo": "a"}
    )
    schema = DataSchema(fields=(DataField(name="s", type=DataTypeString(), extra=extra),))
    stripped = strip_encoding(schema)
    assert stripped.fields[0].extra == ExtraAttributes({"foo.com/foo": "a"})


def test_timestamp_defaults_to_ms_utc() -> None:
    odf = DataSchema(fields=(DataField(name="t", type=DataTypeTimestamp()),))
    assert arrow_schema_from_data(odf).field("t").type == pa.timestamp("ms", "UTC")
    back = data_schema_from_arrow(pa.schema([pa.field("t", pa.timestamp("us", "UTC"), False)]))
    assert back.fields[0].type == DataTypeTimestamp(unit=TimeUnit.Microsecond, timezone="UTC")


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.dictionary(pa.int32(), pa.string()),
        pa.month_day_nano_interval(),
        pa.dense_union([pa.field("a", pa.int32())]),
    ],
)
def test_unsupported_arrow_types(arrow_type: pa.DataType) -> None:
    with pytest.raises(SchemaConversionError):
        data_schema_from_arrow(pa.schema([pa.field("x", arrow_type)]))


def test_bad_encoding_attribute_refused() -> None:
    extra = ExtraAttributes({BUFFER_ENCODING_KEY: {"kind": "Weird"}})
    schema = DataSchema(fields=(DataField(name="s", type=DataTypeString(), extra=extra),))
    with pytest.raises(SchemaConversionError):
        arrow_schema_from_data(schema)


# -- DDL -----------------------------------------------------------------------------------


def test_ddl_types() -> None:
    schema = parse_ddl_schema(
        [
            "event_time TIMESTAMP",
            "city string",
            "population BIGINT NOT NULL",
            "price DECIMAL(10,2)",
            "tags ARRAY<STRING>",
            "loc STRUCT<lat: DOUBLE, lon: DOUBLE>",
            "`odd name` INT, d DATE, f FLOAT, b BOOLEAN, m MAP<STRING, BIGINT>",
            '"quoted ""x""" varchar(20)',
            "u INT UNSIGNED, big DECIMAL(50, 3), raw BINARY",
        ]
    )
    t = {f.name: f.type for f in schema}
    assert t["event_time"] == pa.timestamp("ms", "UTC")
    assert t["city"] == pa.string()
    assert not schema.field("population").nullable
    assert t["population"] == pa.int64()
    assert t["price"] == pa.decimal128(10, 2)
    assert t["tags"] == pa.list_(pa.string())
    assert t["loc"] == pa.struct([("lat", pa.float64()), ("lon", pa.float64())])
    assert t["odd name"] == pa.int32()
    assert t["d"] == pa.date32()
    assert t["f"] == pa.float32()
    assert t["b"] == pa.bool_()
    assert t["m"] == pa.map_(pa.string(), pa.int64())
    assert t['quoted "x"'] == pa.string()
    assert t["u"] == pa.uint32()
    assert t["big"] == pa.decimal256(50, 3)
    assert t["raw"] == pa.binary()


@pytest.mark.parametrize(
    ("ddl", "needle"),
    [
        (["a FOO"], "unknown type 'FOO'"),
        (["a"], "expected a type"),
        (["a ARRAY<INT"], "expected '>'"),
        (["a INT", "a STRING"], "duplicate column 'a'"),
        (["a DECIMAL(5, 9)"], "invalid DECIMAL"),
        (["a INT extra"], "unexpected 'extra'"),
        (["a INT;"], "unexpected character"),
        ([""], "empty DDL"),
    ],
)
def test_ddl_errors_name_the_definition(ddl: list[str], needle: str) -> None:
    with pytest.raises(InvalidDdlSchema) as info:
        parse_ddl_schema(ddl)
    assert needle in str(info.value)


def test_ddl_depth_limit() -> None:
    with pytest.raises(InvalidDdlSchema, match="nested deeper"):
        parse_ddl_schema(["a " + "ARRAY<" * 100 + "INT" + ">" * 100])


# -- round trips ---------------------------------------------------------------------------

_leaf = st.sampled_from(
    [
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint16(),
        pa.uint32(),
        pa.uint64(),
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.date32(),
        pa.timestamp("s", "UTC"),
        pa.timestamp("ms", "UTC"),
        pa.timestamp("ns", "+01:00"),
        pa.time32("s"),
        pa.time64("us"),
        pa.duration("ms"),
        pa.decimal128(12, 3),
        pa.binary(8),
    ]
)
# Top-level only: these layouts are recorded as field attributes.
_top_only = st.sampled_from(
    [
        pa.string(),
        pa.large_string(),
        pa.string_view(),
        pa.binary(),
        pa.large_binary(),
        pa.date64(),
        pa.decimal256(20, 2),
    ]
)


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.one_of(
        children.map(lambda t: pa.list_(pa.field("item", t))),
        st.tuples(children, st.booleans()).map(
            lambda tb: pa.list_(pa.field("item", tb[0], nullable=tb[1]), 3)
        ),
        st.lists(children, min_size=1, max_size=3).map(
            lambda ts: pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(ts)])
        ),
        children.map(lambda t: pa.map_(pa.int32(), t)),
    )


_types = st.one_of(_top_only, st.recursive(_leaf, _nested, max_leaves=5))
_fields = st.lists(st.tuples(_types, st.booleans()), min_size=1, max_size=5).map(
    lambda ts: pa.schema([pa.field(f"c{i}", t, nullable=n) for i, (t, n) in enumerate(ts)])
)


@settings(max_examples=150, deadline=None)
@given(_fields)
def test_arrow_round_trip(schema: pa.Schema) -> None:
    odf = data_schema_from_arrow(schema, strip_encoding=False)
    assert arrow_schema_from_data(odf).equals(schema)


@settings(max_examples=100, deadline=None)
@given(_fields)
def test_stripped_round_trip_is_stable(schema: pa.Schema) -> None:
    """Stripped schemas convert to Arrow and back to themselves (the default layouts)."""
    odf = data_schema_from_arrow(schema)
    again = data_schema_from_arrow(arrow_schema_from_data(odf))
    assert again == odf
    assert strip_encoding(data_schema_from_arrow(schema, strip_encoding=False)) == odf


def test_ddl_schema_converts_to_odf() -> None:
    odf = data_schema_from_arrow(parse_ddl_schema(["id BIGINT NOT NULL", "d DATE"]))
    assert odf.fields[0].type == DataTypeInt64()
    assert odf.fields[1].type == DataTypeOption(inner=DataTypeDate())
