"""Schema-driven flatbuffers encoder reproducing kamu's block bytes.

Rules (docs/odf-format.md §1.3): per table, pass 1 creates every out-of-line child in
field order (depth first), pass 2 starts the table and adds the fields in slot order
(a union's ``_type`` byte just before its offset); vectors build their elements first,
in order, and prepend the offsets in reverse; non-optional scalars equal to their
default are elided, optional scalars are always written when present; the Timestamp
struct is placed with alignment 1 (block format 2) or 4 (format 3).
"""

from __future__ import annotations

from typing import Any, Final

import flatbuffers
from flatbuffers import number_types as N

from fbs.codec import SUPPORTED_VERSIONS
from fbs.did import DatasetId
from fbs.errors import InvalidTimestamp, InvalidValue
from fbs.limits import MAX_NESTING_DEPTH
from fbs.model.extra import canonical_json
from fbs.model.schema import FieldKind, TableDesc, UnionDesc, schema_of
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp

__all__ = ["SUPPORTED_VERSIONS", "TableEncoder", "timestamp_alignment"]


_K = FieldKind
_PREPEND_SLOT: Final = {
    "bool": "PrependBoolSlot",
    "uint8": "PrependUint8Slot",
    "int16": "PrependInt16Slot",
    "int32": "PrependInt32Slot",
    "uint32": "PrependUint32Slot",
    "int64": "PrependInt64Slot",
    "uint64": "PrependUint64Slot",
}


def timestamp_alignment(version: int) -> int:
    """Alignment of the Timestamp struct in block format ``version``.

    Raises:
        InvalidValue: for a version other than 2 or 3.
    """
    if version == 2:
        return 1
    if version == 3:
        return 4
    raise InvalidValue(f"unsupported block format version {version}; use 2 or 3")


def _where(desc: TableDesc, name: str) -> str:
    return f"{desc.name}.{name}"


