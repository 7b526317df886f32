"""End-to-end tests of the `odf` CLI on real workspaces (in-process and console script)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from fbs.codec import block_hash, decode_block
from fbs.manifest import load_block_yaml
from node.cli import main
from node.cli_util import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VERIFY_FAILED,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "node" / "examples" / "city-populations.yaml"
MANIFESTS = ROOT / "tests" / "fbs" / "data" / "manifests"
ALIAS = "demo.city-populations"


def run(ws: Path, *argv: str) -> int:
    return main(["--workspace", str(ws), *argv])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    assert run(tmp_path, "init") == EXIT_OK
    return tmp_path


@pytest.fixture
def ws_with_dataset(ws: Path) -> Path:
    assert run(ws, "add", str(EXAMPLE)) == EXIT_OK
    return ws


def test_init_twice_is_an_error_unless_exist_ok(ws: Path) -> None:
    assert run(ws, "init") != EXIT_OK
    assert run(ws, "init", "--exist-ok") == EXIT_OK


def test_commands_without_workspace_fail_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert run(tmp_path / "empty", "list") == EXIT_NOT_FOUND
    assert "workspace" in capsys.readouterr().err


def test_add_list_log_verify(ws_with_dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = ws_with_dataset
    capsys.readouterr()
    assert run(ws, "list", "--output-format", "json") == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    assert [r["alias"] for r in rows] == [ALIAS]
    assert rows[0]["kind"] == "Root"
    assert rows[0]["blocks"] == 6
    assert rows[0]["id"].startswith("did:odf:fed01")

    assert run(ws, "log", ALIAS, "--output-format", "json") == EXIT_OK
    log = json.loads(capsys.readouterr().out)
    kinds = [e["block"]["event"]["kind"] for e in log]
    assert kinds == ["SetDataSchema", "SetLicense", "SetInfo", "SetVocab", "AddPushSource", "Seed"]
    assert [e["block"].get("sequenceNumber", 0) for e in log] == [
        5,
        4,
        3,
        2,
        1,
        0,
    ]
    # Each listed hash is the hash of the stored block bytes.
    ds_dir = next((ws / ".odf" / "datasets").iterdir())
    for e in log:
        raw = (ds_dir / "blocks" / e["blockHash"]).read_bytes()
        assert str(block_hash(raw)) == e["blockHash"]
    assert (ds_dir / "refs" / "head").read_text() == log[0]["blockHash"]

    assert run(ws, "log", ALIAS, "--output-format", "yaml", "-n", "2") == EXIT_OK
    assert len(yaml.safe_load(capsys.readouterr().out)) == 2
    assert run(ws, "log", ALIAS) == EXIT_OK
    assert "AddPushSource" in capsys.readouterr().out

    assert run(ws, "verify", "--integrity", ALIAS) == EXIT_OK
    assert "OK" in capsys.readouterr().out


def test_add_same_alias_twice_skips_and_keeps_the_head(
    ws_with_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # kamu's convention: an existing dataset is skipped with a warning, not replaced.
    heads = sorted(p.read_text() for p in ws_with_dataset.glob(".odf/**/refs/head"))
    assert heads
    capsys.readouterr()
    assert run(ws_with_dataset, "add", str(EXAMPLE)) == EXIT_OK
    assert "already exists" in capsys.readouterr().err
    assert sorted(p.read_text() for p in ws_with_dataset.glob(".odf/**/refs/head")) == heads


def test_add_invalid_manifest_leaves_workspace_unchanged(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    text = EXAMPLE.read_text().replace("kind: Ledger", "kind: Ledgerr")
    bad.write_text(text)
    assert run(ws, "add", str(bad)) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "Ledgerr" in err
    assert run(ws, "list", "--output-format", "json") == EXIT_OK
    assert json.loads(capsys.readouterr().out) == []


def test_derivative_manifest_resolves_inputs(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deriv = tmp_path / "deriv.yaml"
    deriv.write_text(
        """kind: DatasetSnapshot
version: 1
content:
  name: demo.big-cities
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: demo.city-populations
    transform:
      kind: Sql
      engine: spark
      query: SELECT * FROM `demo.city-populations` WHERE population > 1000000
