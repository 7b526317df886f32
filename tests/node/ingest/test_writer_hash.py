"""Logical hash taken while writing equals the hash of the file read back (as kamu does)."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbs.model import Timestamp
from node.ingest.writer import SliceWriter, streamable_type, write_slice
from storage.hashing import arrow_rs_schema, logical_hash_parquet, physical_hash_file

T0 = Timestamp.parse_rfc3339("2024-05-01T10:00:00Z")


def mixed(n: int, seed: int = 0) -> pa.Table:
    """Every flat type the writer hashes while writing, with nulls sprinkled in."""

    def nullable(values: list[object]) -> list[object]:
        return [None if (i + seed) % 7 == 3 else v for i, v in enumerate(values)]

    r = range(seed, seed + n)
    return pa.table(
        {
            "event_time": pa.array([i * 1_234_567 for i in r], pa.timestamp("us")),
            "i8": pa.array(nullable([i % 100 - 50 for i in r]), pa.int8()),
            "i16": pa.array(nullable([i * 3 for i in r]), pa.int16()),
            "i32": pa.array(nullable(list(r)), pa.int32()),
            "i64": pa.array(nullable([i * 10**12 for i in r]), pa.int64()),
            "u32": pa.array(nullable(list(r)), pa.uint32()),
            "u64": pa.array(nullable([2**63 + i for i in r]), pa.uint64()),
            "f32": pa.array(nullable([i / 3 for i in r]), pa.float32()),
            "f64": pa.array(nullable([float("nan") if i % 11 == 0 else i / 7 for i in r])),
            "flag": pa.array(nullable([i % 2 == 0 for i in r])),
            "s": pa.array(nullable([f"name-{i}" * (i % 3) for i in r]), pa.string()),
            "ls": pa.array(nullable([f"ü{i}" for i in r]), pa.large_string()),
            "b": pa.array(nullable([bytes([i % 256]) * (i % 4) for i in r]), pa.binary()),
            "fb": pa.array(nullable([bytes([i % 256]) * 3 for i in r]), pa.binary(3)),
            "d": pa.array(nullable([dt.date(2020, 1, 1) + dt.timedelta(i) for i in r])),
            "ts_ms": pa.array(nullable([i * 1000 for i in r]), pa.timestamp("ms", "UTC")),
            "ts_ns": pa.array(nullable([i * 10**9 + 7 for i in r]), pa.timestamp("ns")),
            "ts_tz": pa.array(nullable([i for i in r]), pa.timestamp("us", "+01:00")),
            "dec": pa.array(nullable([decimal.Decimal(i) / 100 for i in r]), pa.decimal128(12, 2)),
        }
    )


def _write(path: Path, table: pa.Table, chunk: int, verify: bool) -> SliceWriter:
    w = SliceWriter(path, table.schema, start_offset=5, system_time=T0, verify_hash=verify)
    for batch in table.to_batches(max_chunksize=chunk):
        w.write(batch)
    return w


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_streamed_hash_equals_file_hash_on_mixed_types(tmp_path: Path, chunk: int) -> None:
    table = mixed(60)
    w = _write(tmp_path / "m.parquet", table, chunk, verify=False)
    written = w.close()
    assert w.hashed_while_writing
    assert written.logical_hash == logical_hash_parquet(str(written.path))
    assert (written.physical_hash, written.size) == tuple(physical_hash_file(written.path))
    assert written.offset_interval is not None
    assert (written.offset_interval.start, written.offset_interval.end) == (5, 64)


def test_hashed_types_are_exactly_the_types_read_back(tmp_path: Path) -> None:
    w = _write(tmp_path / "m.parquet", mixed(10), 4, verify=False)
    written = w.close()
    read_back = arrow_rs_schema(pq.ParquetFile(written.path))
    assert [(f.name, f.type) for f in read_back] == [(f.name, f.type) for f in w.schema]


def test_verify_mode_compares_both_hashes(tmp_path: Path) -> None:
    w = _write(tmp_path / "m.parquet", mixed(30, seed=3), 8, verify=True)
    written = w.close()
    assert w.hashed_while_writing
    assert written.logical_hash == logical_hash_parquet(str(written.path))


def test_same_rows_same_hash_whatever_the_batching(tmp_path: Path) -> None:
    table = mixed(40, seed=1)
    a = _write(tmp_path / "a.parquet", table, 3, verify=False).close()
    b = _write(tmp_path / "b.parquet", table, 40, verify=False).close()
    assert a.logical_hash == b.logical_hash


@pytest.mark.parametrize(
    ("column", "why"),
    [
        (pa.array([1, 2, 3], pa.timestamp("s")), "Parquet stores seconds as millis"),
        (pa.array([86_400_000, 0, 5], pa.date64()), "date64 is stored as whole days"),
        (pa.array([[1], None, [2, 3]], pa.list_(pa.int64())), "lists use the file"),
        (pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int64())])), "structs"),
        (pa.array(["x", "y", "x"]).dictionary_encode(), "dictionaries"),
    ],
)
def test_types_that_change_on_the_round_trip_hash_the_file(
    tmp_path: Path, column: pa.Array, why: str
) -> None:
    table = pa.table({"event_time": pa.array([0, 1, 2], pa.timestamp("ms", "UTC")), "c": column})
    w = SliceWriter(
        tmp_path / "x.parquet", table.schema, start_offset=0, system_time=T0, verify_hash=False
    )
    w.write(table)
    try:
        written = w.close()
    except Exception as e:  # dictionaries cannot be hashed at all (as upstream)
        assert pa.types.is_dictionary(column.type), (why, e)
        return
    assert not w.hashed_while_writing, why
    assert written.logical_hash == logical_hash_parquet(str(written.path))


def test_streamable_type_covers_flat_types_only() -> None:
    assert streamable_type(pa.timestamp("ms", "UTC"))
    assert streamable_type(pa.large_string())
    assert streamable_type(pa.decimal128(10, 2))
    for t in (
        pa.list_(pa.int32()),
        pa.struct([("a", pa.int32())]),
        pa.date64(),
        pa.null(),
        pa.float16(),
        pa.dictionary(pa.int32(), pa.string()),
    ):
        assert not streamable_type(t), t


def test_offsets_stay_contiguous_across_uneven_batches(tmp_path: Path) -> None:
    table = mixed(100)
    w = SliceWriter(tmp_path / "o.parquet", table.schema, start_offset=1000, system_time=T0)
    for start, size in ((0, 3), (3, 60), (63, 1), (64, 36)):
        w.write(table.slice(start, size))
    written = w.close()
    offsets = pq.read_table(written.path, columns=["offset"]).column(0).to_pylist()
    assert offsets == list(range(1000, 1100))
    st = pq.read_table(written.path, columns=["system_time", "op"])
    assert set(st.column("system_time").cast(pa.int64()).to_pylist()) == {T0.nanos // 10**6}
    assert set(st.column("op").to_pylist()) == {0}


def test_abort_after_writes_removes_the_file(tmp_path: Path) -> None:
    w = _write(tmp_path / "a.parquet", mixed(20), 5, verify=False)
    w.abort()
    assert not (tmp_path / "a.parquet").exists()


def test_write_slice_streams_the_hash_too(tmp_path: Path) -> None:
    written = write_slice(tmp_path / "w.parquet", mixed(25), start_offset=0, system_time=T0)
    assert written.logical_hash == logical_hash_parquet(str(written.path))


def test_verify_mode_catches_a_wrong_shortcut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pretend the footer check passed for a type Parquet coerces (seconds → millis):
    # the streamed hash is then wrong, and verification must say so.
    monkeypatch.setattr(SliceWriter, "_file_schema_matches", lambda self: True)
    table = pa.table(
        {"event_time": pa.array([0], pa.timestamp("ms", "UTC")), "c": pa.array([1], "timestamp[s]")}
    )
    w = SliceWriter(
        tmp_path / "x.parquet", table.schema, start_offset=0, system_time=T0, verify_hash=True
    )
    w.write(table)
    with pytest.raises(AssertionError, match="streamed logical hash"):
        w.close()


def test_close_twice_returns_the_same_slice(tmp_path: Path) -> None:
    w = _write(tmp_path / "c.parquet", mixed(12), 5, verify=False)
    assert w.close() == w.close()


def test_append_ingest_commits_the_file_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # End to end with verification off: the committed hashes are the streamed ones,
    # and they must be what storage computes on the stored file.
    from fbs.model import (
        AddData,
        AddPushSource,
        DatasetKind,
        DatasetSnapshot,
        MergeStrategyAppend,
        ReadStepCsv,
    )
    from node.ingest.pipeline import ingest
    from node.ingest.writer import VERIFY_HASH_ENV
    from storage.workspace import Workspace

    monkeypatch.delenv(VERIFY_HASH_ENV)
    ddl = (
        "event_time TIMESTAMP",
        "id BIGINT",
        "qty INT",
        "name STRING",
        "price DOUBLE",
        "price2 DECIMAL(10,2)",
        "flag BOOLEAN",
        "day DATE",
    )
    rows = [
        f"2024-01-0{1 + i % 9}T0{i % 10}:00:00{'Z' if i % 3 else ''},{i},{i % 5},n{i},"
        f"{i / 7},{i}.25,{'true' if i % 2 else 'false'},2024-02-0{1 + i % 9}"
        for i in range(2000)
    ]
    rows[7] = "2024-01-01 00:00:00+01:00,7,,,,,,"
    src = tmp_path / "in.csv"
    src.write_text("event_time,id,qty,name,price,price2,flag,day\n" + "\n".join(rows) + "\n")
    ws = Workspace.init(tmp_path / "ws")
    push = AddPushSource(
        source_name="default",
        read=ReadStepCsv(header=True, ddl_schema=ddl),
        merge=MergeStrategyAppend(),
    )
    ds = ws.add_snapshot(DatasetSnapshot(name="m", kind=DatasetKind.Root, metadata=(push,)))
    result = ingest(ds, [src], workdir=tmp_path)
    assert result.num_records == 2000
    head = ds.head()
    assert head is not None
    event = next(block.event for _h, _raw, block in ds.iter_blocks(head))
    assert isinstance(event, AddData) and event.new_data is not None
    stored = ds.layout.data.path_of(event.new_data.physical_hash)
    assert event.new_data.logical_hash == logical_hash_parquet(str(stored))
    assert (event.new_data.physical_hash, event.new_data.size) == tuple(physical_hash_file(stored))
