"""`logical_hash_parquet` reads dictionary-encoded columns as dictionaries.

The hash must equal the hash of the plainly read values whatever the file holds: every
page dictionary-encoded, pages that fell back to plain encoding (the dictionary read is
abandoned mid-file and resumed plainly from the next row), several row groups, structs
(no dictionary read), casts of temporal columns beside a dictionary column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import storage.hashing as hashing
from fbs.logical_hash import logical_hash
from storage.hashing import MAX_DICTIONARY_FRACTION, logical_hash_parquet


def expected_hash(path: Path) -> Any:
    """The hash of the plainly read file (the batches' types as arrow-rs derives them)."""
    pf = pq.ParquetFile(path)
    schema = hashing.arrow_rs_schema(pf)
    table = pf.read().cast(schema)
    return logical_hash(schema, table)


def observed(path: Path) -> tuple[Any, list[pa.RecordBatch]]:
    batches: list[pa.RecordBatch] = []
    return logical_hash_parquet(path, batches.append), batches


def cities(rows: int, distinct: int) -> pa.Table:
    names = pa.array([f"city-{i % distinct}" if i % 11 else None for i in range(rows)])
    return pa.table({"offset": pa.array(range(rows), pa.int64()), "city": names})


def test_dictionary_columns_are_read_as_dictionaries(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(cities(200_000, 50), path, row_group_size=70_000)
    mh, batches = observed(path)
    assert mh == expected_hash(path)
    assert all(pa.types.is_dictionary(b.schema.field("city").type) for b in batches)
    assert sum(b.num_rows for b in batches) == 200_000
    assert pa.concat_arrays([b.column(0) for b in batches]).equals(
        pa.array(range(200_000), pa.int64())
    )


def test_only_dictionary_encoded_string_columns_qualify(tmp_path: Path) -> None:
    table = pa.table(
        {
            "s": pa.array(["a", "b"] * 10),
            "b": pa.array([b"x", b"y"] * 10, pa.binary()),
            "l": pa.array(["a", "b"] * 10, pa.large_string()),
            "n": pa.array([1, 2] * 10, pa.int64()),
            "plain": pa.array(["a", "b"] * 10),
        }
    )
    path = tmp_path / "q.parquet"
    pq.write_table(table, path, use_dictionary=["s", "b", "l", "n"])
    pf = pq.ParquetFile(path)
    casts = [None] * len(pf.schema_arrow)
    assert hashing._dictionary_columns(pf, casts) == ["s", "b", "l"]
    assert hashing._dictionary_columns(pf, [pa.string(), None, None, None, None]) == ["b", "l"]
    mh, batches = observed(path)
    assert mh == expected_hash(path)
    kinds = [pa.types.is_dictionary(t) for t in batches[0].schema.types]
    assert kinds == [True, True, True, False, False]


def test_plain_fallback_pages_switch_to_plain_reading(tmp_path: Path) -> None:
    """Too many distinct values: pages fall back to plain and the dictionary grows; the
    read goes on plainly from the next row, mid row group, with the same hash."""
    rows = 300_000
    path = tmp_path / "u.parquet"
    pq.write_table(cities(rows, rows), path, row_group_size=120_000)
    mh, batches = observed(path)
    assert mh == expected_hash(path)
    kinds = [pa.types.is_dictionary(b.schema.field("city").type) for b in batches]
    assert kinds[0] and not kinds[-1]
    switched = kinds.index(False)
    assert not any(kinds[switched:])
    assert switched * hashing._FAST_BATCH_ROWS < 120_000  # inside the first row group
    offsets = pa.concat_arrays([b.column(0) for b in batches])
    assert offsets.equals(pa.array(range(rows), pa.int64()))


def test_dictionary_limit_is_half_a_batch(tmp_path: Path, monkeypatch: Any) -> None:
    assert MAX_DICTIONARY_FRACTION == 0.5
    monkeypatch.setattr(hashing, "_FAST_BATCH_ROWS", 8)
    for distinct, stays in ((4, True), (5, False)):
        path = tmp_path / f"l{distinct}.parquet"
        table = pa.table({"s": pa.array([f"v{i % distinct}" for i in range(40)])})
        pq.write_table(table, path)
        mh, batches = observed(path)
        assert mh == expected_hash(path)
        kinds = [pa.types.is_dictionary(b.column(0).type) for b in batches]
        assert kinds[0]
        assert all(kinds) == stays
        if not stays:
            assert kinds[1:] == [False] * (len(kinds) - 1)


@pytest.mark.parametrize("skip", [0, 1, 6, 7, 13, 20, 21])
def test_plain_batches_resume_at_any_row(tmp_path: Path, skip: int) -> None:
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"x": pa.array(range(21), pa.int64())}), path, row_group_size=7)
    batches = list(hashing._plain_batches(pq.ParquetFile(path), skip, 4))
    got = [v for b in batches for v in b.column(0).to_pylist()]
    assert got == list(range(skip, 21))
    # Whole row groups before the one holding row `skip` are not read at all.
    assert all(b.num_rows <= 4 for b in batches)


def test_struct_schema_reads_no_dictionary(tmp_path: Path) -> None:
    inner = pa.StructArray.from_arrays([pa.array(["a", None, "b"] * 10)], names=["c"])
    table = pa.table({"s": pa.array(["x", "y", "z"] * 10), "t": inner})
    path = tmp_path / "s.parquet"
    pq.write_table(table, path)
    mh, batches = observed(path)
    assert mh == expected_hash(path)
    assert not pa.types.is_dictionary(batches[0].schema.field("s").type)


def test_casts_beside_a_dictionary_column(tmp_path: Path) -> None:
    """A coerced timestamp column is cast to arrow-rs' type, the string column kept as
    a dictionary: the batch is rebuilt by names, not with the schema."""
    table = pa.table(
        {
            "t": pa.array([1, 2, None] * 5, pa.timestamp("s", "+01:00")),
            "s": pa.array(["p", "q", None] * 5),
        }
    )
    path = tmp_path / "c.parquet"
    pq.write_table(table, path)
    mh, batches = observed(path)
    assert batches[0].schema.field("t").type == pa.timestamp("ms", "UTC")
    assert pa.types.is_dictionary(batches[0].schema.field("s").type)
    expected = pa.table({"t": table["t"].cast(pa.timestamp("ms", "UTC")), "s": table["s"]})
    assert mh == logical_hash(expected.schema, expected)


def test_empty_file_and_no_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"s": pa.array([], pa.string())}), path)
    mh, batches = observed(path)
    assert mh == expected_hash(path)
    assert sum(b.num_rows for b in batches) == 0
