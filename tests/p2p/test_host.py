"""P2PHost: lifecycle, identity, connect, streams and the trio/asyncio bridge (loopback)."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
from pathlib import Path

import pytest
import trio

from p2p.errors import HostError, HostNotRunning, IdentityError, PeerUnavailable
from p2p.libp2p.bootstrap import RedialAddrs, dial_list
from p2p.libp2p.host import HostConfig, P2PHost
from p2p.libp2p.identity import create_identity, load_identity, load_or_create_identity, peer_id_of
from p2p.libp2p.settings import RESTART_STABLE_AFTER_S
from p2p.libp2p.supervisor import next_restart_delay
from p2p.peers import Offence
from tests.p2p.sync_helpers import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ECHO = "/odf/test-echo/1.0.0"


async def _echo(stream: object) -> None:
    # Read to EOF (py-libp2p raises StreamEOF there) and send everything back.
    from libp2p.network.stream.exceptions import StreamEOF

    data = b""
    while True:
        try:
            data += await stream.read(65536)  # type: ignore[attr-defined]
        except StreamEOF:
            break
    await stream.write(data[::-1])  # type: ignore[attr-defined]


async def test_start_connect_stream_stop() -> None:
    a, b = P2PHost(), P2PHost()
    a.set_stream_handler(ECHO, _echo)
    async with a, b:
        assert a.addrs and all(x.startswith("/ip4/127.0.0.1/tcp/") for x in a.addrs)
        assert a.addrs[0].endswith("/p2p/" + a.peer_id)
        peer = await asyncio.wait_for(b.connect(a.addrs[0]), 20)
        assert peer == a.peer_id
        assert a.peer_id in b.peers()
        s = await b.open_stream(a.peer_id, ECHO)
        await s.write(b"hello world")
        await s.close_write()
        got = b""
        while chunk := await s.read():
            got += chunk
        assert got == b"dlrow olleh"
        await s.close()
    assert not a.running and not b.running
    with pytest.raises(HostNotRunning):
        a.peers()
    await a.stop()  # idempotent


async def test_run_trio_result_exception_and_cancel() -> None:
    async with P2PHost() as h:

        async def add(x: int, y: int) -> int:
            await trio.sleep(0)
            return x + y

        assert await h.run_trio(add, 2, 3) == 5

        async def fail() -> None:
            raise PeerUnavailable("nope")

        with pytest.raises(PeerUnavailable, match="nope"):
            await h.run_trio(fail)

        cancelled = trio.Event()

        async def forever() -> None:
            try:
                await trio.sleep_forever()
            finally:
                cancelled.set()

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(h.run_trio(forever), 0.2)

        async def was_cancelled() -> bool:
            with trio.move_on_after(5):
                await cancelled.wait()
            return cancelled.is_set()

        assert await h.run_trio(was_cancelled)


async def test_stop_fails_pending_calls_with_host_not_running() -> None:
    h = P2PHost()
    await h.start()

    in_flight = threading.Event()

    async def forever() -> None:
        in_flight.set()
        await trio.sleep_forever()

    task = asyncio.ensure_future(h.run_trio(forever))
    await wait_for(in_flight.is_set, "the call to run in the trio thread")
    await h.stop()
    with pytest.raises(HostNotRunning):
        await task
    with pytest.raises(HostNotRunning):
        await h.run_trio(forever)


async def test_connect_errors_are_typed() -> None:
    async with P2PHost() as h:
        with pytest.raises(PeerUnavailable):
            await h.connect("not a multiaddr")
        # A port nobody listens on (ours, after stopping that host).
        other = P2PHost()
        await other.start()
        addr = other.addrs[0]
        await other.stop()
        with pytest.raises(PeerUnavailable):
            await asyncio.wait_for(h.connect(addr), 30)


async def test_bad_listen_address_fails_start() -> None:
    h = P2PHost(HostConfig(listen_addrs=("/ip4/127.0.0.1/tcp/notaport",)))
    with pytest.raises(HostError):
        await h.start()
    assert not h.running


async def test_banned_peer_is_dropped_and_refused() -> None:
    a, b = P2PHost(), P2PHost()
    async with a, b:
        await b.connect(a.addrs[0])
        b.scores.penalise(a.peer_id, Offence.BAD_BYTES, "test")
        # The disconnect is scheduled in the trio thread.
        await wait_for(lambda: a.peer_id not in b.peers(), "the banned peer to be dropped")
        with pytest.raises(PeerUnavailable, match="banned"):
            await b.connect(a.addrs[0])
        with pytest.raises(PeerUnavailable, match="banned"):
            await b.open_stream(a.peer_id, ECHO)


async def test_persistent_identity(tmp_path: Path) -> None:
    path = tmp_path / "node" / "identity.key"
    cfg = HostConfig(identity_path=path)
    async with P2PHost(cfg) as h:
        first = h.peer_id
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    async with P2PHost(cfg) as h:
        assert h.peer_id == first
    assert peer_id_of(load_identity(path)) == first


def test_identity_file_checks(tmp_path: Path) -> None:
    path = tmp_path / "id.key"
    kp = create_identity(path)
    assert peer_id_of(load_or_create_identity(path)) == peer_id_of(kp)
    with pytest.raises(IdentityError, match="already exists"):
        create_identity(path)
    os.chmod(path, 0o644)
    with pytest.raises(IdentityError, match="chmod 600"):
        load_identity(path)
    os.chmod(path, 0o600)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(IdentityError):
        load_identity(link)
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"\xff" * 40)
    os.chmod(garbage, 0o600)
    with pytest.raises(IdentityError):
        load_identity(garbage)
    with pytest.raises(IdentityError, match="no identity"):
        load_identity(tmp_path / "missing.key")


def test_identity_accepts_64_byte_go_form(tmp_path: Path) -> None:
    from libp2p.crypto.keys import KeyType
    from libp2p.crypto.pb import crypto_pb2

    kp = create_identity(tmp_path / "a.key")
    seed = kp.private_key.to_bytes()
    pb = crypto_pb2.PrivateKey(key_type=KeyType.Ed25519.value, data=seed + kp.public_key.to_bytes())
    path = tmp_path / "go.key"
    path.write_bytes(pb.SerializeToString())
    os.chmod(path, 0o600)
    assert peer_id_of(load_identity(path)) == peer_id_of(kp)
    bad = crypto_pb2.PrivateKey(key_type=KeyType.Ed25519.value, data=seed + b"\x00" * 32)
    path.write_bytes(bad.SerializeToString())
    with pytest.raises(IdentityError, match="does not match"):
        load_identity(path)


async def test_bootstrap_peers_are_dialled_after_gossip_runs() -> None:
    # py-libp2p 0.8.1 crashed a host started with bootstrap peers (its pubsub notifee
    # ran before the pubsub service): the adapter dials them once gossipsub runs.
    topic = "odf/test-bootstrap"
    got: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_message(msg: object) -> None:
        await got.put(msg.data)  # type: ignore[attr-defined]

    async with P2PHost() as a:
        await a.subscribe(topic, on_message)
        b = P2PHost(HostConfig(bootstrap=(a.addrs[0],)))
        async with b:
            assert b.running
            await wait_for(lambda: a.peer_id in b.peers(), "the bootstrap connection")
            await b.subscribe(topic, on_message)
            await wait_for(lambda: a.peer_id in b.mesh_peers(topic), "the topic peer")
            await b.publish(topic, b"over the bootstrap connection")
            assert await asyncio.wait_for(got.get(), 20) == b"over the bootstrap connection"


async def test_unreachable_or_invalid_bootstrap_peers_do_not_stop_the_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="p2p.libp2p.bootstrap")
    async with P2PHost() as gone:
        dead_addr = gone.addrs[0]  # a real peer id whose host is stopped below
    cfg = HostConfig(
        bootstrap=(dead_addr, "/ip4/127.0.0.1/tcp/1/p2p/not-a-peer-id", "garbage"),
        bootstrap_attempts=2,
        bootstrap_retry_delay_s=0.05,
        connect_timeout_s=2.0,
    )
    async with P2PHost(cfg) as h, P2PHost() as other:
        assert h.running
        # The dead peer's dials (and their retry) have all failed.
        await wait_for(
            lambda: "unreachable after 2 attempts" in caplog.text, "the bootstrap dials to end"
        )
        assert h.running and h.peers() == []
        assert await h.connect(other.addrs[0]) == other.peer_id  # still fully usable


def test_restart_delay_doubles_to_the_cap_and_starts_over_after_a_stable_run() -> None:
    cfg = HostConfig(restart_delay_s=1.0, restart_max_delay_s=5.0)
    delay, seen = cfg.restart_delay_s, []
    for _ in range(5):  # a crash loop: each run ends at once
        now, delay = next_restart_delay(delay, 0.0, cfg)
        seen.append(now)
    assert seen == [1.0, 2.0, 4.0, 5.0, 5.0]
    # A run that stayed up long enough was no crash loop: back to the first delay.
    assert next_restart_delay(delay, RESTART_STABLE_AFTER_S, cfg) == (1.0, 2.0)
    assert next_restart_delay(delay, RESTART_STABLE_AFTER_S - 1, cfg) == (5.0, 5.0)


def test_redial_addresses_are_bounded_and_the_most_recent_win() -> None:
    redial = RedialAddrs(limit=2)
    redial.remember("a", "/a/1")
    redial.remember("b", "/b/1")
    redial.remember("a", "/a/2")  # a's newer address, now the most recent
    redial.remember("c", "/c/1")  # over the limit: b, the oldest, goes
    assert redial.addrs() == ["/a/2", "/c/1"]
    # Bootstrap peers first, each address once.
    assert dial_list(["/c/1", "/boot"], redial) == ["/c/1", "/boot", "/a/2"]
