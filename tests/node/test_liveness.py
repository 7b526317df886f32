"""Listener liveness (`node.daemon.liveness`): the node probes its own listener as a new
peer would and restarts the host, on the same addresses, when it stops answering.

The dead listener is the failure py-libp2p 0.8.1 showed (every new TCP connection closed
before the multistream-select header), produced on a real host by closing each accepted
connection at once; a fresh trio run of the host builds a new swarm without it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from node.daemon.liveness import ListenerLiveness
from p2p.libp2p.host import HostConfig, P2PHost
from p2p.libp2p.probe import probe_listener, tcp_endpoint
from tests.node.test_daemon_process import REPO, Node, write_config
from tests.p2p.sync_helpers import new_workspace

pytestmark = [pytest.mark.timeout(120)]


async def _kill_listener(host: P2PHost) -> None:
    """Make ``host``'s listener close every new connection before the header."""

    async def close_at_once(conn: Any, maddr: Any) -> None:
        await conn.close()

    async def install() -> None:
        host.libp2p_host.get_network()._handle_inbound_connection = close_at_once

    await host.run_trio(install)


async def _eventually(pred: Any, what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_dead_listener_is_restarted_on_its_addresses() -> None:
    async def main() -> None:
        config = HostConfig(restart_delay_s=0.1)
        async with P2PHost(config) as host, P2PHost() as newcomer:
            addrs = list(host.addrs)
            live = ListenerLiveness(host, interval_s=0.2, timeout_s=0.5, first_check_after_s=0)
            first = await live.check()
            assert first is not None and first.ok, first
            await _kill_listener(host)
            dead = await live.check()
            assert dead is not None and not dead.ok and "closed after 0 bytes" in str(dead.error)
            task = asyncio.create_task(live.run())
            try:
                await _eventually(lambda: host.restarts == 1 and host.running, "the restart")
                await _eventually(lambda: live.last is not None and live.last.ok, "a good check")
            finally:
                task.cancel()
            assert host.addrs == addrs
            assert live.restarts == 1
            assert "listener did not answer" in str(host.last_stop_reason)
            probe = await probe_listener(*tcp_endpoint(addrs[0]), timeout=1.0)
            assert probe.ok, probe
            assert await asyncio.wait_for(newcomer.connect(addrs[0]), 10) == host.peer_id

    asyncio.run(main())


def test_a_single_failed_check_does_not_restart() -> None:
    async def main() -> None:
        async with P2PHost(HostConfig(restart_delay_s=0.1)) as host:
            live = ListenerLiveness(host, interval_s=0.2, timeout_s=0.5, failures_before_restart=3)
            await _kill_listener(host)
            for _ in range(2):
                result = await live.check()
                assert result is not None
                await live._record(result)
            assert live.failures == 2 and live.restarts == 0 and host.restarts == 0
            assert live.status()["ok"] is False and live.status()["consecutiveFailures"] == 2

    asyncio.run(main())


def _odf(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "node.cli", "--workspace", str(root), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_node_status_shows_the_last_listener_check(tmp_path: Path) -> None:
    root = tmp_path / "n"
    new_workspace(root)
    node = Node(root, "--config", str(write_config(tmp_path / "n.yaml")))
    try:
        end = time.monotonic() + 30
        while node.status()["listener"]["lastCheckAt"] is None:
            assert time.monotonic() < end, "no listener check within 30 s"
            time.sleep(0.1)
        listener = node.status()["listener"]
        assert listener["ok"] is True and listener["restarts"] == 0, listener
        r = _odf(root, "node", "status")
        assert r.returncode == 0, r.stderr
        line = next(x for x in r.stdout.splitlines() if "listener:" in x)
        assert line.strip().startswith("listener: checked 20") and line.endswith(", ok"), line
        r = _odf(root, "node", "status", "--json")
        assert json.loads(r.stdout)["listener"]["ok"] is True
    finally:
        node.kill()
