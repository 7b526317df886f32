"""A libp2p listen port another host (or process) listens on is refused, not shared.

py-libp2p listens with SO_REUSEPORT, so without `p2p.libp2p.listen_ports` a second host on a
taken port started and the kernel split the first node's incoming connections between
the two processes.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from p2p.errors import HostError
from p2p.libp2p.host import HostConfig, P2PHost
from p2p.libp2p.listen_ports import check_listen_ports

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _listen_addr(host: P2PHost) -> str:
    return host.addrs[0].rsplit("/p2p/", 1)[0]


async def test_second_host_on_a_taken_port_is_refused_by_name() -> None:
    async with P2PHost() as a:
        taken = _listen_addr(a)
        b = P2PHost(HostConfig(listen_addrs=(taken,)))
        with pytest.raises(HostError, match=f"{taken} is in use by another process"):
            await b.start()
        assert not b.running
        # The first host still owns its port: a dialler reaches it, not a stranger.
        async with P2PHost() as c:
            assert await asyncio.wait_for(c.connect(a.addrs[0]), 20) == a.peer_id


async def test_port_is_free_again_after_stop_and_restart_binds_it() -> None:
    a = P2PHost()
    async with a:
        taken = _listen_addr(a)
    again = P2PHost(HostConfig(listen_addrs=(taken,)))
    async with again:
        assert _listen_addr(again) == taken


def test_plain_listener_of_another_process_kind_is_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(HostError, match="in use"):
            check_listen_ports((f"/ip4/127.0.0.1/tcp/{port}",))
    check_listen_ports((f"/ip4/127.0.0.1/tcp/{port}", "/ip4/127.0.0.1/tcp/0"))
