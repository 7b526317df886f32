"""Input accepted the way kamu accepts it, but never silently (real ``odf`` processes).

A CSV read under a declared schema whose header names differ is read by position (kamu's
reader lets the declared schema replace the header), with one warning naming the columns;
header columns the schema does not declare are ignored with a warning; a file that holds no
record in the declared format says so instead of a bare "Nothing to ingest".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
ROWS = "2020-01-01T00:00:00Z,A,1\n2020-01-02T00:00:00Z,B,2\n"


def odf(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    return subprocess.run(
        [exe, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "pop.yaml").write_text(MANIFEST)
    assert odf(tmp_path, "init").returncode == 0
    assert odf(tmp_path, "add", str(tmp_path / "pop.yaml")).returncode == 0
    return tmp_path


def warnings_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("odf: warning:")]


def cities(ws: Path) -> list[str]:
    out = odf(ws, "tail", "pop", "-n", "10", "--output-format", "json")
    assert out.returncode == 0, out.stderr
    return sorted(r["city"] for r in json.loads(out.stdout))


def test_matching_header_reads_without_a_warning(ws: Path) -> None:
    (ws / "ok.csv").write_text("event_time,city,population\n" + ROWS)
    result = odf(ws, "ingest", "pop", str(ws / "ok.csv"))
    assert result.returncode == 0, result.stderr
    assert warnings_of(result) == []


def test_header_names_differing_are_read_by_position_with_one_warning(ws: Path) -> None:
    (ws / "renamed.csv").write_text("time,town,population\n" + ROWS)
    result = odf(ws, "ingest", "pop", str(ws / "renamed.csv"))
    assert result.returncode == 0, result.stderr
    assert warnings_of(result) == [
        "odf: warning: renamed.csv: header names differ from the schema, columns read by "
        "position: time as event_time, town as city"
    ]
    assert cities(ws) == ["A", "B"]


def test_extra_columns_are_named_in_a_warning(ws: Path) -> None:
    (ws / "extra.csv").write_text(
        "city,event_time,population,note\n"
        "A,2020-01-01T00:00:00Z,1,first\nB,2020-01-02T00:00:00Z,2,second\n"
    )
    result = odf(ws, "ingest", "pop", str(ws / "extra.csv"))
    assert result.returncode == 0, result.stderr
    assert warnings_of(result) == [
        "odf: warning: extra.csv: columns not in the schema are ignored: note"
    ]
    assert cities(ws) == ["A", "B"]


def test_ndjson_given_to_a_csv_source_says_no_csv_records(ws: Path) -> None:
    log_before = odf(ws, "log", "pop").stdout
    record = {"event_time": "2020-01-01T00:00:00Z", "city": "A", "population": 1}
    (ws / "data.ndjson").write_text(json.dumps(record) + "\n")
    result = odf(ws, "ingest", "pop", str(ws / "data.ndjson"))
    assert result.returncode == 0, result.stderr
    assert warnings_of(result) == [
        "odf: warning: data.ndjson: no CSV records (the file holds only a header line); "
        "it looks like JSON"
    ]
    assert odf(ws, "log", "pop").stdout == log_before
