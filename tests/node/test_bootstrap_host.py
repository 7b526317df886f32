"""Dials of a peer that just failed are made (py-libp2p's 60 s negative cache is cleared).

py-libp2p 0.8.1 refuses, for 60 s, every dial to a peer whose last dial failed. A host
whose bootstrap peer is still starting (its own retries, `p2p.libp2p.bootstrap.dial_bootstrap`) or
a daemon redialling a peer that restarted (`P2PHost.connect`) would then not reach it
for a minute. Real hosts on loopback: the peer is down for the first dial, up for the next.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from p2p.errors import PeerUnavailable
from p2p.libp2p.host import HostConfig, P2PHost

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _peer_addr(identity: Path, listen: str) -> str:
    """The ``/p2p/`` address of a host with ``identity`` on ``listen`` (started and stopped)."""
    async with P2PHost(HostConfig(listen_addrs=(listen,), identity_path=identity)) as a:
        return a.addrs[0]


def test_connect_right_after_a_failed_dial_reaches_a_peer_that_is_back(tmp_path: Path) -> None:
    listen = f"/ip4/127.0.0.1/tcp/{_free_port()}"
    identity = tmp_path / "a.key"

    async def scenario() -> None:
        addr = await _peer_addr(identity, listen)
        async with P2PHost() as b:
            with pytest.raises(PeerUnavailable, match="connection refused"):
                await b.connect(addr)  # down: refused, and remembered by py-libp2p
            async with P2PHost(HostConfig(listen_addrs=(listen,), identity_path=identity)) as a:
                assert await asyncio.wait_for(b.connect(addr), 20) == a.peer_id

    asyncio.run(scenario())


def test_bootstrap_retries_reach_a_peer_that_starts_late(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listen = f"/ip4/127.0.0.1/tcp/{_free_port()}"
    identity = tmp_path / "a.key"
    caplog.set_level(logging.DEBUG, logger="p2p.libp2p.bootstrap")

    async def scenario() -> None:
        addr = await _peer_addr(identity, listen)
        cfg = HostConfig(bootstrap=(addr,), bootstrap_attempts=6, bootstrap_retry_delay_s=0.3)
        async with P2PHost(cfg) as b:
            await asyncio.sleep(1.0)  # a few refused dials
            async with P2PHost(HostConfig(listen_addrs=(listen,), identity_path=identity)) as a:
                for _ in range(200):
                    if a.peer_id in b.peers():
                        break
                    await asyncio.sleep(0.05)
                assert a.peer_id in b.peers()

    asyncio.run(scenario())
    failed = [r for r in caplog.records if "bootstrap dial" in r.getMessage()]
    assert failed and all(r.levelno == logging.DEBUG for r in failed)
    assert all(r.getMessage().endswith(": connection refused") for r in failed)
