"""`engine.parquet_merge` and `engine.thrift_compact` on files written by pyarrow."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineInternalError
from engine.parquet_merge import SequenceColumn, delta_sequence_page, merge_parts, part_files
from engine.thrift_compact import T_BINARY, ThriftError, decode_struct, encode_struct

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


def _footer(path: Path) -> bytes:
    data = path.read_bytes()
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n : -8]


def _parts(tmp_path: Path, table: pa.Table, sizes: list[int], group: int) -> list[Path]:
    paths, start = [], 0
    for i, n in enumerate(sizes):
        path = tmp_path / f"part-{i:05d}-x.snappy.parquet"
        pq.write_table(table.slice(start, n), path, row_group_size=group)
        paths.append(path)
        start += n
    return paths


NESTED = pa.table(
    {
        "a": pa.array(range(1000), pa.int64()),
        "s": pa.array([None if i % 7 == 0 else f"v{i % 13}" for i in range(1000)]),
        "st": pa.array([{"x": i, "y": [i, -i]} for i in range(1000)]),
        "d": pa.array([i / 3 for i in range(1000)]),
    }
)


def test_footer_round_trip(tmp_path: Path) -> None:
    path = _parts(tmp_path, NESTED, [1000], 128)[0]
    footer = _footer(path)
    meta, end = decode_struct(footer)
    assert end == len(footer)
    assert encode_struct(meta) == footer


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=300))
def test_thrift_garbage_is_a_typed_error(data: bytes) -> None:
    try:
        meta, _ = decode_struct(data)
    except ThriftError:
        return
    assert decode_struct(encode_struct(meta))[0] == meta


def test_merge_copies_fields_and_synthesizes_sequences(tmp_path: Path) -> None:
    sizes = [300, 0, 450, 250]
    parts = _parts(tmp_path, NESTED, sizes, 100)
    offset = SequenceColumn(name="offset", physical="INT64", first=10**12, step=1)
    op = SequenceColumn(name="op", physical="INT32", first=0, step=0)
    st_ = SequenceColumn(
        name="system_time",
        physical="INT64",
        first=1_700_000_000_123,
        step=0,
        timestamp_millis=True,
    )
    rows = merge_parts(parts, tmp_path / "out", [offset, op, st_, 2, 0, 1, 3])
    assert rows == 1000
    out = pq.read_table(tmp_path / "out")
    assert out.column_names == ["offset", "op", "system_time", "st", "a", "s", "d"]
    assert out.schema.field("system_time").type == pa.timestamp("ms", tz="UTC")
    assert not out.schema.field("offset").nullable
    assert out["offset"].to_pylist() == list(range(10**12, 10**12 + 1000))
    assert out["op"].to_pylist() == [0] * 1000
    assert set(out["system_time"].cast(pa.int64()).to_pylist()) == {1_700_000_000_123}
    for name in ("st", "a", "s", "d"):
        assert out[name].equals(NESTED[name]), name
    meta = pq.ParquetFile(tmp_path / "out").metadata
    # Every non-empty row group of the parts, in order (pyarrow wrote one empty one).
    assert meta.num_row_groups == 11
    assert sum(pq.ParquetFile(p).metadata.num_row_groups for p in parts) == 12
    first = 10**12
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(0).statistics
        assert (stats.min, stats.max) == (first, first + group.num_rows - 1)
        first += group.num_rows
        assert group.column(0).encodings == ("DELTA_BINARY_PACKED",)


def test_merge_refuses_bad_input(tmp_path: Path) -> None:
    parts = _parts(tmp_path, NESTED, [10, 10], 5)
    with pytest.raises(EngineInternalError, match="no part files"):
        merge_parts([], tmp_path / "o1", [0])
    with pytest.raises(EngineInternalError, match="out of range"):
        merge_parts(parts, tmp_path / "o2", [4])
    assert not (tmp_path / "o2").exists()
    other = tmp_path / "part-00009-y.parquet"
    pq.write_table(NESTED.select(["a"]).slice(0, 3), other)
    with pytest.raises(EngineInternalError, match="different schemas"):
        merge_parts([*parts, other], tmp_path / "o3", [0])
    junk = tmp_path / "part-00010-z.parquet"
    junk.write_bytes(b"PAR1" + b"\xff" * 40 + (30).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(EngineInternalError, match="footer"):
        merge_parts([junk], tmp_path / "o4", [0])
    # A footer that decodes but whose fields have the wrong types: typed error, no output.
    meta, _ = decode_struct(_footer(parts[0]))
    meta[3] = (T_BINARY, b"not a row count")
    footer = encode_struct(meta)
    body = parts[0].read_bytes()
    n = int.from_bytes(body[-8:-4], "little")
    odd = tmp_path / "part-00011-w.parquet"
    odd.write_bytes(body[: -8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(EngineInternalError, match="bad Parquet footer"):
        merge_parts([parts[0], odd], tmp_path / "o7", [0])
    assert not (tmp_path / "o7").exists()
    overflow = SequenceColumn(name="o", physical="INT32", first=2**31 - 5, step=1)
    with pytest.raises(EngineInternalError, match="overflow"):
        merge_parts(parts, tmp_path / "o5", [overflow, 0])
    merge_parts(parts, tmp_path / "o6", [0])
    with pytest.raises(FileExistsError):
        merge_parts(parts, tmp_path / "o6", [0])
