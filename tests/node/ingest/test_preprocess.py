"""Preprocess reaches its engine through `node.engine_manager`, as transform and SQL do.

The engine here is a stand-in gRPC service speaking the engine contract (no JVM): it
answers ``ExecuteRawQuery`` by copying its input and adding a column ``via`` naming
itself, so the committed data shows that the query went through it. A query naming
``bad_column`` is refused as an invalid query. Spark itself runs preprocess in
``test_pipeline.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from engine.proto import engine_pb2 as pb
from engine.proto import engine_pb2_grpc as pb_grpc
from fbs.codec import decode_table, encode_table
from fbs.model import (
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    MergeStrategyAppend,
    ReadStepCsv,
    SqlQueryStep,
    TransformSql,
)
from fbs.model.engine import (
    RawQueryRequest,
    RawQueryResponseInvalidQuery,
    RawQueryResponseRoot,
    RawQueryResponseSuccess,
)
from node.engine_manager import ENGINE_ADDRESS_ENV, ENGINE_RUN_DIR_ENV, workspace_of
from node.ingest.errors import PreprocessError
from node.ingest.pipeline import ingest, read_changelog
from storage.dataset import Dataset
from storage.layout import DatasetLayout
from storage.workspace import Workspace

CSV = "event_time,city,population\n2020-01-01T00:00:00Z,a,1\n2020-01-01T00:00:00Z,b,2\n"
#: Nothing listens here: an engine looked up through the environment would fail.
NOWHERE = "127.0.0.1:1"


class StandInEngine(pb_grpc.EngineServicer):
    """Answers raw queries with the input plus a ``via`` column; keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[RawQueryRequest] = []

    def ExecuteRawQuery(self, request: pb.RawQueryRequest, context: Any) -> Iterator[Any]:
        req = decode_table(RawQueryRequest, request.flatbuffer)
        self.requests.append(req)
        query = " ".join(step.query for step in req.transform.queries or ())
        value: Any
        if "bad_column" in query:
            value = RawQueryResponseInvalidQuery(message="no column bad_column")
        else:
            table = pq.read_table(list(req.input_data_paths))
            table = table.append_column("via", pa.array(["stand-in"] * table.num_rows))
            pq.write_table(table, req.output_data_path)
            value = RawQueryResponseSuccess(num_records=table.num_rows)
        yield pb.RawQueryResponse(flatbuffer=encode_table(RawQueryResponseRoot(value=value)))

    def ExecuteTransform(self, request: pb.TransformRequest, context: Any) -> Iterator[Any]:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the stand-in runs raw queries only")
        yield from ()


@pytest.fixture
def stand_in() -> Iterator[tuple[StandInEngine, str]]:
    servicer = StandInEngine()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_EngineServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def _dataset(tmp_path: Path, query: str | None) -> tuple[Workspace, Dataset]:
    ws = Workspace.init(tmp_path / "ws")
    pre = (
        None
        if query is None
        else TransformSql(engine="spark", queries=(SqlQueryStep(query=query),))
    )
    src = AddPushSource(
        source_name="default",
        read=ReadStepCsv(
            header=True, ddl_schema=("event_time TIMESTAMP", "city STRING", "population BIGINT")
        ),
        preprocess=pre,
        merge=MergeStrategyAppend(),
    )
    snap = DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(src,))
    return ws, ws.add_snapshot(snap)


def _input(tmp_path: Path) -> Path:
    path = tmp_path / "in.csv"
    path.write_text(CSV)
    return path


def test_preprocess_reaches_the_configured_engine(
    tmp_path: Path, stand_in: tuple[StandInEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, address = stand_in
    monkeypatch.setenv(ENGINE_ADDRESS_ENV, address)
    ws, ds = _dataset(tmp_path, "SELECT * FROM input")
    result = ingest(ds, [_input(tmp_path)])
    assert result.num_records == 2
    [request] = servicer.requests
    assert request.transform.queries is not None
    assert request.transform.queries[0].query == "SELECT * FROM input"
    table = read_changelog(ds)
    assert table is not None and table.column("via").to_pylist() == ["stand-in"] * 2
    # The configured engine is used as is: no shared engine was started or recorded.
    assert not (ws.root / "run").exists()


def test_an_engine_given_wins_over_the_configured_one(
    tmp_path: Path, stand_in: tuple[StandInEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, address = stand_in
    monkeypatch.setenv(ENGINE_ADDRESS_ENV, NOWHERE)
    _ws, ds = _dataset(tmp_path, "SELECT * FROM input")
    with EngineClient(address) as client:
        assert ingest(ds, [_input(tmp_path)], engine=client).num_records == 2
    assert len(servicer.requests) == 1


def test_an_invalid_query_commits_nothing(
    tmp_path: Path, stand_in: tuple[StandInEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _servicer, address = stand_in
    monkeypatch.setenv(ENGINE_ADDRESS_ENV, address)
    _ws, ds = _dataset(tmp_path, "SELECT bad_column FROM input")
    head = ds.head()
    with pytest.raises(PreprocessError, match="no column bad_column"):
        ingest(ds, [_input(tmp_path)])
    assert ds.head() == head


def test_ingest_without_preprocess_reaches_no_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENGINE_ADDRESS_ENV, raising=False)
    monkeypatch.setenv(ENGINE_RUN_DIR_ENV, str(tmp_path / "engine-run"))
    ws, ds = _dataset(tmp_path, None)
    assert ingest(ds, [_input(tmp_path)]).num_records == 2
    # Looking the engine up would have leased (or started) the user's shared engine.
    assert not (tmp_path / "engine-run").exists()
    assert not (ws.root / "run").exists()


def test_a_dataset_knows_its_workspace(tmp_path: Path) -> None:
    ws, ds = _dataset(tmp_path, None)
    found = workspace_of(ds)
    assert found is not None and found.root == ws.root
    loose = Dataset.create(DatasetLayout(tmp_path / "loose" / "datasets" / "x"))
    assert workspace_of(loose) is None


def test_the_python_api_preprocesses_on_the_same_engine(
    tmp_path: Path, stand_in: tuple[StandInEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from node.api import open_workspace

    servicer, address = stand_in
    monkeypatch.setenv(ENGINE_ADDRESS_ENV, address)
    ws, _ds = _dataset(tmp_path, "SELECT * FROM input")
    with open_workspace(ws.root.parent) as api:
        view = api.dataset("pop")
        assert view.ingest([_input(tmp_path)]).num_records == 2
        assert view.to_arrow().column("via").to_pylist() == ["stand-in"] * 2
    assert len(servicer.requests) == 1
