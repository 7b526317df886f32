"""Conversions between Arrow schemas, RFC-016 `DataSchema` and the DDL of ``ddlSchema``.

Arrow → ODF follows kamu's rules (odf-format.md 6.4): a nullable field becomes
``Option{inner}``; physical layouts that the logical type cannot express are kept as
``arrow.apache.org/*`` extra attributes on the field (``bufferEncoding`` for
large/view strings, binaries and lists, ``dateEncoding`` for Date64,
``decimalEncoding`` for the decimal bit width). With ``strip_encoding=True`` (what kamu
does when it writes ``SetDataSchema`` itself) those attributes are left out.

Only fields carry extra attributes, so the encoding of a list item or a map key/value
cannot be recorded: it is dropped and such items come back with the default layout
(Utf8, Binary, List, Date32, the narrowest decimal).

ODF → Arrow is the inverse. Defaults where the ODF type leaves something out:
Timestamp without unit/timezone = ``timestamp("ms", "UTC")`` (so a tz-naive Arrow
timestamp does not round-trip), Time and Duration without unit = milliseconds,
Decimal without encoding = decimal128 up to precision 38, else decimal256. Non-encoding
extra attributes have no Arrow equivalent and are not carried to Arrow.

DDL (`parse_ddl_schema`): each entry of ``ddlSchema`` holds one or more comma-separated
column definitions ``name TYPE [NOT NULL]``; names may be quoted with backticks or
double quotes; type names are case-insensitive. Types::

    BOOLEAN | BOOL                      bool
    TINYINT | BYTE | INT8               int8
    SMALLINT | SHORT | INT16            int16
    INT | INTEGER | INT32               int32
    BIGINT | LONG | INT64               int64
    TINYINT/SMALLINT/INT/BIGINT UNSIGNED, UINT8..UINT64   unsigned ints
    FLOAT | REAL | FLOAT32              float32
    DOUBLE | FLOAT64 | DOUBLE PRECISION float64
    STRING | TEXT | VARCHAR[(n)] | CHAR[(n)]   utf8
    BINARY | BYTEA | BLOB | VARBINARY   binary
    DATE                                date32
    TIMESTAMP | TIMESTAMP_LTZ | TIMESTAMP_NTZ | TIMESTAMPTZ   timestamp("ms", "UTC")
    DECIMAL | NUMERIC [(p[, s])]        decimal128(p, s) (default (10, 0); p > 38 → decimal256)
    ARRAY<T>                            list
    STRUCT<name: T, ...>                struct (the colon is optional)
    MAP<K, V>                           map
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import pyarrow as pa

from fbs.errors import InvalidDdlSchema, InvalidValue, SchemaConversionError
from fbs.model.data import (
    DataField,
    DataSchema,
    DataType,
    DataTypeBinary,
    DataTypeBool,
    DataTypeDate,
    DataTypeDecimal,
    DataTypeDuration,
    DataTypeFloat16,
    DataTypeFloat32,
    DataTypeFloat64,
    DataTypeInt8,
    DataTypeInt16,
    DataTypeInt32,
    DataTypeInt64,
    DataTypeList,
    DataTypeMap,
    DataTypeNull,
    DataTypeOption,
    DataTypeString,
    DataTypeStruct,
    DataTypeTime,
    DataTypeTimestamp,
    DataTypeUInt8,
    DataTypeUInt16,
    DataTypeUInt32,
    DataTypeUInt64,
)
from fbs.model.enums import TimeUnit
from fbs.model.extra import ExtraAttributes

__all__ = [
    "BUFFER_ENCODING_KEY",
    "DATE_ENCODING_KEY",
    "DECIMAL_ENCODING_KEY",
    "ENCODING_KEYS",
    "MAX_DDL_DEPTH",
    "MAX_DDL_LENGTH",
    "arrow_schema_from_data",
    "data_schema_from_arrow",
    "parse_ddl_schema",
    "strip_encoding",
]

BUFFER_ENCODING_KEY: Final = "arrow.apache.org/bufferEncoding"
DATE_ENCODING_KEY: Final = "arrow.apache.org/dateEncoding"
DECIMAL_ENCODING_KEY: Final = "arrow.apache.org/decimalEncoding"
ENCODING_KEYS: Final = frozenset({BUFFER_ENCODING_KEY, DATE_ENCODING_KEY, DECIMAL_ENCODING_KEY})

#: Longest DDL text accepted (all entries together), in characters.
MAX_DDL_LENGTH: Final = 1 << 20
#: Deepest nesting of ARRAY/STRUCT/MAP accepted in DDL and in schema conversions.
MAX_DDL_DEPTH: Final = 64

_MAX_DECIMAL128_PRECISION: Final = 38

_UNITS_TO_ARROW: Final = {
    TimeUnit.Second: "s",
    TimeUnit.Millisecond: "ms",
    TimeUnit.Microsecond: "us",
    TimeUnit.Nanosecond: "ns",
}
_UNITS_FROM_ARROW: Final = {v: k for k, v in _UNITS_TO_ARROW.items()}

_SIMPLE_FROM_ARROW: Final[dict[pa.DataType, DataType]] = {
    pa.null(): DataTypeNull(),
    pa.bool_(): DataTypeBool(),
    pa.int8(): DataTypeInt8(),
    pa.int16(): DataTypeInt16(),
    pa.int32(): DataTypeInt32(),
    pa.int64(): DataTypeInt64(),
    pa.uint8(): DataTypeUInt8(),
    pa.uint16(): DataTypeUInt16(),
    pa.uint32(): DataTypeUInt32(),
    pa.uint64(): DataTypeUInt64(),
    pa.float16(): DataTypeFloat16(),
    pa.float32(): DataTypeFloat32(),
    pa.float64(): DataTypeFloat64(),
    pa.date32(): DataTypeDate(),
}
_SIMPLE_TO_ARROW: Final[dict[type[Any], pa.DataType]] = {
    type(v): k for k, v in _SIMPLE_FROM_ARROW.items()
}


def _contiguous(bits: int) -> dict[str, Any]:
    return {BUFFER_ENCODING_KEY: {"kind": "Contiguous", "offsetBitWidth": bits}}


def _view(bits: int) -> dict[str, Any]:
    return {BUFFER_ENCODING_KEY: {"kind": "View", "offsetBitWidth": bits}}


# -- Arrow → ODF ---------------------------------------------------------------------------


def _unit_of(arrow_type: Any) -> TimeUnit:
    return _UNITS_FROM_ARROW[str(arrow_type.unit)]


def _list_item(t: Any, depth: int) -> DataType:
    item = t.value_field
    return _type_from_arrow(item.type, item.nullable, depth + 1)[0]


def _type_from_arrow(t: pa.DataType, nullable: bool, depth: int) -> tuple[DataType, dict[str, Any]]:
    """The ODF type of ``t`` and the encoding attributes that keep its layout."""
    if depth > MAX_DDL_DEPTH:
        raise SchemaConversionError(f"type nested deeper than {MAX_DDL_DEPTH}")
    inner, enc = _inner_from_arrow(t, depth)
    return (DataTypeOption(inner=inner) if nullable else inner), enc


def _inner_from_arrow(t: pa.DataType, depth: int) -> tuple[DataType, dict[str, Any]]:
    simple = _SIMPLE_FROM_ARROW.get(t)
    if simple is not None:
        return simple, {}
    types = pa.types
    result: tuple[DataType, dict[str, Any]]
    if types.is_timestamp(t):
        result = DataTypeTimestamp(unit=_unit_of(t), timezone=t.tz), {}
    elif types.is_date64(t):
        result = DataTypeDate(), {DATE_ENCODING_KEY: {"unit": "Millisecond"}}
    elif types.is_time(t):
        result = DataTypeTime(unit=_unit_of(t)), {}
    elif types.is_duration(t):
        result = DataTypeDuration(unit=_unit_of(t)), {}
    elif types.is_string(t):
        result = DataTypeString(), _contiguous(32)
    elif types.is_large_string(t):
        result = DataTypeString(), _contiguous(64)
    elif types.is_string_view(t):
        result = DataTypeString(), _view(32)
    elif types.is_fixed_size_binary(t) and not types.is_decimal(t):
        result = DataTypeBinary(fixed_length=t.byte_width), {}
    elif types.is_binary(t):
        result = DataTypeBinary(), _contiguous(32)
    elif types.is_large_binary(t):
        result = DataTypeBinary(), _contiguous(64)
    elif types.is_binary_view(t):
        result = DataTypeBinary(), _view(32)
    elif types.is_decimal128(t) or types.is_decimal256(t):
        bits = 128 if types.is_decimal128(t) else 256
        result = (
            DataTypeDecimal(precision=t.precision, scale=t.scale),
            {DECIMAL_ENCODING_KEY: {"bitWidth": bits}},
        )
    elif types.is_list(t):
        result = DataTypeList(item_type=_list_item(t, depth)), _contiguous(32)
    elif types.is_large_list(t):
        result = DataTypeList(item_type=_list_item(t, depth)), _contiguous(64)
    elif types.is_list_view(t):
        result = DataTypeList(item_type=_list_item(t, depth)), _view(32)
    elif types.is_large_list_view(t):
        result = DataTypeList(item_type=_list_item(t, depth)), _view(64)
    elif types.is_fixed_size_list(t):
        result = DataTypeList(item_type=_list_item(t, depth), fixed_length=t.list_size), {}
    elif types.is_map(t):
        key = _type_from_arrow(t.key_field.type, t.key_field.nullable, depth + 1)[0]
        item = _type_from_arrow(t.item_field.type, t.item_field.nullable, depth + 1)[0]
        result = DataTypeMap(key_type=key, value_type=item, keys_sorted=t.keys_sorted), {}
    elif types.is_struct(t):
        fields = tuple(_field_from_arrow(t.field(i), True, depth + 1) for i in range(t.num_fields))
        result = DataTypeStruct(fields=fields), {}
    else:
        raise SchemaConversionError(f"Arrow type {t} has no ODF schema equivalent")
    return result


def _field_from_arrow(field: pa.Field, strip: bool, depth: int) -> DataField:
    dtype, enc = _type_from_arrow(field.type, field.nullable, depth)
    if strip or not enc:
        return DataField(name=field.name, type=dtype)
    return DataField(name=field.name, type=dtype, extra=ExtraAttributes(enc))


def data_schema_from_arrow(schema: pa.Schema, *, strip_encoding: bool = True) -> DataSchema:
    """The RFC-016 schema of an Arrow schema.

    Args:
        schema: the Arrow schema.
        strip_encoding: leave out the ``arrow.apache.org/*`` layout attributes (kamu does
            when it writes ``SetDataSchema``); keep them for a lossless round trip.

    Raises:
        SchemaConversionError: for types ODF cannot express (dictionary, union, interval,
            run-end encoded, extension types) or nesting deeper than `MAX_DDL_DEPTH`.
    """
    fields = tuple(
        _field_from_arrow(schema.field(i), strip_encoding, 0) for i in range(len(schema))
    )
    return DataSchema(fields=fields)


def strip_encoding(schema: DataSchema) -> DataSchema:
    """``schema`` without the ``arrow.apache.org/*`` encoding attributes (nested too).

    Raises:
        SchemaConversionError: for nesting deeper than `MAX_DDL_DEPTH`.
    """
    return DataSchema(fields=tuple(_strip_field(f, 0) for f in schema.fields), extra=schema.extra)


def _strip_field(field: DataField, depth: int) -> DataField:
    if depth > MAX_DDL_DEPTH:
        raise SchemaConversionError(f"type nested deeper than {MAX_DDL_DEPTH}")
    extra = field.extra
    if extra is not None:
        rest = {k: v for k, v in extra.attributes.items() if k not in ENCODING_KEYS}
        extra = ExtraAttributes(rest) if rest else None
    return DataField(name=field.name, type=_strip_type(field.type, depth), extra=extra)


def _strip_type(t: DataType, depth: int) -> DataType:
    if isinstance(t, DataTypeOption):
        return DataTypeOption(inner=_strip_type(t.inner, depth + 1))
    if isinstance(t, DataTypeStruct):
        return DataTypeStruct(fields=tuple(_strip_field(f, depth + 1) for f in t.fields))
    return t


# -- ODF → Arrow ---------------------------------------------------------------------------


def _encoding(extra: ExtraAttributes | None, key: str) -> dict[str, Any] | None:
    if extra is None:
        return None
    value = extra.attributes.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SchemaConversionError(f"{key} must be an object, got {value!r}")
    return value


def _buffer_layout(extra: ExtraAttributes | None) -> tuple[str, int]:
    enc = _encoding(extra, BUFFER_ENCODING_KEY)
    if enc is None:
        return "Contiguous", 32
    kind = enc.get("kind")
    bits = enc.get("offsetBitWidth", 32)
    kind = {"contiguous": "Contiguous", "view": "View"}.get(str(kind).lower(), kind)
    if kind not in ("Contiguous", "View") or bits not in (32, 64):
        raise SchemaConversionError(f"unsupported {BUFFER_ENCODING_KEY} {enc!r}")
    return kind, bits


def _arrow_unit(unit: TimeUnit | None) -> str:
    return _UNITS_TO_ARROW[unit if unit is not None else TimeUnit.Millisecond]


def _type_to_arrow(t: DataType, extra: ExtraAttributes | None, depth: int) -> tuple[Any, bool]:
    """``(arrow type, nullable)`` of an ODF type; ``extra`` holds the field's encoding."""
    if depth > MAX_DDL_DEPTH:
        raise SchemaConversionError(f"type nested deeper than {MAX_DDL_DEPTH}")
    if isinstance(t, DataTypeOption):
        if isinstance(t.inner, DataTypeOption):
            raise SchemaConversionError("Option of Option has no Arrow equivalent")
        return _type_to_arrow(t.inner, extra, depth + 1)[0], True
    simple = _SIMPLE_TO_ARROW.get(type(t))
    if isinstance(t, DataTypeDate):
        enc = _encoding(extra, DATE_ENCODING_KEY)
        unit = (enc or {}).get("unit", "Day")
        if unit not in ("Day", "Millisecond"):
            raise SchemaConversionError(f"unsupported {DATE_ENCODING_KEY} {enc!r}")
        return (pa.date64() if unit == "Millisecond" else pa.date32()), False
    if simple is not None:
        return simple, False
    return _complex_to_arrow(t, extra, depth), False


def _complex_to_arrow(t: DataType, extra: ExtraAttributes | None, depth: int) -> Any:
    if isinstance(t, DataTypeTimestamp):
        return pa.timestamp(_arrow_unit(t.unit), t.timezone if t.timezone is not None else "UTC")
    if isinstance(t, DataTypeTime):
        unit = _arrow_unit(t.unit)
        return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    if isinstance(t, DataTypeDuration):
        return pa.duration(_arrow_unit(t.unit))
    if isinstance(t, DataTypeString):
        kind, bits = _buffer_layout(extra)
        if kind == "View":
            if bits != 32:
                raise SchemaConversionError("String views have 32-bit offsets only")
            return pa.string_view()
        return pa.large_string() if bits == 64 else pa.string()
    if isinstance(t, DataTypeBinary):
        if t.fixed_length is not None:
            return pa.binary(t.fixed_length)
        kind, bits = _buffer_layout(extra)
        if kind == "View":
            if bits != 32:
                raise SchemaConversionError("Binary views have 32-bit offsets only")
            return pa.binary_view()
        return pa.large_binary() if bits == 64 else pa.binary()
    if isinstance(t, DataTypeDecimal):
        enc = _encoding(extra, DECIMAL_ENCODING_KEY)
        width: Any = (enc or {}).get("bitWidth")
        if width is None:
            width = 128 if t.precision <= _MAX_DECIMAL128_PRECISION else 256
        try:
            if width == 128:
                return pa.decimal128(t.precision, t.scale)
            if width == 256:
                return pa.decimal256(t.precision, t.scale)
        except (ValueError, pa.ArrowInvalid) as e:
            raise SchemaConversionError(f"invalid decimal {t}: {e}") from None
        raise SchemaConversionError(f"unsupported {DECIMAL_ENCODING_KEY} {enc!r}")
    if isinstance(t, DataTypeList):
        item_type, item_nullable = _type_to_arrow(t.item_type, None, depth + 1)
        item = pa.field("item", item_type, nullable=item_nullable)
        if t.fixed_length is not None:
            return pa.list_(item, t.fixed_length)
        kind, bits = _buffer_layout(extra)
        if kind == "View":
            return pa.large_list_view(item) if bits == 64 else pa.list_view(item)
        return pa.large_list(item) if bits == 64 else pa.list_(item)
    if isinstance(t, DataTypeMap):
        key_type, key_nullable = _type_to_arrow(t.key_type, None, depth + 1)
        if key_nullable:
            raise SchemaConversionError("Map keys cannot be optional in Arrow")
        value_type, value_nullable = _type_to_arrow(t.value_type, None, depth + 1)
        value = pa.field("value", value_type, nullable=value_nullable)
        return pa.map_(key_type, value, keys_sorted=bool(t.keys_sorted))
    if isinstance(t, DataTypeStruct):
        return pa.struct([_field_to_arrow(f, depth + 1) for f in t.fields])
    raise SchemaConversionError(f"ODF type {t!r} has no Arrow equivalent")


def _field_to_arrow(field: DataField, depth: int) -> pa.Field:
    arrow_type, nullable = _type_to_arrow(field.type, field.extra, depth)
    return pa.field(field.name, arrow_type, nullable=nullable)


def arrow_schema_from_data(schema: DataSchema) -> pa.Schema:
    """The Arrow schema of an RFC-016 schema (inverse of `data_schema_from_arrow`).

    Raises:
        SchemaConversionError: for malformed encoding attributes, ``Option{Option}``,
            optional map keys, or nesting deeper than `MAX_DDL_DEPTH`.
    """
    return pa.schema([_field_to_arrow(f, 0) for f in schema.fields])


# -- DDL -----------------------------------------------------------------------------------

_TOKEN_RE: Final = re.compile(
    r"\s*(?:(?P<quoted>`(?:[^`]|``)*`|\"(?:[^\"]|\"\")*\")|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>\d+)|(?P<punct>[<>(),:]))"
)

_PLAIN_TYPES: Final[dict[str, Callable[[], Any]]] = {
    "BOOLEAN": pa.bool_,
    "BOOL": pa.bool_,
    "TINYINT": pa.int8,
    "BYTE": pa.int8,
    "INT8": pa.int8,
    "SMALLINT": pa.int16,
    "SHORT": pa.int16,
    "INT16": pa.int16,
    "INT": pa.int32,
    "INTEGER": pa.int32,
    "INT32": pa.int32,
    "BIGINT": pa.int64,
    "LONG": pa.int64,
    "INT64": pa.int64,
    "UINT8": pa.uint8,
    "UINT16": pa.uint16,
    "UINT32": pa.uint32,
    "UINT64": pa.uint64,
    "FLOAT": pa.float32,
    "REAL": pa.float32,
    "FLOAT32": pa.float32,
    "DOUBLE": pa.float64,
    "FLOAT64": pa.float64,
    "STRING": pa.string,
    "TEXT": pa.string,
    "VARCHAR": pa.string,
    "CHAR": pa.string,
    "BINARY": pa.binary,
    "VARBINARY": pa.binary,
    "BYTEA": pa.binary,
    "BLOB": pa.binary,
    "DATE": pa.date32,
    "TIMESTAMP": lambda: pa.timestamp("ms", "UTC"),
    "TIMESTAMP_LTZ": lambda: pa.timestamp("ms", "UTC"),
    "TIMESTAMP_NTZ": lambda: pa.timestamp("ms", "UTC"),
    "TIMESTAMPTZ": lambda: pa.timestamp("ms", "UTC"),
}
_UNSIGNED: Final = {"TINYINT": pa.uint8, "SMALLINT": pa.uint16, "INT": pa.uint32}
_UNSIGNED_ALIASES: Final = {"INTEGER": "INT", "BIGINT": "BIGINT"}


class _Ddl:
    """Recursive-descent parser over the tokens of one ``ddlSchema`` entry."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(self._tokenize(text))
        self.pos = 0

    def _tokenize(self, text: str) -> Iterator[tuple[str, str]]:
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                return
            m = _TOKEN_RE.match(text, pos)
            if m is None or m.end() == pos:
                raise self.error(f"unexpected character {text[pos:].lstrip()[:1]!r}")
            kind = m.lastgroup
            assert kind is not None
            yield kind, m.group(kind)
            pos = m.end()

    def error(self, reason: str) -> InvalidDdlSchema:
        return InvalidDdlSchema(f"bad DDL column definition {self.text!r}: {reason}")

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self, what: str) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise self.error(f"expected {what}, got end of text")
        self.pos += 1
        return tok

    def expect(self, punct: str) -> None:
        kind, value = self.next(repr(punct))
        if kind != "punct" or value != punct:
            raise self.error(f"expected {punct!r}, got {value!r}")

    def at_punct(self, punct: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "punct" and tok[1] == punct

    def at_word(self, word: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "word" and tok[1].upper() == word

    def name(self) -> str:
        kind, value = self.next("a column name")
        if kind == "quoted":
            q = value[0]
            return value[1:-1].replace(q + q, q)
        if kind != "word":
            raise self.error(f"expected a column name, got {value!r}")
        return value

    def number(self) -> int:
        kind, value = self.next("a number")
        if kind != "number":
            raise self.error(f"expected a number, got {value!r}")
        return int(value)

    def columns(self) -> list[pa.Field]:
        fields = [self.column()]
        while self.at_punct(","):
            self.pos += 1
            fields.append(self.column())
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return fields

    def column(self) -> pa.Field:
        name = self.name()
        arrow_type = self.type(0)
        nullable = True
        if self.at_word("NOT"):
            self.pos += 1
            if not self.at_word("NULL"):
                raise self.error("expected NULL after NOT")
            self.pos += 1
            nullable = False
        elif self.at_word("NULL"):
            self.pos += 1
        return pa.field(name, arrow_type, nullable=nullable)

    def type(self, depth: int) -> Any:
        if depth > MAX_DDL_DEPTH:
            raise self.error(f"types nested deeper than {MAX_DDL_DEPTH}")
        kind, value = self.next("a type")
        if kind != "word":
            raise self.error(f"expected a type, got {value!r}")
        upper = value.upper()
        if upper == "ARRAY":
            self.expect("<")
            item = self.type(depth + 1)
            self.expect(">")
            return pa.list_(item)
        if upper == "MAP":
            self.expect("<")
            key = self.type(depth + 1)
            self.expect(",")
            val = self.type(depth + 1)
            self.expect(">")
            return pa.map_(key, val)
        if upper == "STRUCT":
            return self.struct(depth)
        if upper in ("DECIMAL", "NUMERIC"):
            return self.decimal()
        if upper == "DOUBLE" and self.at_word("PRECISION"):
            self.pos += 1
        if upper in ("VARCHAR", "CHAR", "VARBINARY") and self.at_punct("("):
            self.pos += 1
            self.number()
            self.expect(")")
        base = _UNSIGNED_ALIASES.get(upper, upper)
        if self.at_word("UNSIGNED"):
            self.pos += 1
            if base == "BIGINT":
                return pa.uint64()
            if base not in _UNSIGNED:
                raise self.error(f"{value} cannot be UNSIGNED")
            return _UNSIGNED[base]()
        factory = _PLAIN_TYPES.get(upper)
        if factory is None:
            raise self.error(f"unknown type {value!r}")
        return factory()

    def struct(self, depth: int) -> Any:
        self.expect("<")
        fields = []
        while True:
            name = self.name()
            if self.at_punct(":"):
                self.pos += 1
            fields.append(pa.field(name, self.type(depth + 1)))
            if self.at_punct(">"):
                self.pos += 1
                return pa.struct(fields)
            self.expect(",")

    def decimal(self) -> Any:
        precision, scale = 10, 0
        if self.at_punct("("):
            self.pos += 1
            precision = self.number()
            if self.at_punct(","):
                self.pos += 1
                scale = self.number()
            self.expect(")")
        if not (1 <= precision <= 76) or scale > precision:
            raise self.error(f"invalid DECIMAL({precision}, {scale})")
        if precision > _MAX_DECIMAL128_PRECISION:
            return pa.decimal256(precision, scale)
        return pa.decimal128(precision, scale)


def parse_ddl_schema(ddl: Sequence[str]) -> pa.Schema:
    """Parse ``ddlSchema`` column definitions into an Arrow schema.

    Args:
        ddl: entries such as ``"event_time TIMESTAMP"`` or ``"a INT, b STRING"`` (see the
            module docstring for the grammar and type names).

    Raises:
        InvalidDdlSchema: naming the definition that does not parse, an unknown type,
            a duplicate column name, an empty schema, or text over `MAX_DDL_LENGTH`.
    """
    if isinstance(ddl, str):
        ddl = [ddl]
    if sum(len(entry) for entry in ddl) > MAX_DDL_LENGTH:
        raise InvalidDdlSchema(f"DDL schema longer than {MAX_DDL_LENGTH} characters")
    fields: list[pa.Field] = []
    seen: set[str] = set()
    for entry in ddl:
        if not isinstance(entry, str) or not entry.strip():
            raise InvalidDdlSchema(f"empty DDL column definition {entry!r}")
        for field in _Ddl(entry).columns():
            if field.name in seen:
                raise InvalidDdlSchema(f"duplicate column {field.name!r} in DDL schema")
            seen.add(field.name)
            fields.append(field)
    if not fields:
        raise InvalidDdlSchema("DDL schema has no columns")
    try:
        return pa.schema(fields)
    except (pa.ArrowInvalid, ValueError, InvalidValue) as e:
        raise InvalidDdlSchema(f"DDL schema is not valid: {e}") from None
