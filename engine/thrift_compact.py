"""A schema-less reader and writer of Thrift's compact protocol (Parquet footers).

Parquet's footer and page headers are Thrift structs in the compact protocol. The engine
only needs to copy them with a few fields changed, so structs are decoded generically:
a `TStruct` maps field ids to ``(type, value)`` pairs and encodes back to the same bytes
(fields in ascending id order, as every Thrift writer emits them). Unknown fields are
kept, so footers from newer writers survive the round trip.

Values by type: bool, int (byte/i16/i32/i64), float (double), bytes (binary/string),
`TList` (list and set), `TMap`, `TStruct`. Malformed input raises `ThriftError`; the
reader never reads past its buffer and limits nesting to `MAX_DEPTH`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "MAX_DEPTH",
    "T_BINARY",
    "T_BOOL",
    "T_BYTE",
    "T_DOUBLE",
    "T_I16",
    "T_I32",
    "T_I64",
    "T_LIST",
    "T_MAP",
    "T_SET",
    "T_STRUCT",
    "TList",
    "TMap",
    "TStruct",
    "ThriftError",
    "decode_struct",
    "encode_struct",
    "encode_uvarint",
    "zigzag",
]

# Compact-protocol type ids (booleans in field headers use 1 = true / 2 = false).
T_BOOL: Final = 1
T_BYTE: Final = 3
T_I16: Final = 4
T_I32: Final = 5
T_I64: Final = 6
T_DOUBLE: Final = 7
T_BINARY: Final = 8
T_LIST: Final = 9
T_SET: Final = 10
T_MAP: Final = 11
T_STRUCT: Final = 12
_FALSE: Final = 2
#: Deepest nesting of structs/containers accepted (Parquet footers use < 10).
MAX_DEPTH: Final = 64


class ThriftError(ValueError):
    """Bytes that are not a well-formed compact-protocol struct."""


@dataclass(slots=True)
class TList:
    """A list (or set) of elements of one type."""

    elem_type: int
    items: list[object] = field(default_factory=list)


@dataclass(slots=True)
class TMap:
    """A map; ``items`` holds (key, value) pairs in wire order."""

    key_type: int
    value_type: int
    items: list[tuple[object, object]] = field(default_factory=list)


class TStruct(dict[int, tuple[int, object]]):
    """A struct: field id -> (type, value)."""

    def get_value(self, fid: int, default: object = None) -> object:
        """The value of field ``fid``, or ``default``."""
        entry = self.get(fid)
        return default if entry is None else entry[1]

    def int_value(self, fid: int, default: int = 0) -> int:
        """Field ``fid`` as an int (``default`` when absent)."""
        value = self.get_value(fid, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ThriftError(f"field {fid} is not an integer")
        return value

    def struct_value(self, fid: int) -> TStruct | None:
        """Field ``fid`` as a struct, None when absent."""
        value = self.get_value(fid)
        if value is None:
            return None
        if not isinstance(value, TStruct):
            raise ThriftError(f"field {fid} is not a struct")
        return value

    def list_value(self, fid: int) -> TList | None:
        """Field ``fid`` as a list, None when absent."""
        value = self.get_value(fid)
        if value is None:
            return None
        if not isinstance(value, TList):
            raise ThriftError(f"field {fid} is not a list")
        return value

    def copy(self) -> TStruct:
        """A shallow copy (values shared)."""
        return TStruct(self)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise ThriftError("truncated")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ThriftError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ThriftError("truncated")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def value(self, ctype: int, depth: int) -> object:
        if depth > MAX_DEPTH:
            raise ThriftError("nesting too deep")
        if ctype in (T_BOOL, _FALSE):
            return self.byte() == 1
        if ctype == T_BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if ctype in (T_I16, T_I32, T_I64):
            return self.zigzag()
        if ctype == T_DOUBLE:
            return float(struct.unpack("<d", self.take(8))[0])
        if ctype == T_BINARY:
            return self.take(self.varint())
        if ctype in (T_LIST, T_SET):
            header = self.byte()
            size = header >> 4
            if size == 15:
                size = self.varint()
            elem = header & 0x0F
            if size > len(self.buf) - self.pos:
                raise ThriftError("list longer than the input")
            return TList(elem, [self.value(elem, depth + 1) for _ in range(size)])
        if ctype == T_MAP:
            size = self.varint()
            if size == 0:
                return TMap(0, 0, [])
            if size > len(self.buf) - self.pos:
                raise ThriftError("map longer than the input")
            types = self.byte()
            kt, vt = types >> 4, types & 0x0F
            return TMap(
                kt,
                vt,
                [(self.value(kt, depth + 1), self.value(vt, depth + 1)) for _ in range(size)],
            )
        if ctype == T_STRUCT:
            return self.struct(depth + 1)
        raise ThriftError(f"unknown type {ctype}")

    def struct(self, depth: int) -> TStruct:
        if depth > MAX_DEPTH:
            raise ThriftError("nesting too deep")
        out = TStruct()
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return out
            ctype = header & 0x0F
            delta = header >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if ctype in (T_BOOL, _FALSE):
                out[fid] = (T_BOOL, ctype == T_BOOL)
            else:
                out[fid] = (ctype, self.value(ctype, depth))


def decode_struct(buf: bytes | memoryview, pos: int = 0) -> tuple[TStruct, int]:
    """Decode one struct starting at ``pos``; returns it and the position after it.

    Raises:
        ThriftError: for malformed or truncated input.
    """
    reader = _Reader(buf, pos)
    return reader.struct(0), reader.pos


def zigzag(n: int) -> int:
    """ZigZag mapping of a signed integer to an unsigned one (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    return n * 2 if n >= 0 else -n * 2 - 1


def encode_uvarint(n: int) -> bytes:
    """Unsigned LEB128 of ``n`` (no upper bound: ZigZag'd int64 values need 64 bits)."""
    out = bytearray()
    _uvarint(out, n)
    return bytes(out)


def _uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, n: int) -> None:
    _uvarint(out, zigzag(n))


