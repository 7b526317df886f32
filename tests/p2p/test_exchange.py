"""Object exchange over real libp2p hosts on loopback: blocks, objects, hostile peers."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetId
from fbs.model import SetInfo
from fbs.multiformats import Multihash
from p2p.errors import (
    FrameTooLarge,
    NotFoundOnPeer,
    PeerMisbehaved,
    TransferError,
    TransferTimeout,
)
from p2p.libp2p.exchange import (
    EXCHANGE_PROTOCOL,
    ExchangeClient,
    ExchangeLimits,
    ExchangeServer,
    FrameType,
    ObjectKind,
    write_frame,
)
from p2p.libp2p.host import P2PHost
from p2p.libp2p.source import Libp2pSource
from p2p.peer_json import PeerJsonError
from p2p.peers import Offence
from storage.dataset import Dataset
from storage.workspace import Workspace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

OBJECT_SIZE = 5 * 2**20 + 123  # several frames, not a multiple of the chunk size
LIMITS = ExchangeLimits(stall_timeout_s=1.0, max_blocks_per_request=5)


@dataclass
class World:
    ws: Workspace
    ds: Dataset
    did: DatasetId
    blocks: list[Multihash]  # oldest first
    data: bytes
    data_hash: Multihash
    server: P2PHost
    client_host: P2PHost
    client: ExchangeClient


def _dataset(tmp: Path) -> tuple[Workspace, Dataset, list[Multihash], bytes, Multihash]:
    ws = Workspace.init(tmp / "server")
    ds = ws.create_dataset("acme/things")
    head = ds.head()
    assert head is not None
    hashes = [head]
    for i in range(11):
        head = ds.commit(SetInfo(description=f"rev {i}"), expected_head=head).new_head
        hashes.append(head)
    data = os.urandom(OBJECT_SIZE)
    h = Multihash.sha3_256(data)
    ds.layout.data.put(h, data)
    return ws, ds, hashes, data, h


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    ws, ds, hashes, data, h = _dataset(tmp_path)
    state = ds.state()
    assert state is not None
    server, client_host = P2PHost(), P2PHost()
    ExchangeServer(ws, limits=LIMITS).register(server)
    async with server, client_host:
        await client_host.connect(server.addrs[0])
        client = ExchangeClient(client_host, limits=LIMITS)
        yield World(ws, ds, state.dataset_id, hashes, data, h, server, client_host, client)


def _pending(d: Path) -> list[str]:
    return [n for n in os.listdir(d) if n.startswith(".pending-")] if d.exists() else []


async def test_head_and_blocks_in_batches(world: World) -> None:
    w, peer = world, world.server.peer_id
    remote = await w.client_host.run_trio(w.client.get_head, peer, w.did)
    assert remote.head == w.blocks[-1]
    assert remote.record is None
    raws = await w.client_host.run_trio(w.client.get_blocks, peer, w.did, w.blocks[-1], None)
    # Newest first, all 12 (in 3 batches of at most 5), bytes exactly as stored.
    assert [block_hash(r) for r in raws] == w.blocks[::-1]
    assert raws[0] == w.ds.layout.blocks.get(w.blocks[-1])
    batch = await w.client_host.run_trio(w.client.get_blocks_batch, peer, w.did, w.blocks[-1], None)
    assert [block_hash(r) for r in batch] == w.blocks[::-1][:5]
    # stop_at is exclusive.
    newer = await w.client_host.run_trio(
        w.client.get_blocks, peer, w.did, w.blocks[-1], w.blocks[3]
    )
    assert [block_hash(r) for r in newer] == w.blocks[4:][::-1]
    assert decode_block(newer[-1]).prev_block_hash == w.blocks[3]
    assert w.client.scores.score(peer) > 0  # successes are rewarded


async def test_multi_mb_object_verified_into_place(world: World, tmp_path: Path) -> None:
    w, peer = world, world.server.peer_id
    dest = tmp_path / "client" / "data" / w.data_hash.to_multibase()
    size = await w.client_host.run_trio(w.client.get_object, peer, w.did, "data", w.data_hash, dest)
    assert size == OBJECT_SIZE
    assert dest.read_bytes() == w.data
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o444
    assert _pending(dest.parent) == []
    # The quarantine flavour used by p2p.sync: returns the digest of what it wrote.
    q = tmp_path / "client" / "data" / ".pending-q1"
    digest = await w.client_host.run_trio(
        w.client.fetch_object, peer, w.did, "data", w.data_hash, q
    )
    assert digest == hashlib.sha3_256(w.data).digest() == w.data_hash.digest
    assert q.read_bytes() == w.data


async def test_missing_things_are_not_found_without_penalty(world: World, tmp_path: Path) -> None:
    w, peer = world, world.server.peer_id
    missing = Multihash.sha3_256(b"nope")
    dest = tmp_path / "out" / missing.to_multibase()
    with pytest.raises(NotFoundOnPeer):
        await w.client_host.run_trio(w.client.get_object, peer, w.did, "data", missing, dest)
    with pytest.raises(NotFoundOnPeer):
        await w.client_host.run_trio(w.client.get_blocks, peer, w.did, missing, None)
    other = DatasetId.new_seeded(b"\x01" * 32)
    with pytest.raises(NotFoundOnPeer):
        await w.client_host.run_trio(w.client.get_head, peer, other)
    assert not dest.exists() and _pending(dest.parent) == []
    assert w.client.scores.score(peer) >= 0


async def test_bad_requests_get_error_frames(world: World) -> None:
    w = world
    s = await w.client_host.open_stream(w.server.peer_id, EXCHANGE_PROTOCOL)
    payload = b'{"op":"object","dataset":"did:odf:zzz","kind":"data","hash":"../../etc"}'
    await s.write(len(payload).to_bytes(4, "big") + bytes([FrameType.REQUEST]) + payload)
    await s.close_write()
    reply = b""
    while chunk := await s.read():
        reply += chunk
    assert reply[4] == FrameType.ERROR
    assert b"bad_request" in reply
    await s.close()


async def _raw_request(w: World, data: bytes) -> bytes:
    """Send ``data`` on a fresh exchange stream; the reply until EOF or reset."""
    s = await w.client_host.open_stream(w.server.peer_id, EXCHANGE_PROTOCOL)
    reply = b""
    try:
        await s.write(data)
        await s.close_write()
        while chunk := await s.read():
            reply += chunk
    except TransferError:
        pass  # reset by the server
    finally:
        await s.close()
    return reply


def _request(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + bytes([FrameType.REQUEST]) + payload


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 50_000 + b"]" * 50_000,  # bare json.loads: RecursionError
        b'{"op":"blocks","max_blocks":' + b"9" * 5000 + b"}",  # bare json.loads: ValueError
        b'{"op":"head","dataset":"' + b"x" * 60_000 + b'"}',
        b'{"op":"head","op":"head"}',
        b"\xff not json",
    ],
    ids=["deep", "huge-int", "long-string", "duplicate-key", "garbage"],
)
async def test_hostile_json_requests_end_quietly(
    world: World, payload: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    assert await _raw_request(w, _request(payload[: LIMITS.max_control_frame_bytes])) == b""
    # No traceback escaped the handler, and honest requests are still served.
    assert w.server.guard_stats.handler_failures == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # The offender is charged once by the server (one offence does not ban).
    standing = w.server.scores.standing(w.client_host.peer_id)
    assert standing.offences == 1 and standing.banned_until is None
    assert standing.last_reason is not None and "exchange request" in standing.last_reason
    remote = await w.client_host.run_trio(w.client.get_head, w.server.peer_id, w.did)
    assert remote.head == w.blocks[-1]


async def test_oversized_request_refused_from_its_prefix(world: World) -> None:
    w = world
    # A REQUEST header announcing 1 GiB, then a little of it: the server resets the
    # stream after the header, without waiting for (or keeping) the payload.
    header = (2**30).to_bytes(4, "big") + bytes([FrameType.REQUEST])
    assert await _raw_request(w, header + b"{" * 1000) == b""
    assert w.server.guard_stats.handler_failures == 0
    standing = w.server.scores.standing(w.client_host.peer_id)
    assert standing.score == -Offence.LIMIT_EXCEEDED.value
    # A second offence bans: the peer's streams are refused from then on.
    assert await _raw_request(w, header) == b""
    assert w.server.scores.is_banned(w.client_host.peer_id)


class BombServer(ExchangeServer):
    """Answers head requests with hostile JSON."""

    def __init__(self, ws: Workspace, payload: bytes) -> None:
        super().__init__(ws, limits=LIMITS)
        self.payload = payload

    async def _serve_head(self, stream: Any, did: DatasetId) -> None:
        await write_frame(stream, FrameType.HEAD, self.payload, 5.0)


@pytest.mark.parametrize(
    ("payload", "offence"),
    [
        (b'{"head":' + b"1" * 5000 + b"}", Offence.LIMIT_EXCEEDED),
        (b'{"head":null,"record":' + b"[" * 2000 + b"]" * 2000 + b"}", Offence.LIMIT_EXCEEDED),
        (b'{"head":null', Offence.PROTOCOL_ERROR),
    ],
    ids=["huge-int", "deep", "truncated"],
)
async def test_hostile_json_answers_are_typed_and_charged(
    world: World, payload: bytes, offence: Offence
) -> None:
    w = world
    async with P2PHost() as bad:
        BombServer(w.ws, payload).register(bad)
        await w.client_host.connect(bad.addrs[0])
        with pytest.raises(PeerJsonError):
            await w.client_host.run_trio(w.client.get_head, bad.peer_id, w.did)
        assert w.client.scores.standing(bad.peer_id).score == -offence.value


# -- hostile servers -----------------------------------------------------------------------


class HostileServer(ExchangeServer):
    """Serves heads and blocks honestly, objects according to ``mode``."""

    def __init__(self, ws: Workspace, mode: str) -> None:
        super().__init__(ws, limits=LIMITS)
        self.mode = mode

    async def _serve_object(
        self, stream: Any, did: DatasetId, kind: ObjectKind, h: Multihash, peer: str
    ) -> None:
        layout = self.workspace.get(did).layout
        data = (layout.data if kind == "data" else layout.checkpoints).get(h)
        t = 5.0
        if self.mode == "oversized":
            # A header announcing a 100 MiB chunk: refused before any payload is read.
            await stream.write((100 * 2**20).to_bytes(4, "big") + bytes([FrameType.CHUNK]))
            await trio.sleep(30)
            return
        size = len(data)
        await write_frame(stream, FrameType.OBJECT, b'{"size":%d}' % size, t)
        if self.mode == "stall":
            await write_frame(stream, FrameType.CHUNK, data[:1000], t)
            await trio.sleep(30)
            return
        if self.mode == "wrong":
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        elif self.mode == "longer":
            data = data + b"extra"
        elif self.mode == "shorter":
            data = data[:-10]
        for i in range(0, len(data), 2**20):
            await write_frame(stream, FrameType.CHUNK, data[i : i + 2**20], t)
        await write_frame(stream, FrameType.END, b"", t)


@pytest.mark.parametrize(
    ("mode", "error", "offence"),
    [
        ("wrong", PeerMisbehaved, Offence.BAD_BYTES),
        ("longer", PeerMisbehaved, Offence.BAD_BYTES),
        ("shorter", PeerMisbehaved, Offence.BAD_BYTES),
        ("oversized", FrameTooLarge, Offence.LIMIT_EXCEEDED),
        ("stall", TransferTimeout, Offence.TIMEOUT),
    ],
)
async def test_hostile_peer_penalised_and_honest_peer_serves(
    world: World, tmp_path: Path, mode: str, error: type[Exception], offence: Offence
) -> None:
    w = world
    async with P2PHost() as bad:
        HostileServer(w.ws, mode).register(bad)
        await w.client_host.connect(bad.addrs[0])
        dest = tmp_path / "client" / "data" / w.data_hash.to_multibase()
        fetch = w.client.get_object
        with pytest.raises(error):
            await w.client_host.run_trio(fetch, bad.peer_id, w.did, "data", w.data_hash, dest)
        # Nothing unverified is visible, and no quarantine file is left behind.
        assert not dest.exists() and _pending(dest.parent) == []
        standing = w.client.scores.standing(bad.peer_id)
        assert standing.score == -offence.value
        assert (standing.banned_until is not None) == (offence is Offence.BAD_BYTES)
        # The honest peer serves the same object.
        peers = w.client.scores.usable([bad.peer_id, w.server.peer_id])
        assert peers[0] == w.server.peer_id
        await w.client_host.run_trio(fetch, w.server.peer_id, w.did, "data", w.data_hash, dest)
        assert dest.read_bytes() == w.data


async def test_pull_dataset_over_libp2p_from_hostile_and_honest_peer(tmp_path: Path) -> None:
    from p2p.sync import pull_dataset
    from tests.p2p.sync_helpers import make_dataset

    src_ws = Workspace.init(tmp_path / "src")
    ds = make_dataset(src_ws, "acme/data", tmp_path / "slices", slices=4, pad=300_000)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    dst_ws = Workspace.init(tmp_path / "dst")
    honest, hostile, puller = P2PHost(), P2PHost(), P2PHost()
    ExchangeServer(src_ws, limits=LIMITS).register(honest)
    HostileServer(src_ws, "wrong").register(hostile)
    async with honest, hostile, puller:
        await puller.connect(honest.addrs[0])
        await puller.connect(hostile.addrs[0])
        client = ExchangeClient(puller, limits=LIMITS)
        sources = [Libp2pSource(puller, client, p, did) for p in (hostile.peer_id, honest.peer_id)]
        assert await sources[0].get_head() == ds.head()
        result = await asyncio.wait_for(pull_dataset(dst_ws, sources, dataset_id=did), 40)
        assert result.new_head == ds.head()
        copy = dst_ws.get(did)
        assert copy.head() == ds.head()
        for h in ds.layout.data.iter_hashes():
            copy.layout.data.check(h)  # every object present and hashing to its name
        assert client.scores.is_banned(hostile.peer_id)
        assert not client.scores.is_banned(honest.peer_id)
