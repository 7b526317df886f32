"""``odf ingest / pull / tail / inspect schema / export`` through `node.cli.main`."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from node.cli import main
from node.cli_util import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: pop
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Csv
      header: true
      ddlSchema:
      - event_time TIMESTAMP
      - city STRING
      - population BIGINT
    merge:
      kind: Ledger
      primaryKey:
      - city
"""
DATA = "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-02T00:00:00Z,B,2\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "pop.yaml").write_text(MANIFEST)
    (tmp_path / "data.csv").write_text(DATA)
    assert main(["-w", str(tmp_path), "init"]) == EXIT_OK
    assert main(["-w", str(tmp_path), "add", str(tmp_path / "pop.yaml")]) == EXIT_OK
    return tmp_path


def odf(ws: Path, *args: str) -> int:
    return main(["-w", str(ws), *args])


def test_ingest_then_tail(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert odf(ws, "ingest", "pop", str(ws / "data.csv")) == EXIT_OK
    assert "Ingested 2 record(s)" in capsys.readouterr().out
    assert odf(ws, "tail", "pop", "-n", "1", "--output-format", "json") == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    assert [r["city"] for r in rows] == ["B"]
    assert rows[0]["offset"] == 1
    assert odf(ws, "ingest", "pop", str(ws / "data.csv")) == EXIT_OK
    assert "Nothing ingested" in capsys.readouterr().out


def test_ingest_stdin(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeStdin:
        buffer = io.BytesIO(DATA.encode())

    monkeypatch.setattr(sys, "stdin", FakeStdin())
    assert odf(ws, "ingest", "pop", "--stdin") == EXIT_OK
    assert odf(ws, "ingest", "pop") == EXIT_USAGE


def test_bad_input_exit_code_and_message(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ws / "bad.csv").write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,lots\n")
    assert odf(ws, "ingest", "pop", str(ws / "bad.csv")) == EXIT_INVALID
    assert "bad.csv" in capsys.readouterr().err
    assert odf(ws, "ingest", "--source-name", "nope", "pop", str(ws / "data.csv")) == (
        EXIT_NOT_FOUND
    )
    assert odf(ws, "pull", "pop") == EXIT_NOT_FOUND


def test_inspect_schema_formats(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert odf(ws, "inspect", "schema", "pop") == EXIT_USAGE  # no schema yet
    capsys.readouterr()
    odf(ws, "ingest", "pop", str(ws / "data.csv"))
    capsys.readouterr()
    assert odf(ws, "inspect", "schema", "pop") == EXIT_OK
    ddl = capsys.readouterr().out.splitlines()
    assert ddl[:2] == ["offset BIGINT NOT NULL", "op INT NOT NULL"]
    assert "population BIGINT" in ddl
    assert odf(ws, "inspect", "schema", "pop", "--output-format", "odf-yaml") == EXIT_OK
    out = capsys.readouterr().out
    assert "name: system_time" in out and "kind: Option" in out
    assert odf(ws, "inspect", "schema", "pop", "--output-format", "arrow") == EXIT_OK
    assert "event_time: timestamp[ms, tz=UTC]" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["parquet", "csv", "ndjson"])
def test_export(ws: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    odf(ws, "ingest", "pop", str(ws / "data.csv"))
    out = ws / f"out.{fmt}"
    assert odf(ws, "export", "pop", "--output-format", fmt, "--output-path", str(out)) == EXIT_OK
    if fmt == "parquet":
        assert pq.read_table(out).column("city").to_pylist() == ["A", "B"]
    elif fmt == "csv":
        lines = out.read_text().splitlines()
        assert lines[0].startswith('"offset","op"') and len(lines) == 3
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["city"] for r in rows] == ["A", "B"]
        assert rows[0]["event_time"] == "2020-01-01T00:00:00Z"


def test_pull_set_watermark(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odf(ws, "ingest", "pop", str(ws / "data.csv"))
    assert odf(ws, "pull", "pop", "--set-watermark", "2030-01-01T00:00:00Z") == EXIT_OK
    assert "watermark 2030-01-01T00:00:00Z" in capsys.readouterr().out


NESTED_SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: stock
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: NdJson
      ddlSchema:
      - sku STRING
      - tags ARRAY<STRING>
      - ts TIMESTAMP
    merge:
      kind: Snapshot
      primaryKey:
      - sku
  - kind: SetVocab
    eventTimeColumn: ts
"""


def test_snapshot_of_a_list_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Snapshot source with a list column: each snapshot merges (a change in the list
    alone is a correction), instead of an exit-1 traceback from a missing Arrow kernel."""
    (tmp_path / "stock.yaml").write_text(NESTED_SNAPSHOT)
    assert odf(tmp_path, "init") == EXIT_OK
    assert odf(tmp_path, "add", str(tmp_path / "stock.yaml")) == EXIT_OK
    snaps = [
        [("a", ["x"]), ("b", [])],
        [("a", ["x", "y"]), ("b", []), ("c", None)],
    ]
    for i, snap in enumerate(snaps):
        path = tmp_path / f"s{i}.json"
        lines = [json.dumps({"sku": s, "tags": t, "ts": f"2024-01-0{i + 1}"}) for s, t in snap]
        path.write_text("\n".join(lines) + "\n")
        assert odf(tmp_path, "ingest", "stock", str(path)) == EXIT_OK
    capsys.readouterr()
    assert odf(tmp_path, "tail", "stock", "-n", "10", "--output-format", "json") == EXIT_OK
    rows = [(r["op"], r["sku"], r["tags"]) for r in json.loads(capsys.readouterr().out)]
    assert rows == [
        (0, "a", ["x"]),
        (0, "b", []),
        (2, "a", ["x"]),
        (3, "a", ["x", "y"]),
        (0, "c", None),
    ]
