"""``odf sql`` over workspace datasets, run on the shared Spark engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.client import EngineClient
from engine.errors import InvalidQuery
from engine.process import EngineProcess
from node.cli import main
from node.sql.query import run_sql
from storage.workspace import Workspace
from tests.node.conftest import RootWriter

MakeRoot = Callable[[str], RootWriter]


def test_join_across_datasets_with_dotted_alias(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient, tmp_path: Path
) -> None:
    make_root("com.example.cities").append([("a", 1), ("b", 2)])
    make_root("areas").append([("a", 10), ("b", 20), ("c", 30)])
    make_root("unrelated")  # no schema yet, not mentioned: ignored
    result = run_sql(
        ws,
        "SELECT c.city, c.population + a.population AS total "
        "FROM `com.example.cities` c JOIN areas a ON c.city = a.city ORDER BY c.city",
        tmp_path / "out.parquet",
        engine=engine,
    )
    assert result.num_records == 2
    assert result.read().to_pylist() == [
        {"city": "a", "total": 11},
        {"city": "b", "total": 22},
    ]
    with pytest.raises(InvalidQuery):
        run_sql(ws, "SELECT nope FROM areas", tmp_path / "bad.parquet", engine=engine)


def test_cli_sql_json_and_csv(
    ws: Workspace,
    make_root: MakeRoot,
    engine_process: EngineProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    make_root("nums").append([("x", 7), ("y", 8)])
    monkeypatch.setenv("ODF_ENGINE_ADDRESS", engine_process.address)
    args = ["-w", str(ws.root.parent), "sql"]
    query = "SELECT city, population FROM nums ORDER BY city"
    assert main([*args, query, "--output-format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"city": "x", "population": 7},
        {"city": "y", "population": 8},
    ]
    out = tmp_path / "r.csv"
    assert main([*args, query, "--output-format", "csv", "--output-path", str(out)]) == 0
    assert out.read_text().splitlines() == ['"city","population"', '"x",7', '"y",8']
