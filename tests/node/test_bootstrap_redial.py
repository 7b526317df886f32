"""A node keeps its bootstrap peers connected (`node.daemon.watch.BootstrapPeers`).

The back-off is exponential, capped and jittered; and with two real nodes on loopback,
a node whose only peer restarts (same port, same identity) logs the loss, redials
quietly (retries at debug level) and logs the reconnection a few seconds after the peer
is back: py-libp2p's own 60 s refusal to redial a peer that failed must not apply.
"""

from __future__ import annotations

import json
import random
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from node.daemon.watch import BOOTSTRAP_REDIAL_FIRST_S, BOOTSTRAP_REDIAL_MAX_S, redial_delay
from storage.workspace import Workspace
from tests.node.test_daemon_process import Node, node, wait_until, write_config

pytestmark = pytest.mark.timeout(180)

#: How soon after the restarted peer listens again the follower must be connected to it:
#: the back-off cap, a refused dial's own retries in py-libp2p (~1 s) and a slow machine.
RECONNECT_WITHIN_S = BOOTSTRAP_REDIAL_MAX_S + 6.0


def test_redial_delay_is_exponential_capped_and_jittered() -> None:
    rng = random.Random(7)
    for failures in range(1, 12):
        base = min(BOOTSTRAP_REDIAL_FIRST_S * 2 ** (failures - 1), BOOTSTRAP_REDIAL_MAX_S)
        draws = [redial_delay(failures, rng) for _ in range(200)]
        assert all(base / 2 <= d <= base for d in draws), (failures, min(draws), max(draws))
        assert max(draws) - min(draws) > base / 4  # jittered, not one value
    assert redial_delay(1, rng) <= BOOTSTRAP_REDIAL_FIRST_S
    assert redial_delay(50, rng) <= BOOTSTRAP_REDIAL_MAX_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _records(n: Node) -> list[dict[str, Any]]:
    out = []
    for line in n.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def _logged(n: Node, msg: str) -> list[dict[str, Any]]:
    return [r for r in _records(n) if r.get("msg") == msg]


def test_a_node_whose_only_peer_restarts_reconnects_and_says_so(tmp_path: Path) -> None:
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    for root in (a_root, b_root):
        root.mkdir()
        Workspace.init(root)
    cfg = write_config(tmp_path / "node.yaml")
    listen = f"/ip4/127.0.0.1/tcp/{_free_port()}"
    a = Node(a_root, "--config", str(cfg), "--listen", listen)
    try:
        assert a.info is not None
        a_addr, a_peer = a.info.addrs[0], a.info.peer_id
        with node(b_root, "--config", str(cfg), "--bootstrap", a_addr) as b:
            wait_until(lambda: b.status()["peers"] == 1, "B connected to A")
            assert [r["addr"] for r in _logged(b, "connected to bootstrap peer")] == [a_addr]

            assert a.terminate() == 0
            wait_until(lambda: bool(_logged(b, "lost bootstrap peer, reconnecting")), "B noticing")
            wait_until(lambda: b.status()["peers"] == 0, "B without peers")
            time.sleep(3.0)  # B redials a peer that is down meanwhile
            a = Node(a_root, "--config", str(cfg), "--listen", listen)
            back = time.monotonic()
            wait_until(
                lambda: bool(_logged(b, "reconnected to bootstrap peer")),
                f"B reconnecting to A:\n{b.log()}",
                timeout=RECONNECT_WITHIN_S,
            )
            took = time.monotonic() - back
            wait_until(lambda: b.status()["peers"] == 1, "B's status showing A")
            (lost,) = _logged(b, "lost bootstrap peer, reconnecting")
            (again,) = _logged(b, "reconnected to bootstrap peer")
            assert lost["peer"] == again["peer"] == a_peer
            assert lost["level"] == "warning" and again["level"] == "info"
            assert again["attempts"] >= 2 and again["down_s"] >= 3.0, again
            # Each failed redial is a debug line: none at the default level.
            assert not _logged(b, "bootstrap dial failed"), b.log()
            assert not [r for r in _records(b) if r["logger"].startswith("libp2p")]
            assert took < RECONNECT_WITHIN_S
            assert b.terminate() == 0
    finally:
        if a.proc.poll() is None:
            a.kill()
