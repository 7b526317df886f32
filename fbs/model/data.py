"""Logical data types and schemas (RFC-016): `DataType` union, `DataField`, `DataSchema`."""

from __future__ import annotations

from fbs.frozen import model
from fbs.model import schema as s
from fbs.model.enums import TimeUnit
from fbs.model.extra import ExtraAttributes

__all__ = [
    "DATA_TYPE",
    "DataField",
    "DataSchema",
    "DataType",
    "DataTypeBinary",
    "DataTypeBool",
    "DataTypeDate",
    "DataTypeDecimal",
    "DataTypeDuration",
    "DataTypeFloat16",
    "DataTypeFloat32",
    "DataTypeFloat64",
    "DataTypeInt8",
    "DataTypeInt16",
    "DataTypeInt32",
    "DataTypeInt64",
    "DataTypeList",
    "DataTypeMap",
    "DataTypeNull",
    "DataTypeOption",
    "DataTypeString",
    "DataTypeStruct",
    "DataTypeTime",
    "DataTypeTimestamp",
    "DataTypeUInt8",
    "DataTypeUInt16",
    "DataTypeUInt32",
    "DataTypeUInt64",
]


@s.table(s.scalar("fixed_length", s.UINT64, optional=True))
@model
class DataTypeBinary:
    """Bytes; ``fixed_length`` set for fixed-size binary."""

    fixed_length: int | None = None


@s.table()
@model
class DataTypeBool:
    """Boolean."""


@s.table()
@model
class DataTypeDate:
    """Calendar date."""


@s.table(s.scalar("precision", s.UINT32), s.scalar("scale", s.INT32))
@model
class DataTypeDecimal:
    """Fixed-point decimal."""

    precision: int
    scale: int


@s.table(s.enum_field("unit", TimeUnit, s.INT16, optional=True))
@model
class DataTypeDuration:
    """Elapsed time."""

    unit: TimeUnit | None = None


@s.table()
@model
class DataTypeFloat16:
    """Half-precision float."""


@s.table()
@model
class DataTypeFloat32:
    """Single-precision float."""


@s.table()
@model
class DataTypeFloat64:
    """Double-precision float."""


@s.table()
@model
class DataTypeInt8:
    """Signed 8-bit integer."""


@s.table()
@model
class DataTypeInt16:
    """Signed 16-bit integer."""


@s.table()
@model
class DataTypeInt32:
    """Signed 32-bit integer."""


@s.table()
@model
class DataTypeInt64:
    """Signed 64-bit integer."""


@s.table()
@model
class DataTypeUInt8:
    """Unsigned 8-bit integer."""


@s.table()
@model
class DataTypeUInt16:
    """Unsigned 16-bit integer."""


@s.table()
@model
class DataTypeUInt32:
    """Unsigned 32-bit integer."""


@s.table()
@model
class DataTypeUInt64:
    """Unsigned 64-bit integer."""


@s.table(
    s.union_field("item_type", "DataType"),
    s.scalar("fixed_length", s.UINT64, optional=True),
)
@model
class DataTypeList:
    """List of ``item_type``; ``fixed_length`` for fixed-size lists."""

    item_type: DataType
    fixed_length: int | None = None


@s.table(
    s.union_field("key_type", "DataType"),
    s.union_field("value_type", "DataType"),
    s.scalar("keys_sorted", s.BOOL, optional=True),
)
@model
class DataTypeMap:
    """Map from ``key_type`` to ``value_type``."""

    key_type: DataType
    value_type: DataType
    keys_sorted: bool | None = None


@s.table()
@model
class DataTypeNull:
    """The null type."""


@s.table(s.union_field("inner", "DataType"))
@model
class DataTypeOption:
    """Nullable ``inner``."""

    inner: DataType


@s.table(s.vec_table("fields", "DataField"))
@model
class DataTypeStruct:
    """Nested record."""

    fields: tuple[DataField, ...]


@s.table(s.enum_field("unit", TimeUnit, s.INT16, optional=True))
@model
class DataTypeTime:
    """Time of day."""

    unit: TimeUnit | None = None


@s.table(
    s.enum_field("unit", TimeUnit, s.INT16, optional=True),
    s.string("timezone", optional=True),
)
@model
class DataTypeTimestamp:
    """Instant; absent unit/timezone mean Millisecond/UTC (never normalized)."""

    unit: TimeUnit | None = None
    timezone: str | None = None


@s.table()
@model
class DataTypeString:
    """UTF-8 string."""


@s.table(
    s.string("name"),
    s.union_field("type", "DataType"),
    s.sub_table("extra", "ExtraAttributes", optional=True),
)
@model
class DataField:
    """A named, typed column."""

    name: str
    type: DataType
    extra: ExtraAttributes | None = None


@s.table(
    s.vec_table("fields", "DataField"),
    s.sub_table("extra", "ExtraAttributes", optional=True),
)
@model
class DataSchema:
    """A dataset schema."""

    fields: tuple[DataField, ...]
    extra: ExtraAttributes | None = None


DataType = (
    DataTypeBinary
    | DataTypeBool
    | DataTypeDate
    | DataTypeDecimal
    | DataTypeDuration
    | DataTypeFloat16
    | DataTypeFloat32
    | DataTypeFloat64
    | DataTypeInt8
    | DataTypeInt16
    | DataTypeInt32
    | DataTypeInt64
    | DataTypeUInt8
    | DataTypeUInt16
    | DataTypeUInt32
    | DataTypeUInt64
    | DataTypeList
    | DataTypeMap
    | DataTypeNull
    | DataTypeOption
    | DataTypeStruct
    | DataTypeTime
    | DataTypeTimestamp
    | DataTypeString
)

DATA_TYPE = s.union(
    "DataType",
    "DataType",
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
    DataTypeUInt8,
    DataTypeUInt16,
    DataTypeUInt32,
    DataTypeUInt64,
    DataTypeList,
    DataTypeMap,
    DataTypeNull,
    DataTypeOption,
    DataTypeStruct,
    DataTypeTime,
    DataTypeTimestamp,
    DataTypeString,
)
