"""Arrow scalars and arrays built from raw buffers, without pyarrow's Python conversion.

pyarrow imports pandas (when installed) the first time it converts a Python value:
``pa.scalar``, ``pa.array`` of a list or range, ``.as_py()`` of a timestamp, a compute
function given a plain ``int``. That import costs 0.2-0.5 s, several times the work of
a small CLI command and a quarter of the budget of a 1M-row ingest. The hot
paths of ingest and of the logical hash build their constants here instead: the values
are packed with `struct` and wrapped with ``pa.Array.from_buffers``, which converts
nothing.
"""

from __future__ import annotations

import struct
from typing import Final

import pyarrow as pa

__all__ = ["binary_scalar", "int_array_range", "int_scalar", "scalar_int_value"]

_INT_FORMATS: Final = {8: "b", 16: "h", 32: "i", 64: "q"}
_UINT_FORMATS: Final = {8: "B", 16: "H", 32: "I", 64: "Q"}


def _format(dtype: pa.DataType) -> str:
    """The `struct` letter of a fixed-width integer-backed type (ints, dates, timestamps)."""
    width = int(dtype.bit_width)
    if pa.types.is_unsigned_integer(dtype):
        return _UINT_FORMATS[width]
    return _INT_FORMATS[width]


def int_scalar(value: int, dtype: pa.DataType) -> pa.Scalar:
    """A scalar of an integer-backed type (int*, uint*, date32, timestamp...) holding ``value``.

    Raises:
        KeyError: for a type that is not 8/16/32/64 bits wide.
        struct.error: if ``value`` does not fit the type's width.
    """
    data = pa.py_buffer(struct.pack("<" + _format(dtype), value))
    return pa.Array.from_buffers(dtype, 1, [None, data])[0]


def binary_scalar(value: bytes, dtype: pa.DataType | None = None) -> pa.Scalar:
    """A ``large_binary`` (or the given binary/large binary type) scalar holding ``value``."""
    dtype = pa.large_binary() if dtype is None else dtype
    fmt = "<2q" if pa.types.is_large_binary(dtype) or pa.types.is_large_string(dtype) else "<2i"
    offsets = pa.py_buffer(struct.pack(fmt, 0, len(value)))
    return pa.Array.from_buffers(dtype, 1, [None, offsets, pa.py_buffer(value)])[0]


def int_array_range(start: int, count: int, dtype: pa.DataType) -> pa.Array:
    """``start, start + 1, ..., start + count - 1`` as an array of an integer type."""
    fmt = _format(dtype)
    if count <= 0:
        return pa.Array.from_buffers(dtype, 0, [None, pa.py_buffer(b"")])
    # A run of ones summed: one kernel, no Python loop, no conversion.
    import pyarrow.compute as pc

    ones = pa.Array.from_buffers(
        dtype, count, [None, pa.py_buffer(struct.pack("<" + fmt, 1) * count)]
    )
    return pc.add(pc.cumulative_sum(ones), int_scalar(start - 1, dtype))


def scalar_int_value(scalar: pa.Scalar) -> int | None:
    """The integer behind an integer-backed scalar (days, ms...), ``None`` when null.

    ``.value`` of a temporal scalar is its raw integer; ``.as_py()`` would convert it (and
    import pandas for timestamps). Integer scalars have no ``.value``: their ``.as_py()``
    converts nothing.
    """
    if not scalar.is_valid:
        return None
    if pa.types.is_integer(scalar.type):
        return int(scalar.as_py())
    return int(scalar.value)