def _write_value(out: bytearray, ctype: int, value: object) -> None:
    if ctype == T_BOOL:
        out.append(1 if value else _FALSE)
    elif ctype == T_BYTE:
        out.append(int(value) & 0xFF)  # type: ignore[call-overload]
    elif ctype in (T_I16, T_I32, T_I64):
        _zigzag(out, int(value))  # type: ignore[call-overload]
    elif ctype == T_DOUBLE:
        out += struct.pack("<d", value)
    elif ctype == T_BINARY:
        data = bytes(value)  # type: ignore[call-overload]
        _uvarint(out, len(data))
        out += data
    elif ctype in (T_LIST, T_SET):
        if not isinstance(value, TList):
            raise ThriftError("list field without a TList value")
        n = len(value.items)
        if n < 15:
            out.append((n << 4) | value.elem_type)
        else:
            out.append(0xF0 | value.elem_type)
            _uvarint(out, n)
        for item in value.items:
            _write_value(out, value.elem_type, item)
    elif ctype == T_MAP:
        if not isinstance(value, TMap):
            raise ThriftError("map field without a TMap value")
        _uvarint(out, len(value.items))
        if value.items:
            out.append((value.key_type << 4) | value.value_type)
            for k, v in value.items:
                _write_value(out, value.key_type, k)
                _write_value(out, value.value_type, v)
    elif ctype == T_STRUCT:
        if not isinstance(value, TStruct):
            raise ThriftError("struct field without a TStruct value")
        _write_struct(out, value)
    else:
        raise ThriftError(f"unknown type {ctype}")


def _write_struct(out: bytearray, s: TStruct) -> None:
    last = 0
    for fid in sorted(s):
        ctype, value = s[fid]
        wire = (1 if value else _FALSE) if ctype == T_BOOL else ctype
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | wire)
        else:
            out.append(wire)
            _zigzag(out, fid)
        if ctype != T_BOOL:
            _write_value(out, ctype, value)
        last = fid
    out.append(0)


def encode_struct(s: TStruct) -> bytes:
    """The compact-protocol bytes of ``s`` (fields in ascending id order)."""
    out = bytearray()
    _write_struct(out, s)
    return bytes(out)
