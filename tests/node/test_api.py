"""Python API: open a workspace, ingest, read back with projections."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path

import pyarrow as pa
import pytest

import node.api as odf
from fbs.errors import InvalidTimestamp
from fbs.model import (
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    MergeStrategyAppend,
    MergeStrategySnapshot,
    ReadStepCsv,
    Timestamp,
)
from node.errors import UsageError

DDL = ("event_time TIMESTAMP", "city STRING", "population BIGINT")
V1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-01T00:00:00Z,B,2\n"
V2 = "event_time,city,population\n2021-01-01T00:00:00Z,A,10\n"


def setup(tmp_path: Path, merge: object = None) -> odf.Workspace:
    from storage.workspace import Workspace

    ws = Workspace.init(tmp_path)
    src = AddPushSource(
        source_name="default",
        read=ReadStepCsv(header=True, ddl_schema=DDL),
        merge=merge or MergeStrategySnapshot(primary_key=("city",)),  # type: ignore[arg-type]
    )
    ws.add_snapshot(DatasetSnapshot(name="pop", kind=DatasetKind.Root, metadata=(src,)))
    (tmp_path / "v1.csv").write_text(V1)
    (tmp_path / "v2.csv").write_text(V2)
    return odf.open_workspace(tmp_path)


def test_ingest_and_read_back(tmp_path: Path) -> None:
    with setup(tmp_path) as ws:
        assert ws.datasets() == ["pop"]
        ds = ws.dataset("pop")
        assert ds.to_arrow().num_rows == 0
        assert ds.schema() == pa.schema([])
        ds.ingest([tmp_path / "v1.csv"])
        first_head = ds.dataset.head()
        ds.ingest([tmp_path / "v2.csv"])
        table = ds.to_arrow()
        assert table.column("op").to_pylist() == [0, 0, 1, 2, 3]
        schema = ds.schema()
        assert schema.names[:4] == ["offset", "op", "system_time", "event_time"]
        assert ds.tail(1).column("offset").to_pylist() == [4]
        assert first_head is not None
        assert ds.as_of(first_head).to_arrow().num_rows == 2
        assert ds.as_of(str(first_head)).to_arrow().num_rows == 2


def test_current_state_applies_retractions(tmp_path: Path) -> None:
    with setup(tmp_path) as ws:
        ds = ws.dataset("pop")
        ds.ingest([tmp_path / "v1.csv"])
        ds.ingest([tmp_path / "v2.csv"])
        live = ds.current_state()
        assert live.column("city").to_pylist() == ["A"]
        assert live.column("population").to_pylist() == [10]
        assert "op" not in live.column_names


def test_as_of_system_time(tmp_path: Path) -> None:
    with setup(tmp_path) as ws:
        ds = ws.dataset("pop")
        ds.ingest([tmp_path / "v1.csv"])
        between = Timestamp.now()
        ds.ingest([tmp_path / "v2.csv"])
        assert ds.as_of(between).to_arrow().num_rows == 2
        with pytest.raises(UsageError, match="did not exist"):
            ds.as_of(Timestamp.parse_rfc3339("2000-01-01T00:00:00Z"))
        pinned = ds.as_of(between)
        with pytest.raises(UsageError, match="read-only"):
            pinned.ingest([tmp_path / "v1.csv"])
        # A Python user's datetime works as well; a naive one is refused, not guessed.
        aware = between.to_datetime().astimezone(dt.timezone(dt.timedelta(hours=5)))
        assert ds.as_of(aware).head == pinned.head
        with pytest.raises(InvalidTimestamp, match="naive"):
            ds.as_of(between.to_datetime().replace(tzinfo=None))


def test_as_of_unknown_block(tmp_path: Path) -> None:
    with setup(tmp_path) as ws, pytest.raises(UsageError, match="not in the dataset"):
        ws.dataset("pop").as_of("f1620" + "00" * 32)


def test_current_state_needs_a_key_for_append(tmp_path: Path) -> None:
    with setup(tmp_path, MergeStrategyAppend()) as ws:
        ds = ws.dataset("pop")
        ds.ingest([tmp_path / "v1.csv"])
        with pytest.raises(UsageError, match="primary_key"):
            ds.current_state()
        assert ds.current_state(primary_key=["city"]).num_rows == 2


@pytest.mark.skipif(importlib.util.find_spec("pandas") is not None, reason="pandas installed")
def test_to_pandas_without_pandas_names_the_package(tmp_path: Path) -> None:
    with setup(tmp_path) as ws, pytest.raises(odf.MissingDependency, match="pip install pandas"):
        ws.dataset("pop").to_pandas()


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas missing")
def test_to_pandas(tmp_path: Path) -> None:
    with setup(tmp_path) as ws:
        ds = ws.dataset("pop")
        ds.ingest([tmp_path / "v1.csv"])
        assert len(ds.to_pandas()) == 2
