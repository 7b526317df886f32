"""Signed-head gossip over gossipsub between real hosts on loopback (line A - B - C)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.errors import HostError, InvalidHeadRecord
from p2p.head_record import HeadRecord, sign_head
from p2p.libp2p.gossip import HeadGossip
from p2p.libp2p.host import P2PHost
from tests.p2p.sync_helpers import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOPIC = "/odf/heads/test"


@dataclass
class Node:
    host: P2PHost
    gossip: HeadGossip
    got: list[tuple[HeadRecord, str]] = field(default_factory=list)


@pytest.fixture
async def line() -> AsyncIterator[tuple[Node, Node, Node]]:
    nodes: list[Node] = []
    for _ in range(3):
        host = P2PHost()
        await host.start()
        got: list[tuple[HeadRecord, str]] = []

        def make(
            got: list[tuple[HeadRecord, str]],
        ) -> Callable[[HeadRecord, str], Coroutine[Any, Any, None]]:
            async def on_record(record: HeadRecord, origin: str) -> None:
                got.append((record, origin))

            return on_record

        gossip = HeadGossip(host, make(got), topic=TOPIC)
        await gossip.start()
        nodes.append(Node(host, gossip, got))
    a, b, c = nodes
    try:
        await b.host.connect(a.host.addrs[0])
        await c.host.connect(b.host.addrs[0])
        await wait_for(
            lambda: (
                set(b.host.mesh_peers(TOPIC)) == {a.host.peer_id, c.host.peer_id}
                and a.host.mesh_peers(TOPIC) == [b.host.peer_id]
                and c.host.mesh_peers(TOPIC) == [b.host.peer_id]
            ),
            "subscriptions to propagate",
        )
        assert c.host.peer_id not in a.host.peers()  # a line, not a triangle
        yield a, b, c
    finally:
        for n in nodes:
            await n.host.stop()


def record(key: KeyPair, seq: int, content: bytes = b"") -> HeadRecord:
    head = Multihash.sha3_256(b"block %d" % seq + content)
    return sign_head(key, head, seq, Timestamp.parse_rfc3339("2024-01-01T00:00:00Z"))


async def test_head_record_travels_two_hops(line: tuple[Node, Node, Node]) -> None:
    a, b, c = line
    key = KeyPair.generate()
    rec = record(key, 3)
    await a.gossip.announce(rec)
    await wait_for(lambda: len(c.got) == 1, "C to receive the record")
    await wait_for(lambda: len(b.got) == 1, "B to receive the record")
    assert c.got == [(rec, a.host.peer_id)]
    assert b.got == [(rec, a.host.peer_id)]
    assert c.got[0][0].dataset_id == key.dataset_id
    assert a.got == []  # own messages are not delivered back


async def test_forged_record_is_dropped_at_first_hop(line: tuple[Node, Node, Node]) -> None:
    a, b, c = line
    key, mallory = KeyPair.generate(), KeyPair.generate()
    good = record(key, 1)
    # Mallory signs a head for `key`'s dataset: the signature does not verify.
    forged_sig = sign_head(mallory, good.head, 2, good.system_time).signature
    forged = HeadRecord(key.dataset_id, good.head, 2, good.system_time, forged_sig)
    with pytest.raises(InvalidHeadRecord):
        await a.gossip.announce(forged)  # announce refuses to send it
    # A malicious node without our validator publishes it anyway, through B.
    async with P2PHost() as m:
        await m.connect(b.host.addrs[0])
        await wait_for(lambda: b.host.peer_id in m.mesh_peers(TOPIC), "M to see B's topic")
        await m.publish(TOPIC, forged.to_json())
        await m.publish(TOPIC, b"not json at all")
        await wait_for(lambda: b.gossip.rejected >= 2, "B to reject both messages")
    await a.gossip.announce(good)
    await wait_for(lambda: len(c.got) == 1 and len(b.got) == 1, "the valid record")
    assert [r for r, _ in c.got] == [good]
    assert [r for r, _ in b.got] == [good]
    assert c.gossip.rejected == 0  # never forwarded to C


async def test_duplicates_suppressed_but_new_providers_reported(
    line: tuple[Node, Node, Node],
) -> None:
    a, b, c = line
    key = KeyPair.generate()
    rec = record(key, 5)
    await a.gossip.announce(rec)
    await a.gossip.announce(rec)  # the same record again from the same origin
    marker = record(key, 6)
    await a.gossip.announce(marker)
    await wait_for(lambda: any(r == marker for r, _ in c.got), "the marker record")
    assert [r for r, _ in c.got].count(rec) == 1
    assert c.gossip.duplicates >= 1
    # B replicated the head and re-announces it: C learns B as another provider.
    await b.gossip.announce(rec)
    await wait_for(lambda: (rec, b.host.peer_id) in c.got, "B's re-announcement")
    # Equivocation (same sequence number, another head) is always delivered.
    twin = record(key, 5, b"other")
    await a.gossip.announce(twin)
    await wait_for(lambda: any(r == twin for r, _ in c.got), "the equivocating record")


async def test_stale_records_not_forwarded(line: tuple[Node, Node, Node]) -> None:
    a, b, c = line
    key = KeyPair.generate()
    seen_seq = {key.dataset_id: 10}
    # B forwards only records above the sequence number it holds.
    b.gossip.is_fresh = lambda r: r.sequence_number > seen_seq.get(r.dataset_id, -1)
    await a.gossip.announce(record(key, 9))
    fresh = record(key, 11)
    await a.gossip.announce(fresh)
    await wait_for(lambda: len(c.got) == 1, "the fresh record")
    assert [r for r, _ in c.got] == [fresh]


async def test_publish_limits() -> None:
    async with P2PHost() as h:
        with pytest.raises(HostError):
            await h.publish(TOPIC, b"x" * (64 * 1024 + 1))
        with pytest.raises(HostError):
            await h.publish("", b"x")
