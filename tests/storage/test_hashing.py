"""Physical hash of files and logical hash of Parquet files (as kamu reads them)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from fbs.errors import UnsupportedDataType
from fbs.logical_hash import logical_hash
from fbs.multiformats import ARROW0_SHA3_256, SHA3_256
from storage.errors import InvalidDataFile, ObjectTooLarge
from storage.hashing import (
    KAMU_BATCH_ROWS,
    arrow_rs_schema,
    logical_hash_parquet,
    physical_hash_file,
)

# -- physical hash ----------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 7, 1 << 20])
def test_physical_hash_of_path_and_reader(tmp_path: Path, chunk_size: int) -> None:
    data = bytes(range(256)) * 41 + b"tail"
    path = tmp_path / "part.parquet"
    path.write_bytes(data)
    expected = hashlib.sha3_256(data).digest()
    mh, size = physical_hash_file(path, chunk_size=chunk_size)
    assert (mh.code, mh.digest, size) == (SHA3_256, expected, len(data))
    assert physical_hash_file(str(path), chunk_size).multihash == mh
    assert physical_hash_file(io.BytesIO(data), chunk_size) == (mh, len(data))


def test_physical_hash_reader_without_readinto() -> None:
    class ReadOnly:
        def __init__(self, data: bytes) -> None:
            self._stream = io.BytesIO(data)

        def read(self, n: int = -1) -> bytes:
            return self._stream.read(n)

    result = physical_hash_file(ReadOnly(b"physical"), chunk_size=3)  # type: ignore[arg-type]
    # kamu vector (odf-format.md §7.3): sha3-256("physical").
    expected = "f16201970ee21101d110c448f2b72aec873f9be2b4e5403a5fdf88e18ca4430d8b1cb"
    assert result.multihash.to_multibase() == expected
    assert result.size == 8


def test_physical_hash_empty_and_limit(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert physical_hash_file(empty) == (physical_hash_file(io.BytesIO(b"")).multihash, 0)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    assert physical_hash_file(big, max_size=100).size == 100
    with pytest.raises(ObjectTooLarge):
        physical_hash_file(big, chunk_size=16, max_size=99)


def test_physical_hash_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        physical_hash_file(tmp_path / "nope")


# -- logical hash of Parquet -------------------------------------------------------------


def kamu_like_table(rows: int) -> pa.Table:
    """System columns typed like kamu writes them, plus nullable data columns."""
    offset = pa.array(range(rows), pa.int64())
    millis = pc.add(pc.multiply(offset, 1000), 1_700_000_000_000)
    text = pc.cast(offset, pa.string())
    nulls = pc.equal(pc.bit_wise_and(offset, 7), 3)
    return pa.table(
        {
            "offset": offset,
            "op": pa.array([0] * rows, pa.int32()),
            "system_time": millis.cast(pa.timestamp("ms", "UTC")),
            "event_time": millis.cast(pa.timestamp("ms", "UTC")),
            "city": pc.if_else(nulls, pa.scalar(None, pa.string()), text),
            "population": pc.if_else(nulls, pa.scalar(None, pa.int64()), offset),
            "flag": pc.equal(pc.bit_wise_and(offset, 1), 0),
        }
    )


@pytest.mark.parametrize("store_schema", [True, False])
def test_parquet_logical_hash_equals_in_memory(tmp_path: Path, store_schema: bool) -> None:
    table = kamu_like_table(25_000)
    path = tmp_path / "data.parquet"
    pq.write_table(table, path, row_group_size=7_000, store_schema=store_schema)
    mh = logical_hash_parquet(path)
    assert mh.code == ARROW0_SHA3_256
    assert mh.to_multibase().startswith("f9680c00120")
    assert mh == logical_hash(table.schema, table)
    with path.open("rb") as f:
        assert logical_hash_parquet(f) == mh


def test_timestamps_without_embedded_schema_are_utc_millis(tmp_path: Path) -> None:
    table = kamu_like_table(3)
    path = tmp_path / "spark_like.parquet"
    pq.write_table(table, path, store_schema=False)
    schema = arrow_rs_schema(pq.ParquetFile(path))
    assert schema.field("system_time").type == pa.timestamp("ms", "UTC")
    assert schema.field("system_time").type.tz == "UTC"
    assert schema.field("offset").type == pa.int64()
    assert schema.field("op").type == pa.int32()


def test_coerced_timestamp_unit_keeps_utc_like_arrow_rs(tmp_path: Path) -> None:
    # Seconds are stored as millis; arrow-rs then ignores the hinted zone (+01:00).
    table = pa.table({"t": pa.array([1, 2, None], pa.timestamp("s", "+01:00"))})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    assert pq.ParquetFile(path).schema_arrow.field("t").type == pa.timestamp("ms", "+01:00")
    schema = arrow_rs_schema(pq.ParquetFile(path))
    assert schema.field("t").type == pa.timestamp("ms", "UTC")
    expected = pa.table({"t": table["t"].cast(pa.timestamp("ms", "UTC"))})
    assert logical_hash_parquet(path) == logical_hash(expected.schema, expected)


def test_same_unit_hint_keeps_zone(tmp_path: Path) -> None:
    table = pa.table({"t": pa.array([1, 2], pa.timestamp("ms", "+02:00"))})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    assert arrow_rs_schema(pq.ParquetFile(path)).field("t").type == pa.timestamp("ms", "+02:00")
    assert logical_hash_parquet(path) == logical_hash(table.schema, table)


def test_date64_hint_is_restored(tmp_path: Path) -> None:
    table = pa.table(
        {
            "d": pa.array([86_400_000, None, 0], pa.date64()),
            "l": pa.array([[86_400_000], None, []], pa.list_(pa.date64())),
            "s": pa.array([{"x": 0}, None, {"x": 86_400_000}], pa.struct([("x", pa.date64())])),
        }
    )
    path = tmp_path / "d.parquet"
    pq.write_table(table, path)
    assert pq.ParquetFile(path).schema_arrow.field("d").type == pa.date32()
    schema = arrow_rs_schema(pq.ParquetFile(path))
    assert schema.field("d").type == pa.date64()
    assert schema.field("l").type.value_type == pa.date64()
    assert schema.field("s").type.field(0).type == pa.date64()
    assert logical_hash_parquet(path) == logical_hash(table.schema, table)


def test_int96_takes_hinted_unit(tmp_path: Path) -> None:
    table = pa.table({"t": pa.array([1_000, None, 5_000], pa.timestamp("ms", "UTC"))})
    path = tmp_path / "int96.parquet"
    pq.write_table(table, path, use_deprecated_int96_timestamps=True)
    assert pq.ParquetFile(path).schema_arrow.field("t").type == pa.timestamp("ns")
    assert logical_hash_parquet(path) == logical_hash(table.schema, table)
    plain = tmp_path / "int96_plain.parquet"
    pq.write_table(table, plain, use_deprecated_int96_timestamps=True, store_schema=False)
    assert arrow_rs_schema(pq.ParquetFile(plain)).field("t").type == pa.timestamp("ns")


def test_string_variants_read_back_hash_equal(tmp_path: Path) -> None:
    table = pa.table(
        {
            "a": pa.array(["x", None, "yy"], pa.large_string()),
            "b": pa.array(["x", None, "yy"], pa.string_view()),
        }
    )
    for store_schema in (True, False):
        path = tmp_path / f"s{store_schema}.parquet"
        pq.write_table(table, path, store_schema=store_schema)
        assert logical_hash_parquet(path) == logical_hash(table.schema, table)


def test_struct_columns_use_kamu_batches(tmp_path: Path) -> None:
    rows = 2 * KAMU_BATCH_ROWS + 17
    idx = pa.array(range(rows), pa.int64())
    child = pc.if_else(pc.equal(pc.bit_wise_and(idx, 3), 1), pa.scalar(None, pa.int64()), idx)
    parent_nulls = pc.equal(pc.bit_wise_and(idx, 5), 4)
    table = pa.table(
        {"s": pa.StructArray.from_arrays([child, idx], names=["c", "i"], mask=parent_nulls)}
    )
    path = tmp_path / "struct.parquet"
    pq.write_table(table, path, row_group_size=6_000)
    batches = pq.ParquetFile(path).iter_batches(batch_size=KAMU_BATCH_ROWS)
    assert logical_hash_parquet(path) == logical_hash(table.schema, batches)


def test_invalid_and_unsupported_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really a parquet file")
    with pytest.raises(InvalidDataFile):
        logical_hash_parquet(junk)
    table = pa.table({"d": pa.array(["a", "b", "a"]).dictionary_encode()})
    path = tmp_path / "dict.parquet"
    pq.write_table(table, path)
    with pytest.raises(UnsupportedDataType):
        logical_hash_parquet(path)
    # Without the embedded schema the column reads back as plain strings.
    plain = tmp_path / "dict_plain.parquet"
    pq.write_table(table, plain, store_schema=False)
    expected = pa.table({"d": pa.array(["a", "b", "a"])})
    assert logical_hash_parquet(plain) == logical_hash(expected.schema, expected)
