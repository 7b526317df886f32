"""Eager, bounds-checked flatbuffers decoder driven by the model descriptors.

Every offset, length and count read from the buffer is checked against the buffer size
and the `DecodeLimits` before it is used; every failure is a `MalformedBlock` (or
`BlockLimitExceeded`). The flatc-generated readers are *not* used here: they trust
their input.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import BlockLimitExceeded, FbsError, MalformedBlock
from fbs.limits import DEFAULT_LIMITS, DecodeLimits
from fbs.model.schema import FieldDesc, FieldKind, TableDesc, UnionDesc, schema_of
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp

__all__ = ["decode_root"]

_K = FieldKind
_U8: Final = struct.Struct("<B")
_U16: Final = struct.Struct("<H")
_I32: Final = struct.Struct("<i")
_U32: Final = struct.Struct("<I")
_TS: Final = struct.Struct("<iHHII")
_SCALAR_STRUCTS: Final = {
    fmt: struct.Struct(fmt) for fmt in ("<?", "<B", "<h", "<i", "<I", "<q", "<Q")
}

#: Inline size of a field of each kind (offsets are 4 bytes).
_INLINE_SIZE: Final = {k: 4 for k in FieldKind} | {_K.TIMESTAMP: 16}


class _Reader:
    __slots__ = ("buf", "bytes_left", "limits", "n", "objects_left")

    def __init__(self, buf: bytes, limits: DecodeLimits) -> None:
        self.buf = buf
        self.n = len(buf)
        self.limits = limits
        self.objects_left = limits.max_total_objects
        self.bytes_left = limits.max_decoded_bytes

    # -- primitives ----------------------------------------------------------------------

    def _count(self, nbytes: int = 0) -> None:
        self.objects_left -= 1
        self.bytes_left -= nbytes
        if self.objects_left < 0:
            raise BlockLimitExceeded(
                f"more than {self.limits.max_total_objects} objects in one buffer"
            )
        if self.bytes_left < 0:
            raise BlockLimitExceeded(
                f"more than {self.limits.max_decoded_bytes} decoded bytes in one buffer"
            )

    def u32(self, pos: int) -> int:
        if pos < 0 or pos + 4 > self.n:
            raise MalformedBlock(f"offset {pos} outside the {self.n}-byte buffer")
        return int(_U32.unpack_from(self.buf, pos)[0])

    def deref(self, pos: int) -> int:
        """Follow the uoffset stored at ``pos``."""
        target = pos + self.u32(pos)
        if target >= self.n:
            raise MalformedBlock(f"offset at {pos} points past the end of the buffer")
        return target

    def blob(self, pos: int, terminated: bool) -> bytes:
        """A byte vector or (``terminated``) a string at the offset stored at ``pos``."""
        start = self.deref(pos)
        length = self.u32(start)
        if length > self.limits.max_string_len:
            raise BlockLimitExceeded(f"{length}-byte string/vector exceeds the limit")
        end = start + 4 + length
        if end + (1 if terminated else 0) > self.n:
            raise MalformedBlock("string/vector runs past the end of the buffer")
        if terminated and self.buf[end] != 0:
            raise MalformedBlock("string is not NUL-terminated")
        self._count(length)
        return self.buf[start + 4 : end]

    def string(self, pos: int) -> str:
        try:
            return self.blob(pos, True).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedBlock("string is not valid UTF-8") from None

    def vector(self, pos: int) -> tuple[int, int]:
        """(position of the first element, element count) of an offset vector."""
        start = self.deref(pos)
        count = self.u32(start)
        if count > self.limits.max_vector_len:
            raise BlockLimitExceeded(f"vector of {count} elements exceeds the limit")
        if start + 4 + 4 * count > self.n:
            raise MalformedBlock("vector runs past the end of the buffer")
        self._count()
        return start + 4, count

    # -- tables --------------------------------------------------------------------------

    def slots(self, pos: int, depth: int) -> tuple[int, int, int]:
        """Validate the table at ``pos``: returns (vtable pos, slot count, inline size)."""
        if depth > self.limits.max_nesting_depth:
            raise BlockLimitExceeded(f"tables nested deeper than {self.limits.max_nesting_depth}")
        self._count()
        if pos < 0 or pos + 4 > self.n:
            raise MalformedBlock(f"table at {pos} outside the buffer")
        vt = pos - int(_I32.unpack_from(self.buf, pos)[0])
        if vt < 0 or vt + 4 > self.n:
            raise MalformedBlock(f"vtable of table at {pos} outside the buffer")
        vt_len, obj_len = _U16.unpack_from(self.buf, vt)[0], _U16.unpack_from(self.buf, vt + 2)[0]
        if vt_len < 4 or vt_len % 2 or vt + vt_len > self.n:
            raise MalformedBlock(f"invalid vtable length {vt_len}")
        if obj_len < 4 or pos + obj_len > self.n:
            raise MalformedBlock(f"invalid table size {obj_len}")
        return vt, (vt_len - 4) // 2, obj_len

    def field_pos(self, pos: int, vt: int, nslots: int, obj_len: int, slot: int, size: int) -> int:
        """Absolute position of a slot's inline data, or 0 if absent."""
        if slot >= nslots:
            return 0
        off = int(_U16.unpack_from(self.buf, vt + 4 + 2 * slot)[0])
        if off == 0:
            return 0
        if off < 4 or off + size > obj_len:
            raise MalformedBlock(f"field offset {off} outside its table")
        return pos + off

    def table(self, pos: int, desc: TableDesc, depth: int) -> Any:
        vt, nslots, obj_len = self.slots(pos, depth)
        kwargs: dict[str, Any] = {}
        for f in desc.fields:
            k = f.kind
            fp = self.field_pos(pos, vt, nslots, obj_len, f.slot, self._size(f))
            if k is _K.UNION:
                tp = self.field_pos(pos, vt, nslots, obj_len, f.slot - 1, 1)
                code = self.buf[tp] if tp else 0
                if code == 0:
                    value = None
                else:
                    if not fp:
                        raise MalformedBlock(f"{desc.name}.{f.name}: union type without value")
                    value = self.union_member(fp, code, f.union, depth)
            elif k is _K.SCALAR or k is _K.ENUM:
                value = self.scalar(fp, f, desc) if fp else f.default
            elif not fp:
                value = None
            elif k is _K.STRING:
                value = self.string(fp)
            elif k is _K.MULTIHASH:
                value = Multihash.from_bytes(self.blob(fp, False))
            elif k is _K.DATASET_ID:
                value = DatasetId.from_bytes(self.blob(fp, False))
            elif k is _K.BYTES:
                value = self.blob(fp, False)
            elif k is _K.JSON:
                try:
                    value = json.loads(self.string(fp))
                except (ValueError, RecursionError):
                    raise MalformedBlock(f"{desc.name}.{f.name}: invalid JSON") from None
            elif k is _K.TIMESTAMP:
                year, ordinal, _pad, secs, nanos = _TS.unpack_from(self.buf, fp)
                value = Timestamp.from_struct_parts(year, ordinal, secs, nanos)
            elif k is _K.TABLE:
                value = self.table(self.deref(fp), f.table, depth + 1)
            elif k is _K.VEC_STRING:
                first, count = self.vector(fp)
                value = tuple(self.string(first + 4 * i) for i in range(count))
            elif k is _K.VEC_TABLE:
                sub = f.table
                first, count = self.vector(fp)
                value = tuple(
                    self.table(self.deref(first + 4 * i), sub, depth + 1) for i in range(count)
                )
            elif k is _K.VEC_UNION:
                first, count = self.vector(fp)
                value = tuple(
                    self.wrapper(self.deref(first + 4 * i), f.union, depth + 1)
                    for i in range(count)
                )
            else:  # pragma: no cover - every kind is handled above
                raise MalformedBlock(f"unsupported field kind {k}")
            if value is None and not f.optional:
                raise MalformedBlock(f"{desc.name}.{f.name} is required but absent")
            kwargs[f.name] = value
        return desc.cls(**kwargs)

    @staticmethod
    def _size(f: FieldDesc) -> int:
        if f.scalar is not None:
            return f.scalar.size
        return _INLINE_SIZE[f.kind]

    def scalar(self, fp: int, f: FieldDesc, desc: TableDesc) -> Any:
        st = f.scalar
        assert st is not None
        if st.is_bool:
            raw = self.buf[fp]
            if raw > 1:
                raise MalformedBlock(f"{desc.name}.{f.name}: invalid bool byte {raw}")
            return raw == 1
        value = _SCALAR_STRUCTS[st.fmt].unpack_from(self.buf, fp)[0]
        if f.kind is _K.ENUM:
            assert f.enum_type is not None
            try:
                return f.enum_type(value)
            except ValueError:
                raise MalformedBlock(f"{desc.name}.{f.name}: unknown enum value {value}") from None
        return value

    def union_member(self, fp: int, code: int, u: UnionDesc, depth: int) -> Any:
        variant = u.by_code.get(code)
        if variant is None:
            raise MalformedBlock(f"unknown {u.name} type code {code}")
        return self.table(self.deref(fp), schema_of(variant.cls), depth + 1)

    def wrapper(self, pos: int, u: UnionDesc, depth: int) -> Any:
        vt, nslots, obj_len = self.slots(pos, depth)
        tp = self.field_pos(pos, vt, nslots, obj_len, 0, 1)
        vp = self.field_pos(pos, vt, nslots, obj_len, 1, 4)
        code = self.buf[tp] if tp else 0
        if code == 0 or not vp:
            raise MalformedBlock(f"empty {u.name} wrapper in a vector")
        return self.union_member(vp, code, u, depth)


def decode_root(
    data: bytes | bytearray | memoryview, desc: TableDesc, limits: DecodeLimits = DEFAULT_LIMITS
) -> Any:
    """Decode a finished flatbuffer whose root table is described by ``desc``.

    Raises:
        MalformedBlock: for any invalid input (including invalid multihash / DID /
            timestamp / JSON values); `BlockLimitExceeded` when a limit is hit.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    if len(data) > limits.max_block_bytes:
        raise BlockLimitExceeded(f"{len(data)}-byte buffer exceeds {limits.max_block_bytes}")
    if len(data) < 8:
        raise MalformedBlock("buffer too short for a flatbuffer")
    reader = _Reader(data, limits)
    try:
        return reader.table(reader.deref(0), desc, 1)
    except MalformedBlock:
        raise
    except FbsError as e:  # invalid hash / DID / timestamp / JSON object inside the buffer
        raise MalformedBlock(f"invalid value in {desc.name}: {e}") from None
    except (struct.error, IndexError, RecursionError) as e:
        # Defence in depth: the checks above should make these unreachable.
        raise MalformedBlock(f"corrupt {desc.name} buffer: {e}") from None
