"""What ``odf node status`` and ``odf attestations`` show people: names, whole DIDs.

``odf node status`` names datasets by alias (the DID stays in ``-o json``); ``odf
attestations`` shortens validator DIDs in its default table, shows them whole, each on
one line, with ``--wide``, and whole in ``-o json``. Status is read from a real node
that replicated a dataset from another one (two ``odf node run`` on loopback).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from node.cli import main
from node.cli_util import EXIT_OK
from node.render.columns import short_did_key, wide_table
from storage.workspace import Workspace
from tests.node.test_daemon_process import REPO, node, wait_until, write_config
from tests.p2p.sync_helpers import make_dataset

pytestmark = pytest.mark.timeout(180)


def _odf(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(root), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_node_status_names_datasets_by_alias_and_json_keeps_the_did(tmp_path: Path) -> None:
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    for root in (a_root, b_root):
        root.mkdir()
        Workspace.init(root)
    did = make_dataset(Workspace.open(a_root), "demo.cities", tmp_path, slices=2).id
    cfg = write_config(tmp_path / "node.yaml")
    with node(a_root, "--config", str(cfg)) as a:
        assert a.info is not None
        with node(
            b_root, "--config", str(cfg), "--bootstrap", a.info.addrs[0], "--follow", did
        ) as b:
            wait_until(
                lambda: any(p["ok"] for p in b.status()["recentPulls"]), f"B pulling:\n{b.log()}"
            )
            text = _odf(b_root, "node", "status")
            assert text.returncode == 0, text.stderr
            assert re.search(r"^  pulled:   demo\.cities #\d+ ok ", text.stdout, re.M), text.stdout
            assert "  follow:   demo.cities\n" in text.stdout
            assert did not in text.stdout

            for flags in (["-o", "json"], ["--json"]):
                r = _odf(b_root, "node", "status", *flags)
                assert r.returncode == 0, r.stderr
                doc = json.loads(r.stdout)
                (pulled,) = [p for p in doc["recentPulls"] if p["ok"]]
                assert (pulled["dataset"], pulled["alias"]) == (did, "demo.cities")
                assert doc["follow"] == [did] and doc["followNames"] == {did: "demo.cities"}
            assert b.terminate() == 0
        assert a.terminate() == 0


def test_attestations_table_shortens_validator_dids_and_wide_shows_them_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace.init(tmp_path / "ws")
    make_dataset(ws, "demo.cities", tmp_path, slices=2)
    w = ["-w", str(tmp_path / "ws")]
    assert main([*w, "validate", "demo.cities", "-o", "json"]) == EXIT_OK
    (run,) = json.loads(capsys.readouterr().out)
    validator = run["validator"]
    assert validator.startswith("did:key:z6Mk") and len(validator) > 50

    assert main([*w, "attestations", "demo.cities", "-o", "json"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)["attestations"]
    assert len(rows) == 2 and {r["validator"] for r in rows} == {validator}

    assert main([*w, "attestations", "demo.cities"]) == EXIT_OK
    table = capsys.readouterr().out
    assert validator not in table and short_did_key(validator) in table
    assert "--wide" in table

    assert main([*w, "attestations", "demo.cities", "--wide"]) == EXIT_OK
    wide = capsys.readouterr().out.splitlines()
    body = [ln for ln in wide if validator in ln]
    assert len(body) == 2, wide  # one line per attestation, the DID unbroken in it
    for row in rows:
        assert any(row["block"] in ln and row["time"] in ln for ln in body)
    assert wide[1].split() == ["seq", "block", "validator", "verdict", "detail", "engine", "time"]


def test_short_did_key_keeps_both_ends() -> None:
    did = "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH"
    assert short_did_key(did) == "did:key:z6MkpTHR8V...sdvktH"
    assert short_did_key("did:key:z6Mkshort") == "did:key:z6Mkshort"
    table = wide_table([{"a": "x", "b": None}, {"a": "longer", "b": 2}], ["a", "b"])
    assert table == "a       b\nx\nlonger  2\n"
