"""``odf validate`` and ``odf attestations`` end to end (shared Spark engine)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from engine.client import EngineClient
from engine.process import EngineProcess
from node.cli import main
from node.cli_util import EXIT_NOT_FOUND, EXIT_OK, EXIT_VERIFY_FAILED
from node.transform import pull_derivative
from node.validation.trust import verify_with_trust
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative, commit_forged
from tests.node.test_validator import QUERY

pytestmark = [pytest.mark.timeout(600)]

MakeRoot = Callable[[str], RootWriter]


def test_validate_and_list_attestations(
    ws: Workspace,
    make_root: MakeRoot,
    engine: EngineClient,
    engine_process: EngineProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = make_root("src")
    src.append([("a", 5), ("b", 6)])
    add_derivative(ws, "good", ["src"], QUERY)
    add_derivative(ws, "bad", ["src"], QUERY)
    pull_derivative(ws, "good", engine=engine)
    pull_derivative(ws, "bad", engine=engine)
    src.append([("c", 7)])
    pull_derivative(ws, "good", engine=engine)
    commit_forged(ws, "bad", engine)
    monkeypatch.setenv("ODF_ENGINE_ADDRESS", engine_process.address)
    w = ["-w", str(ws.root.parent)]

    assert main([*w, "validate", "good", "-o", "json"]) == EXIT_OK
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["dataset"] == "good" and doc["backlog"] == 0
    assert [a["verdict"] for a in doc["attestations"]] == ["reproduced", "reproduced"]
    validator = doc["validator"]
    assert validator.startswith("did:key:z6Mk")

    assert main([*w, "validate", "bad"]) == EXIT_VERIFY_FAILED
    table = capsys.readouterr().out
    assert "diverged" in table and "newData.logicalHash" in table

    assert main([*w, "attestations", "bad", "-o", "json"]) == EXIT_OK
    listed = json.loads(capsys.readouterr().out)
    assert listed["disputed"] is True and len(listed["disputedBlocks"]) == 1
    assert [a["verdict"] for a in listed["attestations"]] == ["reproduced", "diverged"]
    assert {a["validator"] for a in listed["attestations"]} == {validator}

    assert main([*w, "attestations", "good"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "not disputed" in out and "reproduced" in out
    assert main([*w, "attestations", "good", "--block", listed["head"], "-o", "json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["attestations"] == []  # a block of "bad"

    # A second run has nothing left to check; the store is unchanged.
    assert main([*w, "validate", "good", "-o", "json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)[0]["attestations"] == []
    # One validator is enough for --trust 1 on the honest dataset, never on the cheat.
    assert verify_with_trust(ws, "good", 1).ok
    assert not verify_with_trust(ws, "bad", 1).ok
    assert main([*w, "attestations", "nope"]) == EXIT_NOT_FOUND