"""
    )
    # Unknown input: refused, nothing created.
    assert run(ws, "add", str(deriv)) == EXIT_INVALID
    assert run(ws, "add", str(EXAMPLE), str(deriv)) == EXIT_OK
    capsys.readouterr()
    assert run(ws, "log", "demo.big-cities", "--output-format", "json") == EXIT_OK
    log = json.loads(capsys.readouterr().out)
    st = log[0]["block"]["event"]
    assert st["kind"] == "SetTransform"
    assert st["inputs"][0]["datasetRef"].startswith("did:odf:fed01")
    assert st["inputs"][0]["alias"] == "demo.city-populations"
    assert "query" not in st["transform"] and len(st["transform"]["queries"]) == 1


def test_verify_detects_tampered_block(
    ws_with_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = ws_with_dataset
    ds_dir = next((ws / ".odf" / "datasets").iterdir())
    head = (ds_dir / "refs" / "head").read_text()
    # Flip one byte of a middle block: its name no longer matches its bytes.
    victim = sorted((ds_dir / "blocks").iterdir())[0]
    if victim.name == head:
        victim = sorted((ds_dir / "blocks").iterdir())[1]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x01
    victim.write_bytes(bytes(data))
    capsys.readouterr()
    assert run(ws, "verify", "--integrity", ALIAS, "--output-format", "json") == EXIT_VERIFY_FAILED
    report = json.loads(capsys.readouterr().out)
    assert report[0]["ok"] is False
    assert any(victim.name == p["block"] for p in report[0]["problems"])


def test_delete_and_gc(ws_with_dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = ws_with_dataset
    assert run(ws, "gc", "--dry-run") == EXIT_OK
    assert "Would delete 0" in capsys.readouterr().out
    assert run(ws, "delete", "--yes", ALIAS) == EXIT_OK
    assert run(ws, "log", ALIAS) == EXIT_NOT_FOUND
    assert run(ws, "delete", "--yes", ALIAS) == EXIT_NOT_FOUND


@pytest.mark.parametrize(
    "ref",
    ["../x", "f1620/../..", "did:odf:../../etc", "", "a" * 5000, "did:odf:f" + "0" * 68, "DEMO..x"],
)
def test_hostile_dataset_refs(ws_with_dataset: Path, ref: str) -> None:
    code = run(ws_with_dataset, "log", ref)
    assert code in (EXIT_NOT_FOUND, EXIT_USAGE, EXIT_INVALID)


def test_block_encode_decode_roundtrip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = MANIFESTS / "block_execute_transform.yaml"
    for version in ("2", "3"):
        out = tmp_path / f"block.v{version}"
        assert main(["block", "encode", str(src), "--block-version", version, "-o", str(out)]) == 0
        printed = capsys.readouterr().out.strip()
        raw = out.read_bytes()
        assert printed == str(block_hash(raw))
        assert decode_block(raw) == load_block_yaml(src.read_text()).block
        assert main(["block", "decode", str(out), "--output-format", "yaml"]) == 0
        again = load_block_yaml(capsys.readouterr().out)
        assert again.block == decode_block(raw)
        assert again.version == int(version)
    assert (tmp_path / "block.v2").read_bytes() != (tmp_path / "block.v3").read_bytes()


def test_block_encode_serializes_exactly_what_the_manifest_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Seed-less block with a non-normalized transform is not a valid chain position,
    # but encoding must not apply chain rules.
    manifest = tmp_path / "b.yaml"
    manifest.write_text(
        """kind: MetadataBlock
version: 2
content:
  systemTime: 2050-01-01T12:00:00Z
  sequenceNumber: 7
  event:
    kind: SetInfo
    description: foo
"""
    )
    assert main(["block", "encode", str(manifest)]) == 0
    h = capsys.readouterr().out.strip()
    assert h.startswith("f1620") and len(h) == 69


def test_block_decode_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00" * 3 + os.urandom(61))
    assert main(["block", "decode", str(junk)]) == EXIT_INVALID
    assert "junk" in capsys.readouterr().err
    assert main(["block", "decode", str(tmp_path / "missing")]) == EXIT_NOT_FOUND


def test_hash_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": pa.array(["a", "b", "c"])})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    assert main(["hash", "logical", str(path)]) == 0
    # arrow-digest README example (odf-format.md 7.5), wrapped in the arrow0-sha3-256 multihash.
    assert capsys.readouterr().out.strip() == (
        "f9680c001205684f7bfdcaf4ff7d1f9bf0fd766c98d8ded335e933fb4eec245054f3206b61a"
    )
    assert main(["hash", "physical", str(path)]) == 0
    import hashlib

    assert (
        capsys.readouterr().out.strip() == "f1620" + hashlib.sha3_256(path.read_bytes()).hexdigest()
    )


def test_console_script_runs(tmp_path: Path) -> None:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None, "console script `odf` is not installed in the venv"
    env = {**os.environ, "ODF_WORKSPACE": str(tmp_path)}
    subprocess.run([exe, "init"], check=True, env=env, capture_output=True)
    r = subprocess.run([exe, "add", str(EXAMPLE)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "log", "nope"], env=env, capture_output=True, text=True)
    assert r.returncode == EXIT_NOT_FOUND
    assert r.stderr.startswith("odf: error:")
    assert "Traceback" not in r.stderr


def test_integrity_checks_physical_hashes_logical_ones_on_request(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``verify --integrity`` is kamu's integrity check: sizes and physical hashes (every
    disk fault); a slice whose bytes are those the chain names but whose *declared*
    logical hash is wrong (the publisher's claim) fails ``--logical-hashes`` and a full
    verify (validators check it too)."""
    from fbs.model import AddData, DatasetKind, DatasetSnapshot
    from storage.workspace import Workspace
    from tests.storage.test_dataset import SCHEMA, write_parquet

    store = Workspace.open(ws)
    store.add_snapshot(DatasetSnapshot(name="claims", kind=DatasetKind.Root, metadata=()))
    ds = store.get("claims")
    ds.commit(SCHEMA, expected_head=ds.head())
    s0, p0 = write_parquet(ws / "p0", 0, 3)
    wrong = s0.replace(logical_hash=s0.logical_hash.replace(digest=b"\x00" * 32))
    ds.commit(AddData(new_data=wrong), expected_head=ds.head(), data_file=p0)
    capsys.readouterr()
    assert run(ws, "verify", "--integrity", "claims") == EXIT_OK
    assert run(ws, "verify", "--integrity", "--logical-hashes", "claims") == EXIT_VERIFY_FAILED
    assert "logical-hash" in capsys.readouterr().out
    assert run(ws, "verify", "claims") == EXIT_VERIFY_FAILED
    assert run(ws, "verify", "--logical-hashes", "claims") == EXIT_USAGE
