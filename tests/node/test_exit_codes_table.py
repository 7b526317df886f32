"""README's exit-code table, one test per row, over real ``odf`` processes.

Each test runs the failure a new user meets, checks the exit code the table gives for it
and that the error is one ``odf: error:`` line in words (no Python or Spark internals).
Exit 1 is only for bugs and has no row here; 130 (Ctrl-C) is in `test_progress`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "node" / "examples"
ROOT_ALIAS = "demo.city-populations"
DERIVATIVE_ALIAS = "demo.big-cities"
BAD_SQL = """\
kind: DatasetSnapshot
version: 1
content:
  name: demo.broken
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: demo.city-populations
      alias: cities
    transform:
      kind: Sql
      engine: spark
      query: SELECT city FORM cities WHERE
"""


def odf(ws: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    return subprocess.run(
        [exe, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed run (and nothing like a traceback around it)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("odf: error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return errors[0]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root and a derivative reading it (no engine needed: nothing is pulled)."""
    root = tmp_path_factory.mktemp("ws")
    assert odf(root, "init").returncode == 0
    added = odf(root, "add", str(EXAMPLES / "city-populations.yaml"))
    assert added.returncode == 0, added.stderr
    added = odf(root, "add", str(EXAMPLES / "big-cities.yaml"))
    assert added.returncode == 0, added.stderr
    return root


def test_0_success_and_o_on_every_listing(ws: Path) -> None:
    listed = odf(ws, "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    aliases = {d["alias"] for d in json.loads(listed.stdout)}
    assert aliases == {ROOT_ALIAS, DERIVATIVE_ALIAS}
    for args in (("log", ROOT_ALIAS), ("attestations", ROOT_ALIAS), ("verify", "--integrity")):
        result = odf(ws, *args, "-o", "json")
        assert result.returncode == 0, (args, result.stderr)
        json.loads(result.stdout)


def test_2_usage_a_validator_that_is_no_did(ws: Path) -> None:
    result = odf(ws, "verify", ROOT_ALIAS, "--trust", "1", "--validator", "did:key:z6MkWRONG")
    assert result.returncode == 2
    line = error_line(result)
    assert "is not a validator's DID" in line and "did:key:z6Mk" in line
    assert "multibase" not in line and "alphabet" not in line


def test_3_not_found_following_an_unknown_name(ws: Path) -> None:
    result = odf(ws, "node", "follow", "no.such.dataset")
    assert result.returncode == 3
    assert "no.such.dataset" in error_line(result)
    assert not (ws / ".odf" / "p2p" / "follow.json").exists()


def test_4_invalid_ingest_into_a_derivative(ws: Path, tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1\n")
    log_before = odf(ws, "log", DERIVATIVE_ALIAS).stdout
    result = odf(ws, "ingest", DERIVATIVE_ALIAS, str(data))
    assert result.returncode == 4
    line = error_line(result)
    assert "derivative" in line and "push source" not in line
    assert odf(ws, "log", DERIVATIVE_ALIAS).stdout == log_before


def test_4_invalid_sql_syntax_refused_at_add(ws: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(BAD_SQL)
    result = odf(ws, "add", str(manifest))
    assert result.returncode == 4
    line = error_line(result)
    assert "demo.broken" in line and "SQL syntax error" in line
    assert "demo.broken" not in odf(ws, "list").stdout


def test_5_verification_failed_on_a_damaged_object(tmp_path: Path) -> None:
    assert odf(tmp_path, "init").returncode == 0
    assert odf(tmp_path, "add", str(EXAMPLES / "city-populations.yaml")).returncode == 0
    blocks = sorted((tmp_path / ".odf").rglob("blocks/*"))
    assert blocks
    victim = blocks[0]
    victim.chmod(0o644)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    result = odf(tmp_path, "verify", "--integrity")
    assert result.returncode == 5, result.stderr + result.stdout
    assert "does not match its hash" in result.stdout


def test_6_conflict_deleting_a_dataset_another_reads(ws: Path) -> None:
    result = odf(ws, "delete", ROOT_ALIAS, "-y")
    assert result.returncode == 6
    assert DERIVATIVE_ALIAS in error_line(result)
    assert ROOT_ALIAS in odf(ws, "list").stdout


def test_7_unavailable_source(ws: Path) -> None:
    result = odf(ws, "fetch", "http://127.0.0.1:1/demo/")
    assert result.returncode == 7
    error_line(result)
