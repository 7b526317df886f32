"""Committed slice format: columns, types, order, Parquet options, hashes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbs.model import DatasetVocabulary, OffsetInterval, Timestamp
from node.ingest.errors import SchemaError
from node.ingest.writer import (
    DICTIONARY_SAMPLE_ROWS,
    ROW_GROUP_ROWS,
    SliceWriter,
    dictionary_columns,
    slice_schema,
    write_slice,
)
from storage.hashing import logical_hash_parquet, physical_hash_file

T0 = Timestamp.parse_rfc3339("2024-05-01T10:00:00Z")


def merged(n: int = 3) -> pa.Table:
    return pa.table(
        {
            "op": pa.array([0] * n, pa.int32()),
            "city": [f"c{i}" for i in range(n)],
            "event_time": pa.array([i * 1_000_000 for i in range(n)], pa.timestamp("us")),
            "population": pa.array(range(n), pa.int64()),
        }
    )


def test_slice_columns_types_and_order(tmp_path: Path) -> None:
    w = write_slice(tmp_path / "s.parquet", merged(), start_offset=10, system_time=T0)
    t = pq.read_table(w.path)
    assert t.column_names == ["offset", "op", "system_time", "event_time", "city", "population"]
    assert t.schema.field("offset").type == pa.int64()
    assert t.schema.field("op").type == pa.int32()
    assert t.schema.field("system_time").type == pa.timestamp("ms", "UTC")
    assert t.schema.field("event_time").type == pa.timestamp("ms", "UTC")
    assert t.column("offset").to_pylist() == [10, 11, 12]
    assert set(t.column("system_time").cast(pa.int64()).to_pylist()) == {T0.nanos // 1_000_000}
    assert w.offset_interval == OffsetInterval(start=10, end=12)
    assert w.num_records == 3
    assert w.max_event_time == Timestamp.parse_rfc3339("1970-01-01T00:00:02Z")


def encodings(path: Path) -> dict[str, tuple[str, ...]]:
    rg = pq.ParquetFile(path).metadata.row_group(0)
    return {rg.column(i).path_in_schema: rg.column(i).encodings for i in range(rg.num_columns)}


def test_parquet_options_snappy_delta_offsets_and_dictionaries(tmp_path: Path) -> None:
    n = 1000
    table = merged(n).set_column(1, "city", pa.array([f"c{i % 10}" for i in range(n)]))
    w = write_slice(tmp_path / "s.parquet", table, start_offset=0, system_time=T0)
    md = pq.ParquetFile(w.path).metadata
    rg = md.row_group(0)
    by_name = {rg.column(i).path_in_schema: rg.column(i) for i in range(rg.num_columns)}
    assert set(by_name) == {"offset", "op", "system_time", "event_time", "city", "population"}
    # Repeated values get a dictionary; distinct ones (event_time, population) plain pages.
    repeated = {"op", "system_time", "city"}
    for name, col in by_name.items():
        assert col.compression == "SNAPPY"
        dict_encoded = any("DICTIONARY" in e for e in col.encodings)
        assert dict_encoded == (name in repeated), name
    assert "DELTA_BINARY_PACKED" in by_name["offset"].encodings


@pytest.mark.parametrize(
    ("values", "dictionary"),
    [
        ([i % 100 for i in range(1000)], True),  # 10% distinct
        ([i % 500 for i in range(1000)], True),  # 50%: not more than the share
        ([i % 501 for i in range(1000)], False),
        ([None] * 900 + list(range(100)), False),  # distinct among the non-null values
        ([None] * 1000, True),  # nothing to judge: pyarrow's default
    ],
)
def test_mostly_distinct_columns_get_plain_pages(
    tmp_path: Path, values: list[int | None], dictionary: bool
) -> None:
    n = len(values)
    table = merged(n).append_column("v", pa.array(values, pa.int64()))
    w = write_slice(tmp_path / "s.parquet", table, start_offset=0, system_time=T0)
    assert any("DICTIONARY" in e for e in encodings(w.path)["v"]) == dictionary
    assert pq.read_table(w.path).column("v").to_pylist() == values
    assert w.logical_hash == logical_hash_parquet(str(w.path))


def test_the_first_rows_choose_the_encoding(tmp_path: Path) -> None:
    """Judged on the first `DICTIONARY_SAMPLE_ROWS` rows, not on the whole slice."""
    n = DICTIONARY_SAMPLE_ROWS + 50_000
    values = list(range(DICTIONARY_SAMPLE_ROWS)) + [7] * 50_000
    schema = pa.schema([("event_time", pa.timestamp("ms", "UTC")), ("v", pa.int64())])
    writer = SliceWriter(tmp_path / "s.parquet", schema, start_offset=0, system_time=T0)
    writer.write(pa.table({"event_time": pa.array([0] * n, schema.field(0).type), "v": values}))
    w = writer.close()
    enc = encodings(w.path)
    assert not any("DICTIONARY" in e for e in enc["v"])
    assert any("DICTIONARY" in e for e in enc["event_time"])


def test_encodings_without_a_sample_and_nested_leaves() -> None:
    schema = pa.schema(
        [("offset", pa.int64()), ("id", pa.int64()), ("s", pa.struct([("a", pa.int64())]))]
    )
    assert dictionary_columns(schema, None, skip="offset") == ["id", "s.a"]
    sample = pa.table({"offset": [0, 1], "id": [1, 2], "s": [{"a": 1}, {"a": 2}]}, schema=schema)
    assert dictionary_columns(schema, sample, skip="offset") == ["s.a"]


def test_an_empty_slice_is_a_readable_file(tmp_path: Path) -> None:
    writer = SliceWriter(tmp_path / "s.parquet", merged().schema, start_offset=0, system_time=T0)
    w = writer.close()
    assert w.num_records == 0
    assert pq.read_table(w.path).schema.names[:4] == ["offset", "op", "system_time", "event_time"]


def test_nested_leaves_get_dictionaries_too(tmp_path: Path) -> None:
    table = merged().append_column(
        "s", pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}])
    )
    w = write_slice(tmp_path / "s.parquet", table, start_offset=0, system_time=T0)
    rg = pq.ParquetFile(w.path).metadata.row_group(0)
    encodings = {rg.column(i).path_in_schema: rg.column(i).encodings for i in range(rg.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["s.a"])
    assert any("DICTIONARY" in e for e in encodings["s.b"])


def test_system_columns_cost_almost_nothing(tmp_path: Path) -> None:
    """A slice is within 1.1x of pyarrow's default file of its data columns."""
    n = 300_000
    data = pa.table(
        {
            "event_time": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", "UTC")),
            "id": pa.array(range(n), pa.int64()),
            "name": [f"n{i}" for i in range(n)],
            "qty": pa.array([i % 1024 for i in range(n)], pa.int32()),
        }
    )
    pq.write_table(data, tmp_path / "plain.parquet")
    baseline = (tmp_path / "plain.parquet").stat().st_size
    writer = SliceWriter(tmp_path / "s.parquet", data.schema, start_offset=7, system_time=T0)
    for batch in data.to_batches(max_chunksize=50_000):  # gathered into full row groups
        writer.write(batch)
    w = writer.close()
    assert pq.ParquetFile(w.path).metadata.num_row_groups == -(-n // ROW_GROUP_ROWS)
    assert w.size <= 1.1 * baseline, (w.size, baseline)
    assert pq.read_table(w.path, columns=["offset"]).column(0).to_pylist() == list(range(7, 7 + n))


def test_hashes_match_storage_hashing(tmp_path: Path) -> None:
    w = write_slice(tmp_path / "s.parquet", merged(), start_offset=0, system_time=T0)
    assert w.logical_hash == logical_hash_parquet(str(w.path))
    assert (w.physical_hash, w.size) == tuple(physical_hash_file(w.path))
    ds = w.data_slice()
    assert ds.size == w.path.stat().st_size
    assert str(ds.logical_hash).startswith("f9680c00120")


def test_same_rows_same_logical_hash_across_batching(tmp_path: Path) -> None:
    one = write_slice(tmp_path / "a.parquet", merged(50), start_offset=0, system_time=T0)
    sw = SliceWriter(tmp_path / "b.parquet", merged(50).schema, start_offset=0, system_time=T0)
    for batch in merged(50).to_batches(max_chunksize=7):
        sw.write(batch)
    two = sw.close()
    assert one.logical_hash == two.logical_hash


def test_date_event_time_stays_a_date(tmp_path: Path) -> None:
    t = pa.table({"event_time": pa.array([19000, 19001], pa.date32()), "x": [1, 2]})
    w = write_slice(tmp_path / "d.parquet", t, start_offset=0, system_time=T0)
    assert pq.read_schema(w.path).field("event_time").type == pa.date32()
    assert w.max_event_time == Timestamp.from_ymd_hms(2022, 1, 9)


def test_vocab_names_are_used(tmp_path: Path) -> None:
    vocab = DatasetVocabulary(
        offset_column="o",
        operation_type_column="kind",
        system_time_column="st",
        event_time_column="when",
    )
    t = pa.table({"when": pa.array([0], pa.timestamp("ms", "UTC")), "x": [1]})
    w = write_slice(tmp_path / "v.parquet", t, start_offset=0, system_time=T0, vocab=vocab)
    assert pq.read_schema(w.path).names == ["o", "kind", "st", "when", "x"]


@pytest.mark.parametrize(
    ("table", "match"),
    [
        (pa.table({"x": [1]}), "no event time"),
        (pa.table({"event_time": ["2020"], "x": [1]}), "timestamp or a date"),
        (pa.table({"event_time": pa.array([0], pa.timestamp("ms")), "offset": [1]}), "system"),
    ],
)
def test_bad_slices_are_refused(tmp_path: Path, table: pa.Table, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        write_slice(tmp_path / "x.parquet", table, start_offset=0, system_time=T0)


def test_null_event_time_is_refused_and_file_removed(tmp_path: Path) -> None:
    t = pa.table({"event_time": pa.array([None], pa.timestamp("ms", "UTC")), "x": [1]})
    with pytest.raises(SchemaError, match="null"):
        write_slice(tmp_path / "n.parquet", t, start_offset=0, system_time=T0)
    assert not (tmp_path / "n.parquet").exists()


def test_slice_schema_event_time_not_nullable() -> None:
    s = slice_schema(pa.schema([pa.field("event_time", pa.timestamp("s")), ("v", pa.int8())]))
    assert not s.field("event_time").nullable
    assert s.field("v").nullable


def test_batches_are_gathered_into_full_row_groups(tmp_path: Path) -> None:
    """Row groups hold ROW_GROUP_ROWS rows whatever the batching; the rest goes last."""
    n = 2 * ROW_GROUP_ROWS + 12_345
    schema = pa.schema([("event_time", pa.timestamp("ms", "UTC")), ("v", pa.int32())])
    writer = SliceWriter(tmp_path / "s.parquet", schema, start_offset=0, system_time=T0)
    start, step = 0, 300_007  # batches that never align with row groups
    while start < n:
        size = min(step, n - start)
        writer.write(
            pa.table(
                {
                    "event_time": pa.array([0] * size, pa.timestamp("ms", "UTC")),
                    "v": pa.array([(start + i) % 7 for i in range(size)], pa.int32()),
                }
            )
        )
        start += size
    w = writer.close()
    md = pq.ParquetFile(w.path).metadata
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    assert sizes == [ROW_GROUP_ROWS, ROW_GROUP_ROWS, 12_345]
    assert w.logical_hash == logical_hash_parquet(str(w.path))
    offsets = pq.read_table(w.path, columns=["offset"]).column(0)
    assert offsets[0].as_py() == 0 and offsets[n - 1].as_py() == n - 1
