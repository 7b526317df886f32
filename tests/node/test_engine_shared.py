"""One shared engine per user, engines that end with their owner, and a booting engine in
`odf engine status`; with the stand-in engine of `test_transform_engine_manager` (no JVM).

Every test points ``$ODF_ENGINE_RUN_DIR`` at a folder of its own (the autouse fixture
of that module, imported here), so the user's real engine is never touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from node.commands.engine import cmd_engine_status
from node.engine_manager import (
    STATE_RUNNING,
    STATE_STARTING,
    EngineRecord,
    engine_run_dir,
    engine_status,
    stop_shared_engine,
)
from node.engine_manager import user_run_dir as user_run_dir_of_env
from node.errors import EngineManagerError
from storage.workspace import Workspace
from tests.node.test_transform_engine_manager import (
    ROOT,
    _acquire_in_child,
    _wait_gone,
    fake_python,
    user_run_dir,
)

__all__ = ["fake_python", "user_run_dir"]  # fixtures used here


def _processes_running(program: Path) -> list[int]:
    """Pids of live processes running ``program`` (a script: ``python PROGRAM ...``; its
    supervisor, which names it in ``--python``, does not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(program).encode() in argv[:2] and state != "Z":
            found.append(int(entry.name))
    return found


def _workspace(base: Path, name: str, config: str | None = None) -> Workspace:
    ws = Workspace.init(base / name)
    if config is not None:
        (ws.root / "config.json").write_text(config)
    return ws


def test_two_workspaces_share_one_engine(
    tmp_path: Path, fake_python: Path, user_run_dir: Path
) -> None:
    one, two = _workspace(tmp_path, "one"), _workspace(tmp_path, "two")
    assert engine_run_dir(one) == engine_run_dir(two) == user_run_dir
    first = _acquire_in_child(one, fake_python, idle=600.0)
    assert _acquire_in_child(two, fake_python, idle=600.0) == first
    assert len(_processes_running(fake_python)) == 1  # one engine process for both
    record = engine_status(two)
    assert record is not None and record.address == first and record.state == STATE_RUNNING
    assert not (one.root / "run").exists() and not (two.root / "run").exists()
    assert (user_run_dir / "engine.json").stat().st_mode & 0o777 == 0o600
    stopped = stop_shared_engine(one)
    assert stopped is not None and stopped.pid == record.pid
    assert _wait_gone(record.engine_pid, 10.0)
    assert _processes_running(fake_python) == []


def test_other_engine_settings_keep_their_own_engine(
    tmp_path: Path, fake_python: Path, user_run_dir: Path
) -> None:
    """A workspace that sets the Spark master gets an engine in its own ``.odf/run``; the
    user's engine is neither used nor started for it."""
    own = _workspace(tmp_path, "own", '{"engine": {"master": "local[1]"}}')
    assert engine_run_dir(own) == own.root / "run"
    address = _acquire_in_child(own, fake_python, idle=600.0)
    record = EngineRecord.read(own.root / "run" / "engine.json")
    assert record is not None and record.address == address
    assert not (user_run_dir / "engine.json").exists()
    assert stop_shared_engine(own) is not None
    assert _wait_gone(record.engine_pid, 10.0)


@pytest.mark.parametrize("delete", ["user run folder", "workspace run folder", "workspace"])
def test_an_engine_whose_owner_is_gone_stops_within_seconds(
    tmp_path: Path, fake_python: Path, user_run_dir: Path, delete: str
) -> None:
    """Its run folder deleted (a test's temp folder, a removed workspace), the supervisor
    stops the engine at once, not after its idle timeout."""
    own = None if delete == "user run folder" else '{"engine": {"master": "local[1]"}}'
    ws = _workspace(tmp_path, "gone", own)
    _acquire_in_child(ws, fake_python, idle=600.0)
    run_dir = engine_run_dir(ws)
    record = EngineRecord.read(run_dir / "engine.json")
    assert record is not None
    shutil.rmtree(ws.root.parent if delete == "workspace" else run_dir)
    started = time.monotonic()
    assert _wait_gone(record.pid, 10.0), "the supervisor outlived its run folder"
    assert _wait_gone(record.engine_pid, 10.0), "the engine outlived its run folder"
    assert time.monotonic() - started < 10.0


def _status(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> str:
    args = argparse.Namespace(workspace=str(ws.root.parent))
    assert cmd_engine_status(args) == 0
    return capsys.readouterr().out


def test_status_shows_a_booting_engine(
    tmp_path: Path,
    fake_python: Path,
    user_run_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = _workspace(tmp_path, "boot")
    assert "no engine running" in _status(ws, capsys)
    monkeypatch.setenv("ODF_FAKE_ENGINE_BOOT_S", "4")
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from storage.workspace import Workspace
        from node.engine_manager import acquire_shared_engine
        ws = Workspace.open(Path({str(ws.root.parent)!r}))
        print(acquire_shared_engine(ws, idle_timeout=600, python={str(fake_python)!r}))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    pull = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 30.0
        booting = None
        while booting is None and time.monotonic() < deadline and pull.poll() is None:
            record = engine_status(ws)
            if record is not None and record.state == STATE_STARTING and record.engine_pid:
                booting = record
            time.sleep(0.1)
        assert booting is not None, "the booting engine was never shown as starting"
        out = _status(ws, capsys)
        assert f"engine starting, will listen on {booting.address}" in out
        assert f"engine pid {booting.engine_pid}" in out
        stdout, _ = pull.communicate(timeout=60)
        assert stdout.strip() == booting.address
        assert f"engine running at {booting.address}" in _status(ws, capsys)
    finally:
        if pull.poll() is None:
            pull.kill()
            pull.wait()
        stopped = stop_shared_engine(ws)
    assert stopped is not None
    assert _wait_gone(stopped.engine_pid, 10.0)


def test_a_run_folder_others_can_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user who can write the run folder could plant a record naming an engine of
    theirs: such a folder is not used."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("ODF_ENGINE_RUN_DIR", str(shared))
    with pytest.raises(EngineManagerError, match="writable by other users"):
        user_run_dir_of_env()
    fresh = tmp_path / "fresh" / "odf"
    monkeypatch.setenv("ODF_ENGINE_RUN_DIR", str(fresh))
    assert user_run_dir_of_env() == fresh
    assert fresh.stat().st_mode & 0o777 == 0o700


def test_requests_keep_an_engine_without_leases_alive(
    tmp_path: Path, fake_python: Path, user_run_dir: Path
) -> None:
    """Idle means no lease *and* no request: the engine touches ``engine.activity`` per
    request (the Spark test checks that), and the supervisor counts it as use."""
    ws = _workspace(tmp_path, "busy")
    _acquire_in_child(ws, fake_python, idle=2.0)  # the child's lease is gone with it
    record = engine_status(ws)
    assert record is not None
    until = time.monotonic() + 5.0
    while time.monotonic() < until:  # requests keep coming, past the idle timeout
        os.utime(user_run_dir / "engine.activity")
        time.sleep(0.3)
    assert engine_status(ws) == record, "an engine serving requests was stopped as idle"
    assert _wait_gone(record.pid, 15.0)  # then idle: it stops
    assert _wait_gone(record.engine_pid, 10.0)


def test_without_a_usable_user_folder_a_workspace_keeps_its_own_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container user whose home cannot be written still gets an engine: its
    workspace's own, as before there was a user's engine."""
    ws = _workspace(tmp_path, "homeless")
    not_a_folder = tmp_path / "home-file"
    not_a_folder.write_text("")
    for name in ("ODF_ENGINE_RUN_DIR", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(not_a_folder))
    assert engine_run_dir(ws) == ws.root / "run"
    monkeypatch.setenv("ODF_ENGINE_RUN_DIR", str(not_a_folder / "odf"))
    with pytest.raises(EngineManagerError):  # a folder asked for is never swapped
        engine_run_dir(ws)
