"""Nested values (lists, structs, maps, decimals inside them) through every text output of
``odf tail``, ``odf export`` and ``odf sql``: CSV cells hold their JSON text, JSON/YAML keep
the structure, tables show the JSON text. CSV output of a nested column is never an exit-1
traceback, and JSON/YAML never hold Python reprs (``"['x', 'y']"``).

Real CLI processes over a workspace filled by ``odf add`` + ``odf ingest``; the expected
values come from the ingested NDJSON itself."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: events
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: NdJson
        ddlSchema:
          - "event_time TIMESTAMP"
          - "user STRING"
          - "tags ARRAY<STRING>"
          - "geo STRUCT<lat: DOUBLE, price: DECIMAL(10,2)>"
      merge:
        kind: Append
"""

ROWS: list[dict[str, Any]] = [
    {
        "event_time": "2024-01-01T00:00:00Z",
        "user": "a",
        "tags": ["x", 'y, "quoted"'],
        "geo": {"lat": 1.5, "price": "10.25"},
    },
    {"event_time": "2024-01-02T00:00:00Z", "user": "b", "tags": [], "geo": None},
]


def odf(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(root), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nested")
    odf(root, "init")
    (root / "events.yaml").write_text(MANIFEST)
    odf(root, "add", str(root / "events.yaml"))
    data = root / "events.ndjson"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    odf(root, "ingest", "events", str(data))
    return root


def data_columns(rows: Any) -> list[dict[str, object]]:
    return [{k: r[k] for k in ("user", "tags", "geo")} for r in rows]


def from_csv(text: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for r in csv.DictReader(io.StringIO(text)):
        out.append(
            {
                "user": r["user"],
                "tags": json.loads(r["tags"]),
                "geo": json.loads(r["geo"]) if r["geo"] else None,
            }
        )
    return out


@pytest.mark.parametrize(
    "argv",
    [
        ("tail", "events", "--output-format", "csv"),
        ("export", "events", "--output-format", "csv"),
        ("sql", "SELECT user, tags, geo FROM events ORDER BY user", "--output-format", "csv"),
    ],
)
def test_csv_cells_hold_the_json_of_nested_values(root: Path, argv: tuple[str, ...]) -> None:
    assert from_csv(odf(root, *argv).stdout) == data_columns(ROWS)


@pytest.mark.parametrize(
    "argv",
    [
        ("tail", "events", "--output-format", "json"),
        ("sql", "SELECT user, tags, geo FROM events ORDER BY user", "--output-format", "json"),
    ],
)
def test_json_keeps_the_structure(root: Path, argv: tuple[str, ...]) -> None:
    assert data_columns(json.loads(odf(root, *argv).stdout)) == data_columns(ROWS)


def test_ndjson_export_and_yaml_tail_keep_the_structure(root: Path) -> None:
    lines = odf(root, "export", "events", "--output-format", "ndjson").stdout.splitlines()
    assert data_columns([json.loads(line) for line in lines]) == data_columns(ROWS)
    yaml_text = odf(root, "tail", "events", "--output-format", "yaml").stdout
    assert "['x'" not in yaml_text and "price: '10.25'" in yaml_text


@pytest.mark.parametrize(
    "argv",
    [("tail", "events"), ("sql", "SELECT user, tags, geo FROM events ORDER BY user")],
)
def test_tables_show_the_json_text(root: Path, argv: tuple[str, ...]) -> None:
    out = odf(root, *argv).stdout  # (a table narrower than its cells folds them)
    assert '{"lat":1.5,"price":"10' in out
    assert '["x","y, \\"quoted\\""]' in out
    assert "'lat'" not in out
