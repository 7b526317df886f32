"""Arrow values built from buffers equal pyarrow's conversions of the same Python values."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from fbs.arrow_values import binary_scalar, int_array_range, int_scalar, scalar_int_value


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (-5, pa.int8()),
        (70000, pa.int32()),
        (-(2**63), pa.int64()),
        (2**64 - 1, pa.uint64()),
        (255, pa.uint8()),
        (19000, pa.date32()),
        (1_700_000_000_123, pa.timestamp("ms", "UTC")),
        (7, pa.timestamp("us")),
    ],
)
def test_int_scalar_equals_pa_scalar(value: int, dtype: pa.DataType) -> None:
    made = int_scalar(value, dtype)
    assert made.type == dtype
    assert made.equals(pa.array([value], dtype)[0])
    assert scalar_int_value(made) == value


@pytest.mark.parametrize("dtype", [pa.large_binary(), pa.binary(), pa.string(), pa.large_string()])
def test_binary_scalar(dtype: pa.DataType) -> None:
    made = binary_scalar(b"abc", dtype)
    assert made.type == dtype
    assert made.equals(pa.scalar(b"abc", pa.binary()).cast(dtype))


@pytest.mark.parametrize(("start", "count"), [(0, 0), (0, 1), (5, 10), (-3, 7), (2**40, 3)])
def test_int_array_range(start: int, count: int) -> None:
    made = int_array_range(start, count, pa.int64())
    assert made.equals(pa.array(range(start, start + count), pa.int64()))


def test_building_values_imports_no_pandas() -> None:
    code = (
        "import sys, pyarrow as pa\n"
        "from fbs.arrow_values import binary_scalar, int_array_range, int_scalar\n"
        "int_scalar(3, pa.timestamp('ms', 'UTC')); binary_scalar(b'x'); "
        "int_array_range(4, 100, pa.int64())\n"
        "assert 'pandas' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_null_scalar_value() -> None:
    assert scalar_int_value(pa.scalar(None, pa.int64())) is None