class TableEncoder:
    """Encodes model values into one flatbuffers `Builder` (single use per buffer)."""

    __slots__ = ("_b", "_ts_align")

    def __init__(self, version: int = 2, initial_size: int = 1024) -> None:
        self._ts_align = timestamp_alignment(version)
        self._b = flatbuffers.Builder(initial_size)

    def finish(self, value: object) -> bytes:
        """Encode ``value`` as the root table and return the finished buffer.

        Raises:
            InvalidValue: if the value does not fit the schema.
            InvalidTimestamp: for a timestamp outside the storable range.
        """
        try:
            desc = schema_of(value)
        except KeyError:
            raise InvalidValue(f"{type(value).__name__} is not a schema table") from None
        root = self._table(value, desc, 1)
        self._b.Finish(root)
        return bytes(self._b.Output())

    # -- tables ---------------------------------------------------------------------------

    def _table(self, value: object, desc: TableDesc, depth: int) -> int:
        if depth > MAX_NESTING_DEPTH:
            raise InvalidValue(f"value nested deeper than {MAX_NESTING_DEPTH} tables")
        values = [getattr(value, f.name) for f in desc.fields]
        # Children before the parent, in field order; then the table, fields in slot order.
        offsets = self._children(values, desc, depth)
        return self._slots(values, offsets, desc)

    def _children(self, values: list[Any], desc: TableDesc, depth: int) -> list[Any]:
        b = self._b
        offsets: list[Any] = [None] * len(values)
        for i, f in enumerate(desc.fields):
            v = values[i]
            if v is None:
                if not f.optional:
                    raise InvalidValue(f"{_where(desc, f.name)} is required")
                continue
            k = f.kind
            if k is _K.STRING:
                offsets[i] = self._string(v, desc, f.name)
            elif k is _K.MULTIHASH:
                if not isinstance(v, Multihash):
                    raise InvalidValue(f"{_where(desc, f.name)} must be a Multihash")
                offsets[i] = b.CreateByteVector(v.to_bytes())
            elif k is _K.DATASET_ID:
                if not isinstance(v, DatasetId):
                    raise InvalidValue(f"{_where(desc, f.name)} must be a DatasetId")
                offsets[i] = b.CreateByteVector(v.to_bytes())
            elif k is _K.BYTES:
                if not isinstance(v, bytes | bytearray):
                    raise InvalidValue(f"{_where(desc, f.name)} must be bytes")
                offsets[i] = b.CreateByteVector(bytes(v))
            elif k is _K.JSON:
                offsets[i] = self._string(canonical_json(v), desc, f.name)
            elif k is _K.TABLE:
                sub = f.table
                if type(v) is not sub.cls:
                    raise InvalidValue(f"{_where(desc, f.name)} must be a {sub.name}")
                offsets[i] = self._table(v, sub, depth + 1)
            elif k is _K.UNION:
                offsets[i] = self._union(v, f.union, depth, desc, f.name)
            elif k is _K.VEC_STRING:
                items = self._seq(v, desc, f.name)
                offsets[i] = self._vector([self._string(s, desc, f.name) for s in items])
            elif k is _K.VEC_TABLE:
                offsets[i] = self._table_vector(v, f.table, depth, desc, f.name)
            elif k is _K.VEC_UNION:
                offsets[i] = self._union_vector(v, f.union, depth, desc, f.name)
        return offsets

    def _table_vector(
        self, value: object, sub: TableDesc, depth: int, desc: TableDesc, name: str
    ) -> int:
        elems = []
        for item in self._seq(value, desc, name):
            if type(item) is not sub.cls:
                raise InvalidValue(f"{_where(desc, name)} items must be {sub.name}")
            elems.append(self._table(item, sub, depth + 1))
        return self._vector(elems)

    def _union_vector(
        self, value: object, u: UnionDesc, depth: int, desc: TableDesc, name: str
    ) -> int:
        b = self._b
        elems = []
        for item in self._seq(value, desc, name):
            code, off = self._union(item, u, depth, desc, name)
            # One wrapper table per element, right after its member.
            b.StartObject(2)
            b.PrependUint8Slot(0, code, 0)
            b.PrependUOffsetTRelativeSlot(1, off, 0)
            elems.append(b.EndObject())
        return self._vector(elems)

    def _slots(self, values: list[Any], offsets: list[Any], desc: TableDesc) -> int:
        b = self._b
        b.StartObject(desc.num_slots)
        for i, f in enumerate(desc.fields):
            v = values[i]
            if v is None:
                continue
            k = f.kind
            if k is _K.SCALAR:
                self._scalar_slot(f.slot, v, f.scalar, f.default, desc, f.name)
            elif k is _K.ENUM:
                et = f.enum_type
                if et is None or not isinstance(v, et):
                    raise InvalidValue(f"{_where(desc, f.name)} must be a {et}")
                d = None if f.default is None else int(f.default)
                self._scalar_slot(f.slot, int(v), f.scalar, d, desc, f.name)
            elif k is _K.TIMESTAMP:
                self._timestamp(f.slot, v, desc, f.name)
            elif k is _K.UNION:
                code, off = offsets[i]
                b.PrependUint8Slot(f.slot - 1, code, 0)
                b.PrependUOffsetTRelativeSlot(f.slot, off, 0)
            else:
                b.PrependUOffsetTRelativeSlot(f.slot, offsets[i], 0)
        return int(b.EndObject())

    def _union(
        self, value: object, u: UnionDesc, depth: int, desc: TableDesc, name: str
    ) -> tuple[int, int]:
        variant = u.by_cls.get(type(value))
        if variant is None:
            raise InvalidValue(
                f"{_where(desc, name)}: {type(value).__name__} is not a {u.name} variant"
            )
        return variant.code, self._table(value, schema_of(variant.cls), depth + 1)

    # -- leaves ---------------------------------------------------------------------------

    def _string(self, value: object, desc: TableDesc, name: str) -> int:
        if not isinstance(value, str):
            raise InvalidValue(f"{_where(desc, name)} must be str, got {type(value).__name__}")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidValue(f"{_where(desc, name)} is not encodable as UTF-8") from None
        return int(self._b.CreateString(data))

    @staticmethod
    def _seq(value: object, desc: TableDesc, name: str) -> tuple[Any, ...] | list[Any]:
        if not isinstance(value, tuple | list):
            raise InvalidValue(f"{_where(desc, name)} must be a tuple")
        return value

    def _vector(self, offsets: list[int]) -> int:
        b = self._b
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return int(b.EndVector())

    def _scalar_slot(
        self, slot: int, value: object, st: Any, default: Any, desc: TableDesc, name: str
    ) -> None:
        if st.is_bool:
            if type(value) is not bool:
                raise InvalidValue(f"{_where(desc, name)} must be bool")
        elif type(value) is not int or not (st.lo <= value <= st.hi):
            if not (isinstance(value, int) and not isinstance(value, bool)):
                raise InvalidValue(f"{_where(desc, name)} must be an int")
            if not (st.lo <= value <= st.hi):
                raise InvalidValue(f"{_where(desc, name)}={value} out of {st.name} range")
            value = int(value)
        getattr(self._b, _PREPEND_SLOT[st.name])(slot, value, default)

    def _timestamp(self, slot: int, value: object, desc: TableDesc, name: str) -> None:
        if not isinstance(value, Timestamp):
            raise InvalidValue(f"{_where(desc, name)} must be a Timestamp")
        try:
            year, ordinal, secs, nanos = value.to_struct_parts()
        except InvalidTimestamp as e:
            raise InvalidValue(f"{_where(desc, name)}: {e}") from None
        b = self._b
        # Prep() aligns for the whole struct; Place()/Pad() then write without re-aligning,
        # which is what lets us emit kamu's unaligned (alignment 1) layout of format 2.
        b.Prep(self._ts_align, 16)
        b.Place(nanos, N.Uint32Flags)
        b.Place(secs, N.Uint32Flags)
        b.Pad(2)
        b.Place(ordinal, N.Uint16Flags)
        b.Place(year, N.Int32Flags)
        b.Slot(slot)
