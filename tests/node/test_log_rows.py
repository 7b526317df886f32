"""``odf log`` from the block-rows cache: the same table as from decoded
blocks, blocks still read and hash-checked, and any doubt sends it back to decoding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node.cli import main
from node.cli_util import EXIT_OK, EXIT_VERIFY_FAILED
from storage.catalog import block_rows_cache_path, cached_block_rows, resolve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "node" / "examples" / "city-populations.yaml"
ALIAS = "demo.city-populations"


def run(ws: Path, *argv: str) -> int:
    return main(["--workspace", str(ws), *argv])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    assert run(tmp_path, "init") == EXIT_OK
    assert run(tmp_path, "add", str(EXAMPLE)) == EXIT_OK
    return tmp_path


def log(ws: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert run(ws, "log", ALIAS, *args) == EXIT_OK
    return capsys.readouterr().out


def cache_file(ws: Path) -> Path:
    root = ws / ".odf"
    return block_rows_cache_path(root, resolve(root, ALIAS).id)


@pytest.mark.parametrize("args", [(), ("-n", "2"), ("--full-hashes",), ("-n", "0")])
def test_cached_rows_show_what_decoding_shows(
    ws: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    decoded = log(ws, capsys, *args)
    assert cache_file(ws).exists() or args == ("-n", "0")
    assert log(ws, capsys, *args) == decoded
    if args == ():
        assert "AddPushSource" in decoded and "Seed" in decoded


def test_a_new_block_is_decoded_and_kept(
    ws: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = log(ws, capsys)
    csv = tmp_path / "d.csv"
    csv.write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1\n", encoding="utf-8")
    assert run(ws, "ingest", ALIAS, str(csv)) == EXIT_OK
    capsys.readouterr()
    after = log(ws, capsys)
    assert "AddData" in after and "AddData" not in before
    root = ws / ".odf"
    entry = resolve(root, ALIAS)
    head = (entry.path / "refs" / "head").read_text().strip()
    assert cached_block_rows(root, entry)[head][2] == "AddData"
    assert log(ws, capsys) == after


def test_rows_that_do_not_chain_are_not_used(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    decoded = log(ws, capsys)
    path = cache_file(ws)
    outer = json.loads(path.read_text())
    body = json.loads(outer["state"])
    for row in body["rows"].values():
        row[0] += 1  # sequence numbers that no longer end at the Seed
        row[3] = "forged"
    outer["state"] = json.dumps(body, sort_keys=True, separators=(",", ":"))
    path.write_text(json.dumps(outer))  # the SHA3 no longer matches either
    assert log(ws, capsys) == decoded


def test_a_damaged_block_is_refused_on_the_cached_path(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log(ws, capsys)
    ds_dir = next((ws / ".odf" / "datasets").iterdir())
    head = (ds_dir / "refs" / "head").read_text().strip()
    block = ds_dir / "blocks" / head
    data = bytearray(block.read_bytes())
    data[-1] ^= 0xFF
    block.chmod(0o644)
    block.write_bytes(bytes(data))
    assert run(ws, "log", ALIAS) == EXIT_VERIFY_FAILED
    assert capsys.readouterr().out == ""
