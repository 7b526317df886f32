"""README's walk-through (publish on A, follow on B, validate on C, D joining) runs as written.

The fenced ``sh`` block(s) between ``<!-- walkthrough:begin -->`` and
``<!-- walkthrough:end -->`` in README.md are run by ``bash -e`` in a temporary
directory, against real ``odf`` processes on loopback; only what the block itself reads
from the environment at its top is set (free ports, the examples folder, the walk's
folder). The block stops its nodes; whatever is left (a failed or timed-out run) is
killed by process group and by the PIDs the nodes' run files name.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.runfile import read_run_info
from storage.errors import StorageError
from storage.workspace import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
NODES = ("a", "b", "c", "d")
#: Bound on the whole walk (it takes about half a minute).
WALK_TIMEOUT_S = 420


def walkthrough() -> str:
    """The shell commands of README's walk-through, in order."""
    text = (REPO / "README.md").read_text()
    begin, end = "<!-- walkthrough:begin -->", "<!-- walkthrough:end -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    section = text.split(begin, 1)[1].split(end, 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, "no ```sh block between the walk-through markers"
    return "\n".join(blocks)


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports nothing listens on now."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def walk_env(walk: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(EXAMPLES=str(REPO / "node" / "examples"), WALK=str(walk))
    ports = free_ports(2 * len(NODES))
    for i, name in enumerate(NODES):
        env[f"{name.upper()}_PORT"] = str(ports[i])
        env[f"{name.upper()}_HTTP"] = str(ports[len(NODES) + i])
    return env


def node_pids(walk: Path) -> list[int]:
    """PIDs of the nodes still running on the walk's workspaces."""
    pids: list[int] = []
    for name in NODES:
        with contextlib.suppress(StorageError, OSError):
            info = read_run_info(Workspace.open(walk / name))
            if info is not None:
                pids.append(info.pid)
    return pids


def stop_leftovers(group: int, walk: Path) -> list[int]:
    """Kill what the walk left running; the node PIDs that were still up."""
    left = node_pids(walk)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in left:  # gone before the temporary folder is removed
        while _alive(pid):
            time.sleep(0.1)
    return left


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return True


def logs(walk: Path) -> str:
    out = []
    for name in NODES:
        log = walk / f"{name}.log"
        if log.exists():
            out.append(f"--- {name}.log\n" + "\n".join(log.read_text().splitlines()[-15:]))
    return "\n".join(out)


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    walk = tmp_path / "walk"
    script = tmp_path / "walkthrough.sh"
    script.write_text(walkthrough())
    output = tmp_path / "walkthrough.out"
    with output.open("wb") as sink:
        # -x: each command is traced, so a failure shows where the walk stopped.
        proc = subprocess.Popen(
            ["bash", "-ex", str(script)],
            cwd=tmp_path,
            env=walk_env(walk),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=WALK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        finally:
            left = stop_leftovers(proc.pid, walk)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    out = output.read_text(errors="replace")
    assert proc.returncode == 0, f"{out[-6000:]}\n{logs(walk)}"
    assert left == [], "the walk-through left nodes running"
    # B and D hold C's attestations; B followed A's second commit.
    assert out.count("reproduced") >= 3, out
    assert "1250" in out, out
    assert "2 attestations, not disputed" in out, out
