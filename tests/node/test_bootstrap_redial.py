"""A node keeps its bootstrap peers connected (`node.daemon.bootstrap_peers.BootstrapPeers`).

The back-off is exponential, capped and jittered; and with two real nodes on loopback,
a node whose only peer restarts (same port, same identity) logs the loss, redials
quietly (retries at debug level) and logs the reconnection a few seconds after the peer
is back: py-libp2p's own 60 s refusal to redial a peer that failed must not apply.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

import node.daemon.bootstrap_peers as bootstrap_peers
from node.daemon.bootstrap_peers import (
    BOOTSTRAP_REDIAL_FIRST_S,
    BOOTSTRAP_REDIAL_MAX_S,
    BootstrapPeers,
    redial_delay,
)
from node.worker_threads import WorkerThreads
from p2p.errors import PeerUnavailable
from p2p.libp2p.host import P2PHost
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


class _Host:
    """A host whose peer ``B`` is up or down as the test says; dials of ``A`` are refused."""

    peer_id = "ME"

    def __init__(self) -> None:
        self.up: set[str] = set()
        self.reachable: set[str] = set()
        self.dials: list[str] = []

    def peers(self) -> list[str]:
        return sorted(self.up)

    async def connect(self, addr: str) -> str:
        peer = addr.rsplit("/p2p/", 1)[1]
        self.dials.append(peer)
        if peer not in self.reachable:
            raise PeerUnavailable(f"cannot connect to {addr}: connection refused")
        self.up.add(peer)
        return peer


class _Threads:
    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def _messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str | None]]:
    return [
        (r.levelname, r.getMessage(), getattr(r, "fields", {}).get("peer"))
        for r in caplog.records
        if r.name == "odf.node"
    ]


def test_bootstrap_peers_log_once_per_change_and_retry_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(bootstrap_peers, "BOOTSTRAP_CHECK_INTERVAL_S", 0.005)
    monkeypatch.setattr(bootstrap_peers, "BOOTSTRAP_REDIAL_FIRST_S", 0.01)
    monkeypatch.setattr(bootstrap_peers, "BOOTSTRAP_REDIAL_MAX_S", 0.04)
    host = _Host()
    host.reachable = {"A"}
    addrs = ["/ip4/127.0.0.1/tcp/1/p2p/A", "/ip4/127.0.0.1/tcp/2/p2p/B", "/ip4/1.2.3.4/tcp/9"]
    addrs += ["/ip4/127.0.0.1/tcp/3/p2p/ME", "/ip4/127.0.0.1/tcp/1/p2p/A"]
    caplog.set_level(logging.DEBUG, logger="odf.node")

    async def scenario() -> None:
        peers = BootstrapPeers(
            addrs, cast(P2PHost, host), cast(WorkerThreads, _Threads()), random.Random(1)
        )
        await peers.dial_all()
        assert host.dials == ["A", "B"]  # each once; never ourselves
        keeper = asyncio.create_task(peers.keep())
        try:
            await asyncio.sleep(0.3)  # B down: redialled with back-off
            redials = host.dials.count("B")
            assert 3 <= redials <= 20, redials  # capped at 0.04 s: not every check
            host.reachable.add("B")
            await _until(lambda: "B" in host.up)
            host.up.discard("A")  # A restarts, refusing dials for a moment
            host.reachable.discard("A")
            await asyncio.sleep(0.1)
            host.up.add("A")  # ... and dials us when it is back
            await asyncio.sleep(0.05)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

    asyncio.run(scenario())
    said = [m for m in _messages(caplog) if m[0] != "DEBUG"]
    assert said == [
        ("WARNING", "ignoring bootstrap address without /p2p/<peer id>", None),
        ("INFO", "connected to bootstrap peer", None),
        ("WARNING", "bootstrap peer unreachable, retrying in the background", None),
        ("INFO", "connected to bootstrap peer", None),
        ("WARNING", "lost bootstrap peer, reconnecting", "A"),
        ("INFO", "reconnected to bootstrap peer", "A"),
    ], said
    retries = [m for m in _messages(caplog) if m[0] == "DEBUG"]
    assert retries and {m[1] for m in retries} == {"bootstrap dial failed"}
    connected = [r for r in caplog.records if r.getMessage() == "connected to bootstrap peer"]
    assert [getattr(r, "fields", {})["addr"] for r in connected] == [addrs[0], addrs[1]]


async def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)


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
            assert again["failed_dials"] >= 1 and again["down_s"] >= 3.0, again
            # Each failed redial is a debug line: none at the default level.
            assert not _logged(b, "bootstrap dial failed"), b.log()
            assert not [r for r in _records(b) if r["logger"].startswith("libp2p")]
            assert took < RECONNECT_WITHIN_S
            assert b.terminate() == 0
    finally:
        if a.proc.poll() is None:
            a.kill()
