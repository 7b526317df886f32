"""The status line of long steps, and Ctrl-C (real ``odf`` processes where it matters).

The line is drawn on stderr only when it is a terminal (a pseudo-terminal here) and
``--no-progress`` is not given; piped stderr never holds it. Ctrl-C prints one line and
exits 130, leaving no temporary file behind.
"""

from __future__ import annotations

import io
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.render import progress

#: Nothing listens on port 1: the fetch fails at once, after its status line is drawn.
UNREACHABLE = "http://127.0.0.1:1/demo/"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def odf_exe() -> str:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    return exe


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    env = {**os.environ, "ODF_WORKSPACE": str(tmp_path)}
    subprocess.run([odf_exe(), "init"], env=env, check=True, capture_output=True, timeout=60)
    return tmp_path


def run_on_terminal(ws: Path, *args: str) -> tuple[int, str]:
    """Run ``odf ARGS`` with stderr on a pseudo-terminal; its exit code and what it drew."""
    main_fd, term_fd = pty.openpty()
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    env.pop(progress.NO_PROGRESS_ENV, None)
    proc = subprocess.Popen([odf_exe(), *args], env=env, stdout=subprocess.DEVNULL, stderr=term_fd)
    os.close(term_fd)
    drawn = b""
    try:
        while True:
            ready, _, _ = select.select([main_fd], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            drawn += chunk
        return proc.wait(timeout=60), drawn.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main_fd)


def test_status_line_drawn_and_erased_on_a_terminal() -> None:
    term = FakeTerminal()
    with progress.step("transform demo", stream=term) as status:
        status.update("engine starting")
    text = term.getvalue()
    assert "odf: transform demo (0s)" in text
    assert "odf: engine starting" in text
    assert text.endswith("\r\x1b[2K")  # erased: the command's output stands alone


def test_no_status_line_when_not_a_terminal_or_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    piped = io.StringIO()
    with progress.step("transform demo", stream=piped) as status:
        status.update("engine starting")
    assert piped.getvalue() == ""
    monkeypatch.setenv(progress.NO_PROGRESS_ENV, "1")
    term = FakeTerminal()
    with progress.step("transform demo", stream=term):
        pass
    assert term.getvalue() == ""


def test_fetch_shows_its_step_on_a_terminal_only(ws: Path) -> None:
    code, drawn = run_on_terminal(ws, "fetch", UNREACHABLE)
    assert code == 7
    assert f"odf: fetching {UNREACHABLE}" in drawn
    assert "odf: error:" in drawn
    code, drawn = run_on_terminal(ws, "--no-progress", "fetch", UNREACHABLE)
    assert code == 7
    assert "odf: fetching" not in drawn and "odf: error:" in drawn
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    piped = subprocess.run(
        [odf_exe(), "fetch", UNREACHABLE], env=env, capture_output=True, text=True, timeout=60
    )
    assert piped.returncode == 7
    assert "\r" not in piped.stderr and "odf: fetching" not in piped.stderr


def test_ctrl_c_prints_one_line_exits_130_and_leaves_no_temp_file(ws: Path) -> None:
    manifest = Path(__file__).resolve().parents[2] / "node" / "examples" / "city-populations.yaml"
    env = {**os.environ, "ODF_WORKSPACE": str(ws)}
    added = subprocess.run(
        [odf_exe(), "add", str(manifest)], env=env, capture_output=True, text=True, timeout=60
    )
    assert added.returncode == 0, added.stderr
    # An ingest reading a stdin that never ends: interrupted while it waits for input.
    proc = subprocess.Popen(
        [odf_exe(), "ingest", "demo.city-populations", "--stdin"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("event_time,city,population\n")
        proc.stdin.flush()
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["odf: interrupted"]
    verified = subprocess.run(
        [odf_exe(), "verify", "--integrity"], env=env, capture_output=True, text=True, timeout=120
    )
    assert verified.returncode == 0, verified.stderr
    assert "warning" not in verified.stderr, verified.stderr
