"""Push/pull ingest end to end on real workspaces (tmp_path)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from fbs.model import (
    AddData,
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    MergeStrategy,
    MergeStrategyAppend,
    MergeStrategyChangelogStream,
    MergeStrategyLedger,
    MergeStrategySnapshot,
    MergeStrategyUpsertStream,
    MetadataEvent,
    ReadStepCsv,
    ReadStepParquet,
    SetDataSchema,
    SqlQueryStep,
    Timestamp,
    TransformSql,
)
from node.ingest.errors import IngestError, ReadError, SchemaError, SourceNotFound
from node.ingest.merge import current_state
from node.ingest.pipeline import ingest, pull, read_changelog, read_live_state
from storage.dataset import Dataset
from storage.verify import verify_integrity
from storage.workspace import Workspace

if TYPE_CHECKING:
    from engine.process import EngineProcess

DDL = ("event_time TIMESTAMP", "city STRING", "population BIGINT")


def make(
    tmp_path: Path,
    merge: MergeStrategy | None = None,
    *,
    ddl: tuple[str, ...] | None = DDL,
    extra: tuple[MetadataEvent, ...] = (),
    sources: tuple[AddPushSource, ...] | None = None,
) -> Dataset:
    ws = Workspace.init(tmp_path / "ws", exist_ok=True)
    push = sources or (
        AddPushSource(
            source_name="default",
            read=ReadStepCsv(header=True, ddl_schema=ddl),
            merge=merge or MergeStrategyAppend(),
        ),
    )
    snap = DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(*push, *extra))
    return ws.add_snapshot(snap)


def csv(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def events(ds: Dataset) -> list[MetadataEvent]:
    return [b.event for _h, _r, b in ds.iter_blocks()][::-1]


def records(ds: Dataset) -> list[tuple[int, str, int]]:
    t = read_changelog(ds)
    assert t is not None
    d = t.to_pydict()
    return list(zip(d["op"], d["city"], d["population"], strict=True))


A = "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-01T00:00:00Z,B,2\n"
B = (
    "event_time,city,population\n2021-01-01T00:00:00Z,A,1\n"
    "2021-01-01T00:00:00Z,C,3\n2021-01-01T00:00:00Z,B,5\n"
)


def test_first_ingest_commits_schema_then_data(tmp_path: Path) -> None:
    ds = make(tmp_path)
    res = ingest(ds, [csv(tmp_path, "a.csv", A)])
    assert res.schema_committed and res.num_records == 2
    evs = events(ds)
    assert isinstance(evs[-2], SetDataSchema)
    names = [f.name for f in evs[-2].schema.fields]  # type: ignore[union-attr]
    assert names == ["offset", "op", "system_time", "event_time", "city", "population"]
    add = evs[-1]
    assert isinstance(add, AddData) and add.new_data is not None
    assert add.prev_offset is None
    assert (add.new_data.offset_interval.start, add.new_data.offset_interval.end) == (0, 1)
    assert add.new_watermark == Timestamp.parse_rfc3339("2020-01-01T00:00:00Z")
    res2 = ingest(ds, [csv(tmp_path, "b.csv", B)])
    assert not res2.schema_committed
    add2 = events(ds)[-1]
    assert isinstance(add2, AddData) and add2.prev_offset == 1
    assert add2.new_watermark == Timestamp.parse_rfc3339("2021-01-01T00:00:00Z")
    assert read_changelog(ds).column("offset").to_pylist() == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    assert verify_integrity(ds).ok


def test_watermark_never_goes_back(tmp_path: Path) -> None:
    ds = make(tmp_path)
    ingest(ds, [csv(tmp_path, "b.csv", B)])
    ingest(ds, [csv(tmp_path, "a.csv", A)])  # older events
    add = events(ds)[-1]
    assert isinstance(add, AddData)
    assert add.new_watermark == Timestamp.parse_rfc3339("2021-01-01T00:00:00Z")


def test_ledger_skips_seen_keys(tmp_path: Path) -> None:
    ds = make(tmp_path, MergeStrategyLedger(primary_key=("city",)))
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    res = ingest(ds, [csv(tmp_path, "b.csv", B)])
    assert res.num_records == 1
    assert records(ds) == [(0, "A", 1), (0, "B", 2), (0, "C", 3)]


def test_ledger_with_nothing_new_commits_nothing(tmp_path: Path) -> None:
    ds = make(tmp_path, MergeStrategyLedger(primary_key=("city",)))
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    head = ds.head()
    res = ingest(ds, [csv(tmp_path, "a.csv", A)])
    assert not res.committed and ds.head() == head


def test_snapshot_changelog_and_current_state(tmp_path: Path) -> None:
    ds = make(tmp_path, MergeStrategySnapshot(primary_key=("city",)))
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    ingest(ds, [csv(tmp_path, "b.csv", B)])
    assert records(ds) == [(0, "A", 1), (0, "B", 2), (0, "C", 3), (2, "B", 2), (3, "B", 5)]
    ingest(ds, [csv(tmp_path, "c.csv", "event_time,city,population\n2022-01-01T00:00:00Z,C,3\n")])
    live = current_state(read_changelog(ds), ["city"])  # type: ignore[arg-type]
    assert live.column("city").to_pylist() == ["C"]
    assert verify_integrity(ds).ok


def test_snapshot_duplicate_keys_commit_nothing(tmp_path: Path) -> None:
    ds = make(tmp_path, MergeStrategySnapshot(primary_key=("city",)))
    head = ds.head()
    bad = "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-01T00:00:00Z,A,2\n"
    with pytest.raises(IngestError, match="duplicate primary key"):
        ingest(ds, [csv(tmp_path, "d.csv", bad)])
    assert ds.head() == head


def test_upsert_stream_with_op_column(tmp_path: Path) -> None:
    ds = make(tmp_path, MergeStrategyUpsertStream(primary_key=("city",)), ddl=(*DDL, "op INT"))
    ingest(
        ds,
        [
            csv(
                tmp_path,
                "a.csv",
                A.replace("population\n", "population,op\n")
                .replace("1\n", "1,0\n")
                .replace("2\n", "2,0\n"),
            )
        ],
    )
    up = "event_time,city,population,op\n2021-01-01T00:00:00Z,A,10,0\n2021-01-01T00:00:00Z,B,0,1\n"
    ingest(ds, [csv(tmp_path, "u.csv", up)])
    assert records(ds) == [(0, "A", 1), (0, "B", 2), (2, "A", 1), (3, "A", 10), (1, "B", 2)]
    schema = events(ds)[2]
    assert isinstance(schema, SetDataSchema)
    assert [f.name for f in schema.schema.fields].count("op") == 1  # type: ignore[union-attr]


def test_changelog_stream_passthrough(tmp_path: Path) -> None:
    ds = make(tmp_path, MergeStrategyChangelogStream(primary_key=("city",)), ddl=(*DDL, "op INT"))
    text = (
        "event_time,city,population,op\n2020-01-01T00:00:00Z,A,1,0\n"
        "2020-01-02T00:00:00Z,A,1,2\n2020-01-02T00:00:00Z,A,3,3\n"
    )
    ingest(ds, [csv(tmp_path, "c.csv", text)])
    assert records(ds) == [(0, "A", 1), (2, "A", 1), (3, "A", 3)]
    with pytest.raises(IngestError, match=r"\+C"):
        ingest(
            ds,
            [
                csv(
                    tmp_path,
                    "bad.csv",
                    "event_time,city,population,op\n2020-01-01T00:00:00Z,A,1,2\n",
                )
            ],
        )


def test_bad_input_leaves_dataset_unchanged(tmp_path: Path) -> None:
    ds = make(tmp_path)
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    head, files = ds.head(), sorted(p.name for p in ds.layout.data_dir.iterdir())
    bad = "event_time,city,population\n2020-01-01T00:00:00Z,A,not-a-number\n"
    with pytest.raises(ReadError) as info:
        ingest(ds, [csv(tmp_path, "bad.csv", bad)])
    assert "bad.csv" in str(info.value)
    assert ds.head() == head
    assert sorted(p.name for p in ds.layout.data_dir.iterdir()) == files


def test_missing_event_time_uses_given_time(tmp_path: Path) -> None:
    ds = make(tmp_path, ddl=("city STRING", "population BIGINT"))
    t = Timestamp.parse_rfc3339("2019-06-01T00:00:00Z")
    ingest(ds, [csv(tmp_path, "n.csv", "city,population\nA,1\n")], event_time=t)
    table = read_changelog(ds)
    assert table is not None
    assert table.column("event_time").type == pa.timestamp("ms", "UTC")
    assert table.column("event_time").cast(pa.int64()).to_pylist() == [t.nanos // 1_000_000]


def test_schema_evolution_adds_optional_column_and_refuses_type_change(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    src = AddPushSource(source_name="default", read=ReadStepParquet(), merge=MergeStrategyAppend())
    ds = make(tmp_path, sources=(src,))
    ts = pa.timestamp("ms", "UTC")

    def parquet(name: str, **cols: pa.Array) -> Path:
        path = tmp_path / name
        pq.write_table(pa.table({"event_time": pa.array([0], ts), **cols}), path)
        return path

    ingest(ds, [parquet("a.parquet", city=pa.array(["A"]))])
    res = ingest(ds, [parquet("b.parquet", city=pa.array(["B"]), area=pa.array([7]))])
    assert res.schema_committed
    table = read_changelog(ds)
    assert table is not None and table.column("area").to_pylist() == [None, 7]
    head = ds.head()
    with pytest.raises(SchemaError, match="area"):
        ingest(ds, [parquet("c.parquet", city=pa.array(["C"]), area=pa.array(["big"]))])
    assert ds.head() == head
    # Omitting an optional column is fine: it is filled with nulls.
    assert ingest(ds, [parquet("d.parquet", area=pa.array([1]))]).num_records == 1


def test_input_format_override_and_stdin_stream(tmp_path: Path) -> None:
    ds = make(tmp_path)
    nd = b'{"event_time": "2020-01-01T00:00:00Z", "city": "A", "population": 1}\n'
    res = ingest(ds, io.BytesIO(nd), input_format="ndjson")
    assert res.num_records == 1
    assert records(ds) == [(0, "A", 1)]


def test_source_selection(tmp_path: Path) -> None:
    two = tuple(
        AddPushSource(
            source_name=n,
            read=ReadStepCsv(header=True, ddl_schema=DDL),
            merge=MergeStrategyAppend(),
        )
        for n in ("one", "two")
    )
    ds = make(tmp_path, sources=two)
    path = csv(tmp_path, "a.csv", A)
    with pytest.raises(SourceNotFound, match="several"):
        ingest(ds, [path])
    with pytest.raises(SourceNotFound, match="no push source 'three'"):
        ingest(ds, [path], source_name="three")
    assert ingest(ds, [path], source_name="two").num_records == 2


def test_pull_without_polling_source_and_set_watermark(tmp_path: Path) -> None:
    ds = make(tmp_path)
    with pytest.raises(SourceNotFound):
        pull(ds)
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    t = Timestamp.parse_rfc3339("2030-01-01T00:00:00Z")
    res = pull(ds, set_watermark=t)
    add = events(ds)[-1]
    assert res.committed and isinstance(add, AddData)
    assert add.new_watermark == t and add.new_data is None
    with pytest.raises(IngestError, match="before the current watermark"):
        pull(ds, set_watermark=Timestamp.parse_rfc3339("2000-01-01T00:00:00Z"))


def _spark_available() -> bool:
    import importlib.util
    import shutil

    return importlib.util.find_spec("pyspark") is not None and shutil.which("java") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="pyspark/java not installed")
def test_preprocess_runs_on_the_spark_engine(
    tmp_path: Path, engine_process: EngineProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's shared engine (tests/conftest.py), reached the way every ingest
    # reaches its engine (`node.engine_manager`, here the configured address): no JVM
    # of its own.
    from node.engine_manager import ENGINE_ADDRESS_ENV

    monkeypatch.setenv(ENGINE_ADDRESS_ENV, engine_process.address)
    sql = TransformSql(
        engine="spark",
        queries=(
            SqlQueryStep(
                query="SELECT event_time, upper(city) AS city, population * 10 AS population"
                " FROM input"
            ),
        ),
    )
    src = AddPushSource(
        source_name="default",
        read=ReadStepCsv(header=True, ddl_schema=DDL),
        preprocess=sql,
        merge=MergeStrategyAppend(),
    )
    ds = make(tmp_path, sources=(src,))
    ingest(ds, [csv(tmp_path, "a.csv", A.replace(",A,", ",a,"))])
    assert records(ds) == [(0, "A", 10), (0, "B", 20)]
    assert engine_process.alive()
    assert verify_integrity(ds).ok


def test_live_state_folded_slice_by_slice_equals_full_history(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    ds = make(tmp_path, MergeStrategySnapshot(primary_key=("city",)))
    assert read_live_state(ds, ["city"]) is None
    checked = 0
    for i in range(12):
        cities = rng.sample("ABCDEFGHIJ", rng.randint(0, 10))
        rows = "".join(f"202{i % 10}-01-01T00:00:00Z,{c},{rng.randint(0, 3)}\n" for c in cities)
        try:
            ingest(ds, [csv(tmp_path, f"s{i}.csv", "event_time,city,population\n" + rows)])
        except IngestError:
            continue  # an identical snapshot commits nothing
        full = current_state(read_changelog(ds), ["city"])  # type: ignore[arg-type]
        folded = read_live_state(ds, ["city"])
        assert folded is not None
        assert folded.equals(full)
        # Snapshot semantics: the live state is exactly the last snapshot.
        assert sorted(folded.column("city").to_pylist()) == sorted(cities)
        checked += 1
    assert checked >= 8
    assert sum(isinstance(e, AddData) for e in events(ds)) >= 8
    assert verify_integrity(ds).ok
