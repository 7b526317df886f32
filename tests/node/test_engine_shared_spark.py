"""Two workspaces pull their derivatives on one real Spark engine (one JVM), the user's
shared engine that `node.engine_manager` starts on demand. The only test that starts a
JVM of its own for this: the others use the stand-in engine."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fbs.model import DatasetKind, DatasetSnapshot
from node.engine_manager import (
    ENGINE_ADDRESS_ENV,
    ENGINE_IDLE_TIMEOUT_ENV,
    ENGINE_MASTER_ENV,
    ENGINE_RUN_DIR_ENV,
    engine_status,
    release_lease,
    stop_shared_engine,
)
from node.transform import pull_derivative
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative, read_records
from tests.node.test_transform_engine_manager import _wait_gone


def _java_under(pid: int) -> list[int]:
    """Pids of the ``java`` processes descending from ``pid``."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if rest[0] != "Z":
            parents[int(entry.name)], names[int(entry.name)] = int(rest[1]), name
    found = []
    for child, name in names.items():
        ancestor = parents.get(child, 0) if name == "java" else 0
        while ancestor > 1:
            if ancestor == pid:
                found.append(child)
                break
            ancestor = parents.get(ancestor, 0)
    return found


def _workspace_with_derivative(base: Path, slices: Path) -> Workspace:
    ws = Workspace.init(base)
    ws.add_snapshot(DatasetSnapshot(name="cities", kind=DatasetKind.Root, metadata=()))
    RootWriter(ws, "cities", slices).append([("Oslo", 700), (base.name, 1000)])
    add_derivative(
        ws, "doubled", ["cities"], "SELECT event_time, city, population * 2 AS p FROM cities"
    )
    return ws


def test_two_workspaces_pull_on_one_spark_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (ENGINE_ADDRESS_ENV, ENGINE_MASTER_ENV):
        monkeypatch.delenv(name, raising=False)
    run_dir = tmp_path / "engine-run"
    monkeypatch.setenv(ENGINE_RUN_DIR_ENV, str(run_dir))
    monkeypatch.setenv(ENGINE_IDLE_TIMEOUT_ENV, "600")
    slices = tmp_path / "slices"
    slices.mkdir()
    one = _workspace_with_derivative(tmp_path / "one", slices)
    two = _workspace_with_derivative(tmp_path / "two", slices)
    try:
        pull_derivative(one, "doubled")
        record = engine_status(one)
        assert record is not None
        before = os.stat(run_dir / "engine.activity").st_mtime
        time.sleep(0.05)
        pull_derivative(two, "doubled")
        assert engine_status(two) == record  # the same engine, not a second one
        assert len(_java_under(record.engine_pid)) == 1  # one JVM for both workspaces
        # The engine marks each request as use (its idle clock).
        assert os.stat(run_dir / "engine.activity").st_mtime > before
        for ws in (one, two):
            rows = read_records(ws.get("doubled")).select(["city", "p"]).to_pylist()
            assert sorted((r["city"], r["p"]) for r in rows) == sorted(
                [("Oslo", 1400), (ws.root.parent.name, 2000)]
            )
    finally:
        release_lease()
        stopped = stop_shared_engine(one)
    assert stopped is not None
    assert _wait_gone(stopped.engine_pid, 30.0)
