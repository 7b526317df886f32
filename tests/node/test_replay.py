"""Replay verification on the real Spark engine: honest chains pass, forged slices are caught."""

from __future__ import annotations

from collections.abc import Callable

from engine.client import EngineClient
from node.transform import (
    pull_derivative,
)
from node.validation.replay import verify_replay
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative, commit_forged

MakeRoot = Callable[[str], RootWriter]
QUERY = "SELECT event_time, city, population * 10 AS p FROM src WHERE population > 1"


def test_replay_of_an_honest_chain_passes_recursively(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    src = make_root("src")
    src.append([("a", 1), ("b", 2)], watermark_ms=1_600_000_000_000)
    add_derivative(ws, "mid", ["src"], QUERY)
    add_derivative(ws, "top", ["mid"], "SELECT event_time, city FROM mid")
    pull_derivative(ws, "top", recursive=True, engine=engine)
    src.append([("c", 3), ("d", 4)], watermark_ms=1_600_000_000_000)
    pull_derivative(ws, "top", recursive=True, engine=engine)

    report = verify_replay(ws, "top", recursive=True, engine=engine)
    assert report.ok, report
    assert [u.alias for u in report.upstream] == ["mid"]
    assert report.transforms_replayed == 2 and report.upstream[0].transforms_replayed == 2
    assert report.mismatch is None and not report.warnings
    # A root dataset has nothing to replay but is still checked for integrity.
    root_report = verify_replay(ws, "src", engine=engine)
    assert root_report.ok and root_report.transforms_replayed == 0


def test_forged_slice_with_valid_hashes_is_caught(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    src = make_root("src")
    src.append([("a", 5), ("b", 6)])
    add_derivative(ws, "forged", ["src"], QUERY)
    pull_derivative(ws, "forged", engine=engine)  # an honest first block
    src.append([("c", 7)])

    # Second run: wrong records, hashed consistently.
    committed = commit_forged(ws, "forged", engine)

    assert verify_integrity(ws.get("forged")).ok  # every hash is self-consistent
    report = verify_replay(ws, "forged", engine=engine)
    assert not report.ok and report.integrity.ok
    assert report.mismatch is not None
    assert report.mismatch.block_hash == committed.new_head
    assert report.mismatch.field == "newData.logicalHash"
    assert report.transforms_replayed == 2


def test_replay_on_another_engine_identity_warns(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    make_root("src").append([("a", 5)])
    pinned = "spark (odf-node 0.0.1, Apache Spark 3.5.0)"
    add_derivative(ws, "old", ["src"], QUERY, version=pinned)
    result = pull_derivative(ws, "old", engine=engine)
    assert any("3.5.0" in w for w in result.warnings)
    report = verify_replay(ws, "old", engine=engine)
    assert report.ok  # same query, same data: it still reproduces
    assert report.identity_mismatch and report.pinned_identities == (pinned,)
    assert any(pinned in w for w in report.warnings)
