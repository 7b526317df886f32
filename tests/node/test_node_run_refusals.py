"""``odf node run`` refusals as a user meets them (real processes on loopback).

A second node on a workspace already served is a conflict (exit 6, named), not an
internal error (exit 1); a node asked to listen on a libp2p port another node listens
on is refused by name (exit 4) instead of sharing the port through SO_REUSEPORT.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from node.cli_util import EXIT_CONFLICT, EXIT_INVALID
from storage.workspace import Workspace
from tests.node.test_daemon_process import REPO, node, write_config

pytestmark = pytest.mark.timeout(90)


def odf(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(root), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_second_node_on_a_workspace_or_a_taken_port_is_refused_by_name(tmp_path: Path) -> None:
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    for root in (a_root, b_root):
        root.mkdir()
        Workspace.init(root)
    cfg = write_config(tmp_path / "node.yaml")
    with node(a_root, "--config", str(cfg)) as a:
        assert a.info is not None
        r = odf(a_root, "node", "run", "-q", "--config", str(cfg))
        assert r.returncode == EXIT_CONFLICT, r.stderr
        assert "a node already serves this workspace" in r.stderr
        taken = a.info.addrs[0].rsplit("/p2p/", 1)[0]
        r = odf(b_root, "node", "run", "-q", "--config", str(cfg), "--listen", taken)
        assert r.returncode == EXIT_INVALID, r.stderr
        assert f"odf: error: libp2p listen address {taken} is in use" in r.stderr
        assert not (b_root / ".odf/run/node.json").exists()
        assert a.proc.poll() is None
        assert a.terminate() == 0


def test_a_node_that_cannot_be_reached_is_unavailable_not_a_bug() -> None:
    # `odf node status|peers|follow` on a hung node (SIGSTOP: the HTTP call times out
    # after `API_TIMEOUT_S`) raises NodeNotRunning: the node is unavailable, not a bug (1).
    from node.cli_util import EXIT_UNAVAILABLE
    from node.error_contract import exit_code_for
    from node.runfile import NodeAlreadyRunning, NodeNotRunning

    assert exit_code_for(NodeNotRunning("cannot reach the node")) == EXIT_UNAVAILABLE
    assert exit_code_for(NodeAlreadyRunning("a node already serves")) == EXIT_CONFLICT


def test_json_log_holds_only_json_when_libp2p_complains(tmp_path: Path) -> None:
    # py-libp2p detaches its logger at import: its errors (a bootstrap peer that is
    # down) would print as bare lines in the middle of the JSON log.
    import json
    import time

    root = tmp_path / "a"
    root.mkdir()
    Workspace.init(root)
    cfg = write_config(tmp_path / "node.yaml")
    down = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWAbXQraVCSfmd5dyynaumqdFfBYheRzzCDuyUpowUczjR"
    with node(root, "--config", str(cfg), "--log-format", "json", "--bootstrap", down) as a:
        deadline = time.monotonic() + 30
        while "bootstrap peer unreachable" not in a.log_path.read_text():
            assert time.monotonic() < deadline, a.log()
            time.sleep(0.05)
        assert a.terminate() == 0
    lines = [ln for ln in a.log_path.read_text().splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # every line
    # py-libp2p's own errors about the dial are shown at debug level only; ours says it.
    assert not any(r["logger"].startswith("libp2p") for r in records)
    assert any(
        r["msg"] == "bootstrap peer unreachable, retrying in the background" for r in records
    )
