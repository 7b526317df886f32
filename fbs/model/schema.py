"""Schema descriptors: the reflection API over the model classes.

Every model class is registered with `table(...)`, which records a `TableDesc` listing
its fields in flatbuffers slot order (the calls are generated with the classes from
fbs/schema/odf.fbs by ``scripts/gen-model``). Codecs (binary, YAML) and validators walk
these descriptors generically instead of hard-coding per-table logic.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final, TypeVar

from fbs.value import Value, set_field

__all__ = [
    "BOOL",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT32",
    "UINT64",
    "FieldDesc",
    "FieldKind",
    "ScalarType",
    "TableDesc",
    "UnionDesc",
    "VariantDesc",
    "all_tables",
    "all_unions",
    "schema_of",
    "table",
    "table_by_name",
    "union",
    "union_of",
]


class FieldKind(enum.Enum):
    """How a field is represented in the flatbuffer and in the model."""

    STRING = "string"  #: ``string`` -> `str`
    MULTIHASH = "multihash"  #: ``[ubyte]`` binary multihash -> `Multihash`
    DATASET_ID = "dataset_id"  #: ``[ubyte]`` binary DID -> `DatasetId`
    BYTES = "bytes"  #: ``[ubyte]`` raw bytes -> `bytes`
    JSON = "json"  #: ``string`` holding a compact JSON object -> `dict`
    SCALAR = "scalar"  #: inline scalar -> `int` / `bool`
    ENUM = "enum"  #: inline integer enum -> `enum.IntEnum` member
    TIMESTAMP = "timestamp"  #: inline ``Timestamp`` struct -> `Timestamp`
    TABLE = "table"  #: nested table -> model instance
    UNION = "union"  #: ``<name>_type`` ubyte + offset -> variant instance
    VEC_STRING = "vec_string"  #: ``[string]`` -> `tuple[str, ...]`
    VEC_TABLE = "vec_table"  #: ``[Table]`` -> `tuple[Table, ...]`
    VEC_UNION = "vec_union"  #: ``[Wrapper]`` of a union -> `tuple[variant, ...]`


class ScalarType(Value):
    """A flatbuffers scalar type: name, ``struct`` format, inclusive range."""

    __slots__ = ("fmt", "hi", "lo", "name", "size")

    name: str
    fmt: str
    size: int
    lo: int
    hi: int

    def __init__(self, name: str, fmt: str, size: int, lo: int, hi: int) -> None:
        set_field(self, "name", name)
        set_field(self, "fmt", fmt)
        set_field(self, "size", size)
        set_field(self, "lo", lo)
        set_field(self, "hi", hi)

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"


BOOL: Final = ScalarType("bool", "<?", 1, 0, 1)
UINT8: Final = ScalarType("uint8", "<B", 1, 0, 2**8 - 1)
INT16: Final = ScalarType("int16", "<h", 2, -(2**15), 2**15 - 1)
INT32: Final = ScalarType("int32", "<i", 4, -(2**31), 2**31 - 1)
UINT32: Final = ScalarType("uint32", "<I", 4, 0, 2**32 - 1)
INT64: Final = ScalarType("int64", "<q", 8, -(2**63), 2**63 - 1)
UINT64: Final = ScalarType("uint64", "<Q", 8, 0, 2**64 - 1)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class FieldDesc(Value):
    """One field of a table, in slot order.

    Attributes:
        name: Python attribute name (= schema snake_case name).
        camel: camelCase name used by YAML / JSON manifests.
        slot: vtable slot of the value (for unions: of the offset; the type byte is at
            ``slot - 1``, see `type_slot`).
        kind: representation, see `FieldKind`.
        optional: True if the model allows ``None`` (absent in the flatbuffer).
        scalar: scalar type (SCALAR and ENUM kinds).
        default: flatbuffers default of a non-optional scalar/enum (not written when equal).
        enum_type: the `enum.IntEnum` class (ENUM kind).
        ref: referenced table name (TABLE, VEC_TABLE) or union name (UNION, VEC_UNION).
        wrapper: wrapper table name for VEC_UNION (``PrepStepWrapper``, ``MetadataEventWrapper``).
    """

    __slots__ = (
        "camel",
        "default",
        "enum_type",
        "kind",
        "name",
        "optional",
        "ref",
        "scalar",
        "slot",
        "wrapper",
    )

    name: str
    camel: str
    slot: int
    kind: FieldKind
    optional: bool
    scalar: ScalarType | None
    default: Any
    enum_type: type[enum.IntEnum] | None
    ref: str | None
    wrapper: str | None

    def __init__(
        self,
        name: str,
        camel: str,
        slot: int,
        kind: FieldKind,
        optional: bool,
        scalar: ScalarType | None = None,
        default: Any = None,
        enum_type: type[enum.IntEnum] | None = None,
        ref: str | None = None,
        wrapper: str | None = None,
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "camel", camel)
        set_field(self, "slot", slot)
        set_field(self, "kind", kind)
        set_field(self, "optional", optional)
        set_field(self, "scalar", scalar)
        set_field(self, "default", default)
        set_field(self, "enum_type", enum_type)
        set_field(self, "ref", ref)
        set_field(self, "wrapper", wrapper)

    @property
    def type_slot(self) -> int | None:
        """Slot of the ``_type`` byte of a union field, else None."""
        return self.slot - 1 if self.kind is FieldKind.UNION else None

    @property
    def table(self) -> TableDesc:
        """Descriptor of the referenced table (TABLE / VEC_TABLE)."""
        if self.ref is None or self.kind not in (FieldKind.TABLE, FieldKind.VEC_TABLE):
            raise TypeError(f"field {self.name} does not reference a table")
        return table_by_name(self.ref)

    @property
    def union(self) -> UnionDesc:
        """Descriptor of the referenced union (UNION / VEC_UNION)."""
        if self.ref is None or self.kind not in (FieldKind.UNION, FieldKind.VEC_UNION):
            raise TypeError(f"field {self.name} does not reference a union")
        return union_of(self.ref)


class TableDesc(Value):
    """A table: schema name, model class, fields in slot order, number of vtable slots."""

    __slots__ = ("cls", "fields", "name", "num_slots")

    name: str
    cls: type
    fields: tuple[FieldDesc, ...]
    num_slots: int

    def __init__(self, name: str, cls: type, fields: tuple[FieldDesc, ...], num_slots: int) -> None:
        set_field(self, "name", name)
        set_field(self, "cls", cls)
        set_field(self, "fields", fields)
        set_field(self, "num_slots", num_slots)


class VariantDesc(Value):
    """One member of a union: type code (1-based), model class, YAML tag (e.g. ``Csv``)."""

    __slots__ = ("cls", "code", "tag")

    code: int
    cls: type
    tag: str

    def __init__(self, code: int, cls: type, tag: str) -> None:
        set_field(self, "code", code)
        set_field(self, "cls", cls)
        set_field(self, "tag", tag)


class UnionDesc(Value):
    """A union: schema name and its variants in type-code order (compared, hashed and
    shown by these two; ``by_code``, ``by_cls`` and ``by_tag`` index the variants)."""

    __slots__ = ("by_cls", "by_code", "by_tag", "name", "variants")

    name: str
    variants: tuple[VariantDesc, ...]
    by_code: dict[int, VariantDesc]
    by_cls: dict[type, VariantDesc]
    by_tag: dict[str, VariantDesc]

    def __init__(
        self,
        name: str,
        variants: tuple[VariantDesc, ...],
        by_code: dict[int, VariantDesc],
        by_cls: dict[type, VariantDesc],
        by_tag: dict[str, VariantDesc],
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "variants", variants)
        set_field(self, "by_code", by_code)
        set_field(self, "by_cls", by_cls)
        set_field(self, "by_tag", by_tag)

    def __eq__(self, other: object) -> bool:
        if type(other) is UnionDesc:
            return (self.name, self.variants) == (other.name, other.variants)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.name, self.variants))

    def __repr__(self) -> str:
        return f"UnionDesc(name={self.name!r}, variants={self.variants!r})"

    def variant_of(self, value: object) -> VariantDesc:
        """The variant describing ``value``'s class.

        Raises:
            KeyError: if ``value`` is not a member of this union.
        """
        return self.by_cls[type(value)]


# -- field spec helpers -------------------------------------------------------------------
#
# `table()` receives these partial specs and assigns slots in declaration order.


def _spec(
    name: str,
    kind: FieldKind,
    optional: bool,
    scalar: ScalarType | None = None,
    default: Any = None,
    enum_type: type[enum.IntEnum] | None = None,
    *,
    ref: str | None = None,
    wrapper: str | None = None,
) -> FieldDesc:
    """A field as declared to `table`: its slot (and camel name) are assigned there."""
    return FieldDesc(name, "", -1, kind, optional, scalar, default, enum_type, ref, wrapper)


def string(name: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.STRING, optional)


def multihash(name: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.MULTIHASH, optional)


def dataset_id(name: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.DATASET_ID, optional)


def raw_bytes(name: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.BYTES, optional)


def json_object(name: str) -> FieldDesc:
    return _spec(name, FieldKind.JSON, False)


def scalar(name: str, st: ScalarType, *, optional: bool = False) -> FieldDesc:
    return _spec(
        name, FieldKind.SCALAR, optional, st, None if optional else (False if st.is_bool else 0)
    )


def enum_field(
    name: str, et: type[enum.IntEnum], st: ScalarType, *, optional: bool = False
) -> FieldDesc:
    first = next(iter(et))
    return _spec(name, FieldKind.ENUM, optional, st, None if optional else first, et)


def timestamp(name: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.TIMESTAMP, optional)


def sub_table(name: str, ref: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.TABLE, optional, ref=ref)


def union_field(name: str, ref: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.UNION, optional, ref=ref)


def vec_string(name: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.VEC_STRING, optional)


def vec_table(name: str, ref: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.VEC_TABLE, optional, ref=ref)


def vec_union(name: str, ref: str, wrapper: str, *, optional: bool = False) -> FieldDesc:
    return _spec(name, FieldKind.VEC_UNION, optional, ref=ref, wrapper=wrapper)


# -- registries ---------------------------------------------------------------------------

_TABLES: dict[str, TableDesc] = {}
_TABLES_BY_CLS: dict[type, TableDesc] = {}
_UNIONS: dict[str, UnionDesc] = {}

_C = TypeVar("_C", bound=type)


def table(*specs: FieldDesc, name: str | None = None) -> Callable[[_C], _C]:
    """Class decorator registering a class as the model of a schema table.

    ``specs`` are its fields in schema order, which are the keyword arguments of the
    class (the generated classes are written from the same schema; tests check the
    signatures of all).

    Raises:
        TypeError: if a table of that name is registered already.
    """

    def wrap(cls: _C) -> _C:
        tname = name or cls.__name__
        fields: list[FieldDesc] = []
        slot = 0
        for s in specs:
            if s.kind is FieldKind.UNION:
                slot += 1  # the `_type` byte occupies the slot before the value
            fields.append(
                FieldDesc(
                    name=s.name,
                    camel=_camel(s.name),
                    slot=slot,
                    kind=s.kind,
                    optional=s.optional,
                    scalar=s.scalar,
                    default=s.default,
                    enum_type=s.enum_type,
                    ref=s.ref,
                    wrapper=s.wrapper,
                )
            )
            slot += 1
        desc = TableDesc(tname, cls, tuple(fields), slot)
        if tname in _TABLES:
            raise TypeError(f"table {tname} registered twice")
        _TABLES[tname] = desc
        _TABLES_BY_CLS[cls] = desc
        return cls

    return wrap


def union(name: str, *members: type) -> UnionDesc:
    """Register a union; type codes are 1-based positions, tags drop the union's name.

    (``ReadStepCsv`` of ``ReadStep`` is tagged ``Csv``; ``AddData`` of ``MetadataEvent``
    keeps its name.)
    """
    variants = []
    for i, cls in enumerate(members, start=1):
        tag = cls.__name__.removeprefix(name) or cls.__name__
        variants.append(VariantDesc(i, cls, tag))
    desc = UnionDesc(
        name,
        tuple(variants),
        {v.code: v for v in variants},
        {v.cls: v for v in variants},
        {v.tag: v for v in variants},
    )
    _UNIONS[name] = desc
    return desc


def schema_of(cls_or_value: object) -> TableDesc:
    """Descriptor of a model class (or of an instance's class).

    Raises:
        KeyError: if it is not a registered model table.
    """
    cls = cls_or_value if isinstance(cls_or_value, type) else type(cls_or_value)
    return _TABLES_BY_CLS[cls]


def table_by_name(name: str) -> TableDesc:
    """Descriptor of the table named ``name`` in the schema (e.g. ``"AddData"``)."""
    return _TABLES[name]


def union_of(name: str) -> UnionDesc:
    """Descriptor of the union named ``name`` (e.g. ``"ReadStep"``)."""
    return _UNIONS[name]


def all_tables() -> tuple[TableDesc, ...]:
    """Every registered table, in registration order."""
    return tuple(_TABLES.values())


def all_unions() -> tuple[UnionDesc, ...]:
    """Every registered union, in registration order."""
    return tuple(_UNIONS.values())
