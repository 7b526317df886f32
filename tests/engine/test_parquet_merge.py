"""Pure parts of `engine.parquet_merge` (the merge itself runs in the engine tests)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineInternalError
from engine.parquet_merge import SequenceColumn, delta_sequence_page, part_files

INT64 = st.integers(min_value=-(2**62), max_value=2**62)


def _arrow_delta_bytes(values: list[int]) -> bytes:
    """A Parquet file with ``values`` DELTA_BINARY_PACKED by Arrow C++ (uncompressed)."""
    buf = io.BytesIO()
    schema = pa.schema([pa.field("x", pa.int64(), nullable=False)])
    pq.write_table(
        pa.table({"x": pa.array(values, pa.int64())}, schema=schema),
        buf,
        use_dictionary=False,
        column_encoding={"x": "DELTA_BINARY_PACKED"},
        compression="NONE",
        data_page_version="1.0",
        write_statistics=False,
    )
    return buf.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    first=INT64,
    step=st.integers(min_value=-1000, max_value=1000),
    count=st.integers(min_value=1, max_value=2000),
)
def test_delta_page_equals_arrow_encoder(first: int, step: int, count: int) -> None:
    # An independent encoder (Arrow C++) writes exactly our bytes for the same values.
    values = [first + step * i for i in range(count)]
    assert delta_sequence_page(first, step, count) in _arrow_delta_bytes(values)


@pytest.mark.parametrize("count", [1, 2, 256, 257, 513, 19_999])
def test_delta_page_block_count(count: int) -> None:
    # Arrow starts a new page every 20,000 rows: compare single-page sizes only.
    page = delta_sequence_page(7, 1, count)
    assert page in _arrow_delta_bytes(list(range(7, 7 + count)))
    with pytest.raises(ValueError):
        delta_sequence_page(0, 1, 0)


def test_sequence_column_bounds() -> None:
    col = SequenceColumn(name="offset", physical="INT64", first=2**63 - 10, step=1)
    col.check(10)
    with pytest.raises(EngineInternalError, match="overflow INT64"):
        col.check(11)
    op = SequenceColumn(name="op", physical="INT32", first=0, step=0)
    op.check(10**12)
    assert op.value_at(5) == 0
    with pytest.raises(EngineInternalError, match="overflow INT32"):
        SequenceColumn(name="x", physical="INT32", first=2**31, step=0).check(1)


def test_part_files_in_partition_order(tmp_path: Path) -> None:
    names = [
        "part-00010-abc.snappy.parquet",
        "part-00002-abc.snappy.parquet",
        "part-100000-abc.snappy.parquet",
        "part-00000-abc.snappy.parquet",
        "_SUCCESS",
        ".part-00001-abc.snappy.parquet.crc",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [p.name.split("-")[1] for p in part_files(tmp_path)] == [
        "00000",
        "00002",
        "00010",
        "100000",
    ]
