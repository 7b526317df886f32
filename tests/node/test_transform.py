"""Derivative datasets end to end on the real Spark engine (one JVM per test session)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from engine.errors import InvalidQuery
from engine.process import EngineProcess
from fbs.arrow_schema import data_schema_from_arrow
from fbs.did import DatasetId
from fbs.model import (
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    DataTypeOption,
    DataTypeTimestamp,
    ExecuteTransform,
    MergeStrategyAppend,
    ReadStepParquet,
    SetDataSchema,
)
from node.errors import InputNotReady, NotDerivative
from node.ingest.pipeline import ingest, read_changelog
from node.transform import (
    PullStatus,
    commit_transform,
    evolved_schema,
    plan_transform,
    pull_derivative,
    run_transform,
    transform_work_dir,
)
from node.validation.replay import verify_replay
from storage.errors import RefCASFailed
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative, read_records, transforms_of, ts_ms

MakeRoot = Callable[[str], RootWriter]


def test_map_filter_pulled_in_rounds(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    cities = make_root("cities")
    h1 = cities.append([("a", 100), ("b", 5000), ("c", 7000)])
    add_derivative(
        ws,
        "big",
        ["cities"],
        "SELECT event_time, city, population * 2 AS pop2 FROM cities WHERE population > 1000",
    )

    r1 = pull_derivative(ws, "big", engine=engine)
    assert r1.status is PullStatus.UPDATED and r1.num_records == 2
    big = ws.get("big")
    t = read_records(big)
    assert t.column_names == ["offset", "op", "system_time", "event_time", "city", "pop2"]
    assert t.column("offset").to_pylist() == [0, 1]
    assert t.column("city").to_pylist() == ["b", "c"]
    assert t.column("pop2").to_pylist() == [10000, 14000]

    # SetDataSchema came first, derived from the output, without encoding attributes.
    state = big.state()
    assert state is not None and state.data_schema is not None
    assert state.data_schema.schema is not None
    fields = {f.name: f for f in state.data_schema.schema.fields}
    assert all(f.extra is None for f in fields.values())
    inner = fields["event_time"].type
    inner = inner.inner if isinstance(inner, DataTypeOption) else inner
    assert isinstance(inner, DataTypeTimestamp)
    (e1,) = transforms_of(big)
    qi = e1.query_inputs[0]
    assert (qi.prev_block_hash, qi.new_block_hash, qi.prev_offset, qi.new_offset) == (
        None,
        h1,
        None,
        2,
    )
    assert e1.prev_offset is None and e1.new_data is not None
    assert (e1.new_data.offset_interval.start, e1.new_data.offset_interval.end) == (0, 1)

    # Nothing new upstream: up to date, no block.
    r2 = pull_derivative(ws, "big", engine=engine)
    assert r2.status is PullStatus.UP_TO_DATE and r2.new_head == r1.new_head

    # Round 2 and 3: only the new records are processed; offsets stay contiguous.
    h2 = cities.append([("d", 9000), ("e", 1)])
    assert pull_derivative(ws, "big", engine=engine).num_records == 1
    h3 = cities.append([("f", 2000), ("g", 3000)])
    assert pull_derivative(ws, "big", engine=engine).num_records == 2
    t = read_records(ws.get("big"))
    assert t.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert t.column("city").to_pylist() == ["b", "c", "d", "f", "g"]
    e1, e2, e3 = transforms_of(ws.get("big"))
    assert e2.query_inputs[0].prev_block_hash == h1 and e2.query_inputs[0].new_block_hash == h2
    assert (e2.query_inputs[0].prev_offset, e2.query_inputs[0].new_offset) == (2, 4)
    assert e3.query_inputs[0].new_block_hash == h3 and e3.prev_offset == 2
    assert verify_integrity(ws.get("big")).ok


def test_retractions_and_corrections_flow_through_unchanged(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    root = make_root("people")
    root.append([("x", 10), ("y", 20), ("z", 30)])
    # Retract y; correct z from 30 to 31.
    root.append([("y", 20), ("z", 30), ("z", 31)], ops=[1, 2, 3])
    add_derivative(
        ws, "people.map", ["people"], "SELECT op, event_time, city, population + 1 AS p FROM people"
    )
    assert pull_derivative(ws, "people.map", engine=engine).num_records == 6
    t = read_records(ws.get("people.map"))
    assert t.column("op").to_pylist() == [0, 0, 0, 1, 2, 3]
    assert t.column("city").to_pylist() == ["x", "y", "z", "y", "z", "z"]
    assert t.column("p").to_pylist() == [11, 21, 31, 21, 31, 32]


def test_multi_step_union_and_recursive_pull(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    a, b = make_root("a"), make_root("b")
    a.append([("a1", 1), ("a2", 2)])
    hb = b.append([("b1", 10)])
    add_derivative(
        ws,
        "both",
        ["a", ("b", "bee")],
        [
            ("u", "SELECT event_time, city, population FROM a UNION ALL "
                  "SELECT event_time, city, population FROM bee"),
            (None, "SELECT event_time, upper(city) AS city, population FROM u"),
        ],
    )  # fmt: skip
    add_derivative(
        ws,
        "both.big",
        ["both"],
        "SELECT event_time, city, population FROM both WHERE population >= 2",
    )

    r = pull_derivative(ws, "both.big", recursive=True, engine=engine)
    assert [u.alias for u in r.upstream] == ["both"]
    assert r.upstream[0].num_records == 3 and r.num_records == 2
    assert sorted(read_records(ws.get("both")).column("city").to_pylist()) == ["A1", "A2", "B1"]

    # Only `a` moves: b's input records no new block, and keeps its previous values.
    a.append([("a3", 3)])
    r = pull_derivative(ws, "both.big", recursive=True, engine=engine)
    assert r.status is PullStatus.UPDATED and r.num_records == 1
    last = transforms_of(ws.get("both"))[-1]
    qb = last.query_inputs[1]
    assert qb.dataset_id == DatasetId.from_did(ws.get("b").id)
    assert (qb.prev_block_hash, qb.new_block_hash, qb.prev_offset, qb.new_offset) == (
        hb,
        None,
        0,
        None,
    )
    cities = read_records(ws.get("both.big")).column("city").to_pylist()
    assert sorted(cities[:2]) == ["A2", "B1"] and cities[2] == "A3"


def test_exactly_once_after_a_crash_between_run_and_commit(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    root = make_root("src")
    root.append([("p", 1), ("q", 2)])
    add_derivative(ws, "copy", ["src"], "SELECT event_time, city FROM src")
    # The engine runs, then the process "crashes": nothing is committed.
    plan = plan_transform(ws, "copy")
    orphan = run_transform(plan, engine, transform_work_dir(ws))
    assert orphan.num_records == 2
    assert ws.get("copy").head() == plan.head

    # The re-run plans the same range and commits it once.
    r = pull_derivative(ws, "copy", engine=engine)
    assert r.status is PullStatus.UPDATED and r.num_records == 2
    assert pull_derivative(ws, "copy", engine=engine).status is PullStatus.UP_TO_DATE
    # Committing the stale run now loses the head CAS and writes nothing.
    head = ws.get("copy").head()
    with pytest.raises(RefCASFailed):
        commit_transform(ws, orphan)
    assert ws.get("copy").head() == head
    assert read_records(ws.get("copy")).column("city").to_pylist() == ["p", "q"]


def test_watermarks_and_checkpoints(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    w1, w2, w3 = 1_600_000_000_000, 1_650_000_000_000, 1_700_000_000_000
    ticks, other = make_root("ticks"), make_root("other")
    ticks.append([("t", 1)], watermark_ms=w1)
    other.append([("o", 1)], watermark_ms=w2)
    add_derivative(
        ws,
        "ticks.both",
        ["ticks", "other"],
        "SELECT event_time, city FROM ticks UNION ALL SELECT event_time, city FROM other",
    )
    r1 = pull_derivative(ws, "ticks.both", engine=engine)
    assert r1.new_watermark == ts_ms(w1)  # the minimum over inputs
    # A watermark alone is news; `other` has nothing new, so its watermark comes from
    # the previous checkpoint and bounds the output's.
    ticks.append([], watermark_ms=w3)
    r2 = pull_derivative(ws, "ticks.both", engine=engine)
    assert r2.status is PullStatus.UPDATED and r2.num_records == 0
    assert r2.new_watermark == ts_ms(w2)
    other.append([("u", 2)], watermark_ms=w3)
    r3 = pull_derivative(ws, "ticks.both", engine=engine)
    assert r3.num_records == 1 and r3.new_watermark == ts_ms(w3)
    e1, e2, e3 = transforms_of(ws.get("ticks.both"))
    assert e1.new_checkpoint is not None and e1.prev_checkpoint is None
    assert e2.prev_checkpoint == e1.new_checkpoint.physical_hash
    assert e2.new_data is None and e2.new_checkpoint is not None
    assert e3.prev_checkpoint == e2.new_checkpoint.physical_hash
    assert e2.query_inputs[1].new_block_hash is None
    assert verify_integrity(ws.get("ticks.both")).ok


def test_bad_query_commits_nothing(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    make_root("r").append([("a", 1)])
    add_derivative(ws, "bad", ["r"], "SELECT no_such_column FROM r")
    head = ws.get("bad").head()
    with pytest.raises(InvalidQuery) as info:
        pull_derivative(ws, "bad", engine=engine)
    assert "no_such_column" in str(info.value)
    assert ws.get("bad").head() == head
    blocks = [b.event for _h, _r, b in ws.get("bad").iter_blocks()]
    assert not any(isinstance(e, ExecuteTransform | SetDataSchema) for e in blocks)


# -- no Spark needed --------------------------------------------------------------------------


def test_plan_intervals_and_up_to_date(ws: Workspace, make_root: MakeRoot) -> None:
    root = make_root("base")
    add_derivative(ws, "d", ["base"], "SELECT * FROM base")
    # The input has blocks but no data yet: nothing to run.
    assert plan_transform(ws, "d").up_to_date
    h = root.append([("a", 1), ("b", 2)])
    plan = plan_transform(ws, "d")
    assert not plan.up_to_date and plan.next_offset == 0
    (inp,) = plan.inputs
    assert inp.new_block_hash == h and inp.prev_block_hash is None
    assert inp.offset_interval is not None
    assert (inp.offset_interval.start, inp.offset_interval.end) == (0, 1)
    assert len(inp.data_files) == 1 and inp.data_files[0].is_file()
    assert inp.query_alias == "base"


def test_pull_of_a_root_dataset_is_refused(ws: Workspace, make_root: MakeRoot) -> None:
    make_root("root")
    with pytest.raises(NotDerivative):
        plan_transform(ws, "root")


def test_input_without_schema_is_not_ready(ws: Workspace, make_root: MakeRoot) -> None:
    make_root("empty").append([], watermark_ms=1_600_000_000_000)
    add_derivative(ws, "d2", ["empty"], "SELECT * FROM empty")
    plan = plan_transform(ws, "d2")
    assert not plan.up_to_date  # a watermark is news
    with pytest.raises(InputNotReady):
        from node.transform import build_request

        build_request(plan, transform_work_dir(ws))


def test_pin_engine_version_fills_only_missing_spark_versions() -> None:
    from engine.spark import engine_identity
    from fbs.model import DatasetKind, DatasetSnapshot, SetTransform, TransformInput, TransformSql
    from node.transform import pin_engine_version

    def snap(version: str | None, engine: str = "spark") -> DatasetSnapshot:
        t = TransformSql(engine=engine, version=version, query="SELECT 1")
        return DatasetSnapshot(
            name="d",
            kind=DatasetKind.Derivative,
            metadata=(SetTransform(inputs=(TransformInput(dataset_ref="r"),), transform=t),),
        )

    pinned = pin_engine_version(snap(None)).metadata[0]
    assert isinstance(pinned, SetTransform) and isinstance(pinned.transform, TransformSql)
    assert pinned.transform.version == engine_identity()
    assert pin_engine_version(snap("x")) == snap("x")
    assert pin_engine_version(snap(None, "datafusion")) == snap(None, "datafusion")


def test_cli_handlers_pull_and_verify(
    ws: Workspace,
    make_root: MakeRoot,
    engine_process: EngineProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse
    import json

    from node.commands.pull import cmd_pull_derivative
    from node.commands.verify import cmd_verify_replay
    from node.errors import VerificationFailed

    monkeypatch.setenv("ODF_ENGINE_ADDRESS", engine_process.address)
    make_root("raw").append([("a", 1), ("b", 2)])
    add_derivative(ws, "raw.copy", ["raw"], "SELECT event_time, city FROM raw")
    args = argparse.Namespace(
        workspace=str(ws.root.parent), dataset=["raw.copy"], recursive=True, output_format="json"
    )
    assert cmd_pull_derivative(args) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["dataset"] == "raw.copy" and row["status"] == "updated" and row["records"] == 2
    assert cmd_verify_replay(args) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["transformsReplayed"] == 1
    # Damage the data file: integrity fails first, and the handler says so.
    ds = ws.get("raw.copy")
    (e,) = transforms_of(ds)
    assert e.new_data is not None
    path = ds.layout.data.path_of(e.new_data.physical_hash)
    path.chmod(0o644)
    path.write_bytes(b"garbage")
    with pytest.raises(VerificationFailed):
        cmd_verify_replay(args)
    (report,) = json.loads(capsys.readouterr().out)
    assert not report["ok"] and not report["integrity"] and report["integrityProblem"]


def test_output_schema_evolves_when_an_input_gains_a_column(
    ws: Workspace, tmp_path: Path, engine: EngineClient
) -> None:
    src = AddPushSource(source_name="default", read=ReadStepParquet(), merge=MergeStrategyAppend())
    ws.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=(src,)))
    ts = pa.timestamp("ms", "UTC")

    def push(name: str, **cols: pa.Array) -> None:
        path = tmp_path / name
        pq.write_table(pa.table({"event_time": pa.array([0], ts), **cols}), path)
        ingest(ws.get("src"), [path])

    push("a.parquet", city=pa.array(["A"]))
    add_derivative(ws, "all", ["src"], "SELECT * EXCEPT (offset, op, system_time) FROM src")
    assert pull_derivative(ws, "all", engine=engine).num_records == 1
    push("b.parquet", city=pa.array(["B"]), area=pa.array([7]))
    # The new optional column flows through: SetDataSchema, then ExecuteTransform.
    r = pull_derivative(ws, "all", engine=engine)
    assert r.status is PullStatus.UPDATED and r.num_records == 1
    events = [b.event for _h, _r, b in ws.get("all").iter_blocks()][::-1]
    assert [type(e).__name__ for e in events[-2:]] == ["SetDataSchema", "ExecuteTransform"]
    schema = events[-2]
    assert isinstance(schema, SetDataSchema) and schema.schema is not None
    area = {f.name: f for f in schema.schema.fields}["area"]
    assert isinstance(area.type, DataTypeOption)
    t = read_changelog(ws.get("all"))
    assert t is not None
    assert t.column("area").to_pylist() == [None, 7]
    assert t.column("city").to_pylist() == ["A", "B"]
    assert verify_integrity(ws.get("all")).ok
    # Replay reproduces both transforms under the schemas in force at their blocks.
    report = verify_replay(ws, "all", engine=engine)
    assert report.mismatch is None and report.transforms_replayed == 2


def pa_schema(fields: list[tuple[str, str]]) -> pa.Schema:
    """A schema from short type names (``!`` = not null)."""
    types = {"ts": pa.timestamp("ms", "UTC"), "str": pa.string(), "i64": pa.int64()}
    return pa.schema(
        [pa.field(n, types[t.rstrip("!")], nullable=not t.endswith("!")) for n, t in fields]
    )


def test_evolved_schema_rules() -> None:
    cur = SetDataSchema(
        schema=data_schema_from_arrow(pa_schema([("event_time", "ts"), ("city", "str")]))
    )
    added = SetDataSchema(
        schema=data_schema_from_arrow(
            pa_schema([("event_time", "ts"), ("area", "i64!"), ("city", "str")])
        )
    )
    new = evolved_schema(cur, added)
    assert new is not None and new.schema is not None
    fields = {f.name: f for f in new.schema.fields}
    assert [f.name for f in new.schema.fields] == ["event_time", "area", "city"]
    assert isinstance(fields["area"].type, DataTypeOption)  # recorded as optional
    assert cur.schema is not None
    assert fields["city"] == {f.name: f for f in cur.schema.fields}["city"]
    dropped = SetDataSchema(schema=data_schema_from_arrow(pa_schema([("event_time", "ts")])))
    retyped = SetDataSchema(
        schema=data_schema_from_arrow(pa_schema([("event_time", "ts"), ("city", "i64")]))
    )
    assert evolved_schema(cur, dropped) is None
    assert evolved_schema(cur, retyped) is None
    assert evolved_schema(cur, cur) is None


def test_recursive_order_stops_at_replicas(ws: Workspace, make_root: MakeRoot) -> None:
    """An upstream derivative pulled from another node (a pull alias) is a leaf of a
    recursive pull, like a root: its transform does not run here (its inputs live on the
    publisher's node), while a local upstream derivative still runs first."""
    from fbs.manifest.dataset_config import DatasetConfig
    from node.transform import derivative_order

    make_root("src")
    add_derivative(ws, "mid", ["src"], "SELECT * FROM src")
    add_derivative(ws, "top", ["mid"], "SELECT * FROM mid")
    ids = {a: ws.resolve(a).id for a in ("mid", "top")}
    assert derivative_order(ws, "top") == [ids["mid"], ids["top"]]
    ws.get("mid").layout.write_config(DatasetConfig(("odf+http://node.example/mid",)))
    assert derivative_order(ws, "top") == [ids["top"]]
    # The replica itself, pulled by name, is dispatched to its pull alias before this.
    assert derivative_order(ws, "mid") == [ids["mid"]]
