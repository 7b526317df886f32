"""The engine on demand (`node.engine_manager`), with a stand-in engine (no JVM).

The stand-in is a tiny TCP server started exactly like the real one (``<python> -m
engine --host H --port P ...``): readiness is "the port accepts connections", which is
all the manager relies on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.engine_manager import (
    ENGINE_ADDRESS_ENV,
    ENGINE_RUN_DIR_ENV,
    EngineRecord,
    configured_address,
    engine_status,
    get_engine,
    stop_shared_engine,
)
from node.errors import EngineManagerError
from storage.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]

FAKE_ENGINE = """\
#!{python}
import os, signal, socket, sys, time
args = sys.argv
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(float(os.environ.get("ODF_FAKE_ENGINE_BOOT_S", "0")))  # Spark's start
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
s.listen()
while True:
    conn, _ = s.accept()
    conn.close()
"""


@pytest.fixture(autouse=True)
def user_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's own run folder for the user's engine (its children inherit it).

    Afterwards it and every workspace's run folder are deleted: an engine a failed test
    left behind stops within seconds (its owner is gone).
    """
    path = tmp_path / "engine-run"
    monkeypatch.setenv(ENGINE_RUN_DIR_ENV, str(path))
    yield path
    for run_dir in [path, *tmp_path.glob("*/.odf/run")]:
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_ENGINE.format(python=sys.executable))
    path.chmod(0o755)
    return path


def _acquire_in_child(ws: Workspace, fake: Path, idle: float) -> str:
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from storage.workspace import Workspace
        from node.engine_manager import acquire_shared_engine
        ws = Workspace.open(Path({str(ws.root.parent)!r}))
        print(acquire_shared_engine(ws, idle_timeout={idle}, python={str(fake)!r}))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_configured_address_wins(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_ADDRESS_ENV, "127.0.0.1:5999")
    assert get_engine(ws).address == "127.0.0.1:5999"
    assert get_engine(ws) is get_engine(ws)  # one client per process
    monkeypatch.delenv(ENGINE_ADDRESS_ENV)
    (ws.root / "config.json").write_text('{"engine": {"address": "localhost:6000"}}')
    assert configured_address(ws) == "localhost:6000"
    monkeypatch.setenv(ENGINE_ADDRESS_ENV, "no-port")
    with pytest.raises(EngineManagerError):
        configured_address(ws)


def test_shared_engine_is_reused_then_stops_when_idle(
    ws: Workspace, fake_python: Path, user_run_dir: Path
) -> None:
    first = _acquire_in_child(ws, fake_python, idle=2.0)
    record = engine_status(ws)
    assert record is not None and record.address == first
    # A second invocation reuses the running engine instead of starting one.
    assert _acquire_in_child(ws, fake_python, idle=2.0) == first
    again = engine_status(ws)
    assert again is not None and again.pid == record.pid
    # Nobody holds a lease any more: after the idle timeout both processes are gone.
    assert _wait_gone(record.pid, 30.0)
    assert _wait_gone(record.engine_pid, 10.0)
    assert EngineRecord.read(user_run_dir / "engine.json") is None
    assert (user_run_dir.stat().st_mode & 0o777) == 0o700


def test_stop_shared_engine(ws: Workspace, fake_python: Path) -> None:
    _acquire_in_child(ws, fake_python, idle=600.0)
    record = engine_status(ws)
    assert record is not None
    stopped = stop_shared_engine(ws)
    assert stopped is not None and stopped.pid == record.pid
    assert _wait_gone(record.engine_pid, 10.0)
    assert engine_status(ws) is None
    assert stop_shared_engine(ws) is None
