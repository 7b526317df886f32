"""Sharded head gossip between real hosts on loopback TCP.

Who receives what: a follower of dataset X gets X's heads over X's shard topic; a node
in neither X's shard nor a backbone shard holding it gets none; a node speaking only
the single head topic and a node with shards understand each other both ways; a
malformed or misplaced message on a shard topic is dropped and a new peer can still
connect afterwards; following ``all`` joins every shard, and unfollowing leaves them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field

import pytest
from libp2p.peer.id import ID

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.errors import InvalidHeadRecord
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord, sign_head
from p2p.libp2p.gossip import HEADS_TOPIC, HeadGossip, SignedGossip
from p2p.libp2p.host import GossipMessage, P2PHost
from p2p.libp2p.shards import (
    SHARD_COUNT,
    backbone_shards,
    current_epoch,
    shard_of,
    shard_topic,
    topic_for,
)
from tests.p2p.sync_helpers import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@dataclass
class Node:
    host: P2PHost
    got: list[HeadRecord] = field(default_factory=list)
    sharded: HeadGossip | None = None
    single: SingleTopicGossip | None = None

    async def on_record(self, record: HeadRecord, origin: str) -> None:
        self.got.append(record)

    def heads_of(self, key: KeyPair) -> list[int]:
        return [r.sequence_number for r in self.got if r.dataset_id == key.dataset_id]

    @property
    def gossip(self) -> HeadGossip:
        assert self.sharded is not None
        return self.sharded

    async def announce(self, record: HeadRecord) -> None:
        if self.single is not None:
            await self.single.announce(record)
        else:
            await self.gossip.announce(record)


class SingleTopicGossip(SignedGossip[HeadRecord]):
    """Head gossip of a node without shards: the single topic only, in and out."""

    max_bytes = MAX_HEAD_RECORD_BYTES
    max_seen = 4096
    invalid = InvalidHeadRecord

    def parse(self, data: bytes) -> HeadRecord:
        return HeadRecord.from_json(data)

    def dedup_key(self, item: HeadRecord, msg: GossipMessage) -> Hashable:
        return (msg.data, msg.origin)

    async def announce(self, record: HeadRecord) -> None:
        await self.host.publish(self.topic, record.to_json())


@contextlib.asynccontextmanager
async def nodes(*kinds: str) -> AsyncIterator[list[Node]]:
    """Started nodes: ``shards`` (shard topics only), ``both`` (shards and the single
    topic), ``single`` (the single topic only) or ``bare`` (a host, no head gossip)."""
    out: list[Node] = []
    try:
        for kind in kinds:
            host = P2PHost()
            await host.start()
            node = Node(host)
            if kind == "single":
                node.single = SingleTopicGossip(
                    host, node.on_record, forward_if=None, topic=HEADS_TOPIC
                )
                await node.single.start()
            elif kind != "bare":
                node.sharded = HeadGossip(host, node.on_record, single_topic=kind == "both")
                await node.sharded.start()
            out.append(node)
        yield out
    finally:
        for node in out:
            await node.host.stop()


def backbones(hosts: list[Node]) -> set[int]:
    """Every backbone shard of ``hosts`` in this epoch and the next (a test may cross it)."""
    epoch = current_epoch(time.time())
    return {
        s
        for n in hosts
        for e in (epoch, epoch + 1)
        for s in backbone_shards(ID.from_base58(n.host.peer_id).to_bytes(), e)
    }


def key_outside(shards: set[int]) -> KeyPair:
    """A dataset key whose shard is not in ``shards``."""
    while True:
        key = KeyPair.generate()
        if shard_of(key.dataset_id) not in shards:
            return key


def record(key: KeyPair, seq: int) -> HeadRecord:
    head = Multihash.sha3_256(b"block %d" % seq)
    return sign_head(key, head, seq, Timestamp.parse_rfc3339("2024-01-01T00:00:00Z"))


def knows(node: Node, peer: Node, did: DatasetId) -> bool:
    return peer.host.peer_id in node.host.mesh_peers(topic_for(did))


async def test_followers_get_their_shard_and_nothing_else() -> None:
    async with nodes("shards", "shards", "shards") as (a, b, c):
        await b.host.connect(a.host.addrs[0])
        await c.host.connect(a.host.addrs[0])
        await c.host.connect(b.host.addrs[0])
        x = key_outside(backbones([a, b, c]))
        y = key_outside(backbones([a, b, c]) | {shard_of(x.dataset_id)})
        await b.gossip.follow([x.dataset_id])
        await c.gossip.follow([y.dataset_id])
        assert topic_for(x.dataset_id) not in c.gossip.topics
        await wait_for(lambda: knows(a, b, x.dataset_id), "A to learn B is in X's shard")
        await wait_for(lambda: knows(a, c, y.dataset_id), "A to learn C is in Y's shard")

        await a.announce(record(x, 1))
        await a.announce(record(y, 1))
        await wait_for(lambda: b.heads_of(x) == [1], "the follower of X to get X's head")
        await wait_for(lambda: c.heads_of(y) == [1], "the follower of Y to get Y's head")
        assert c.heads_of(x) == [] and b.heads_of(y) == []

        # Unfollowing at run time leaves the shard: X's next head does not reach B.
        await b.gossip.follow([])
        await wait_for(lambda: not knows(a, b, x.dataset_id), "A to learn B left X's shard")
        await a.announce(record(x, 2))
        await a.announce(record(y, 2))
        await wait_for(lambda: c.heads_of(y) == [1, 2], "the follower of Y to get Y's next head")
        assert b.heads_of(x) == [1] and c.heads_of(x) == []


async def test_a_single_topic_node_and_a_sharded_node_understand_each_other() -> None:
    async with nodes("single", "both") as (old, new):
        await new.host.connect(old.host.addrs[0])
        await wait_for(lambda: old.host.peer_id in new.host.mesh_peers(HEADS_TOPIC), "mesh")
        await wait_for(lambda: new.host.peer_id in old.host.mesh_peers(HEADS_TOPIC), "mesh")
        from_old, from_new = KeyPair.generate(), KeyPair.generate()
        await old.announce(record(from_old, 1))
        await wait_for(lambda: new.heads_of(from_old) == [1], "the sharded node to hear it")
        await new.announce(record(from_new, 1))
        await wait_for(lambda: old.heads_of(from_new) == [1], "the single-topic node to hear it")


async def test_a_sharded_node_delivers_a_head_heard_on_both_topics_once() -> None:
    async with nodes("both", "both") as (a, b):
        await b.host.connect(a.host.addrs[0])
        key = key_outside(set())
        await b.gossip.follow([key.dataset_id])
        await wait_for(lambda: knows(a, b, key.dataset_id), "A to learn B is in the shard")
        await wait_for(lambda: b.host.peer_id in a.host.mesh_peers(HEADS_TOPIC), "mesh")
        await a.announce(record(key, 1))
        await wait_for(lambda: b.gossip.duplicates == 1, "the copy on the other topic")
        assert b.heads_of(key) == [1]


async def test_bad_shard_messages_are_dropped_and_new_peers_still_connect() -> None:
    async with nodes("shards", "bare") as (victim, evil):
        x = KeyPair.generate()
        elsewhere = key_outside({shard_of(x.dataset_id)})
        await victim.gossip.follow([x.dataset_id])
        await evil.host.connect(victim.host.addrs[0])
        await wait_for(lambda: knows(evil, victim, x.dataset_id), "evil to see the shard")
        shard = topic_for(x.dataset_id)
        await evil.host.publish(shard, b"\x00 not a head record")
        await evil.host.publish(shard, record(elsewhere, 1).to_json())  # another shard's
        await wait_for(lambda: victim.gossip.rejected >= 2, "the victim to drop both")
        assert victim.got == []

        async with nodes("shards") as (newcomer,):
            await newcomer.host.connect(victim.host.addrs[0])
            await wait_for(lambda: knows(newcomer, victim, x.dataset_id), "the shard")
            await newcomer.announce(record(x, 1))
            await wait_for(lambda: victim.heads_of(x) == [1], "the victim to get X's head")


async def test_following_all_joins_every_shard_and_unfollowing_leaves_them() -> None:
    async with nodes("both") as (node,):
        backbone = {shard_topic(s) for s in node.gossip.shards.backbone()}
        assert node.gossip.shards.joined == backbone
        await node.gossip.follow([], every_shard=True)
        assert len(node.gossip.shards.joined) == SHARD_COUNT
        assert node.host.topics == node.gossip.topics == node.gossip.shards.joined | {HEADS_TOPIC}
        await node.gossip.follow([])
        assert node.host.topics == backbone | {HEADS_TOPIC}
