"""Signed-head gossip over gossipsub: announce and receive `HeadRecord` s.

Topics: a dataset's heads go on its **shard topic** (`p2p.libp2p.shards`: 256 topics by
a hash of the dataset ID), and a node subscribes to the shards of the datasets it
publishes or follows plus two backbone shards that help relay
(`p2p.libp2p.shard_subscriptions`), so it receives and checks only those
announcements, and the per-forwarder rate limit applies per shard instead of to the
whole network. For one release every head is **also** published on, and received
from, the single topic `HEADS_TOPIC` (``/odf/heads/1.0.0``) that nodes without shards
speak; a record that arrives on both is delivered once (below), and the head store
ignores what it holds already.

Message: exactly the canonical JSON of the record (`HeadRecord.to_json`), at most
`MAX_HEAD_RECORD_BYTES`. The gossipsub validator (run in the host's trio thread)
parses it, verifies the signature against the DID and, on a shard topic, checks that
the record belongs to that shard, before the message is delivered *or forwarded*, so
forged, malformed or misplaced records die at the first honest hop and lower their
sender's gossipsub score. An optional ``is_fresh`` predicate (for example "the
sequence number is above the one in `p2p.head_store.HeadStore`") also stops stale
records from being forwarded.

Receipt: ``on_record(record, origin)`` runs on the asyncio loop; ``origin`` is the peer
that published this message (gossipsub StrictSign authenticates it), i.e. a peer that
claims to hold that head. The daemon passes the record to ``HeadStore.accept`` and
schedules a pull (from ``origin`` and any connected peer that has the head). Nodes
that finish replicating a head may re-announce the same record: on the single topic
that is a new message from a new origin, so receivers learn one more provider; on a
shard topic message ids are content-addressed, so the repeat dies at the first hop.

Duplicates: gossipsub drops repeats of one message; on top of that, a record already
delivered *from the same origin* is not delivered again, whichever topic brought it
(`MAX_SEEN_RECORDS` most recent kept). Equivocation (same sequence number, different
head) differs in bytes and is always delivered, so the head store can record the
evidence.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable, Iterable
from typing import Any, Final, Generic, TypeVar

from fbs.did import DatasetId
from p2p.errors import InvalidGossip, InvalidHeadRecord
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord
from p2p.libp2p.host import GossipMessage, P2PHost
from p2p.libp2p.shard_subscriptions import ShardSubscriptions
from p2p.libp2p.shards import BACKBONE_SHARDS_PER_NODE, is_shard_topic, topic_for

__all__ = [
    "HEADS_TOPIC",
    "MAX_SEEN_RECORDS",
    "HeadGossip",
    "RecordHandler",
    "SignedGossip",
]

log = logging.getLogger(__name__)

#: The single head topic every node speaks for one release beside the shard topics.
HEADS_TOPIC: Final = "/odf/heads/1.0.0"
#: ``(record, origin)`` pairs remembered for duplicate suppression.
MAX_SEEN_RECORDS: Final = 4096

_T = TypeVar("_T")

RecordHandler = Callable[[HeadRecord, str], Coroutine[Any, Any, None]]
"""asyncio coroutine function called as ``on_record(record, origin_peer_id)``."""


class SignedGossip(Generic[_T]):
    """One gossipsub topic carrying self-verifying signed records of type ``_T``.

    The shared mechanics of head and attestation gossip: a size cap and a full parse +
    signature check in gossipsub's validator (so bad messages are neither delivered nor
    forwarded), an optional forwarding predicate, bounded duplicate suppression, and
    delivery on the asyncio loop. Subclasses say how to parse, verify and key a record.

    Args:
        host: the libp2p host (started before `start`).
        on_item: called as ``on_item(item, origin)`` for each new valid record.
        forward_if: optional predicate, run in the host's trio thread, that rejects
            records not worth forwarding (must be thread-safe and quick).
        topic: the topic.
    """

    #: Largest message accepted (bytes).
    max_bytes: int
    #: Dedup keys remembered.
    max_seen: int
    #: What a record that fails to parse or verify raises.
    invalid: type[Exception]

    def __init__(
        self,
        host: P2PHost,
        on_item: Callable[[_T, str], Coroutine[Any, Any, None]],
        *,
        forward_if: Callable[[_T], bool] | None,
        topic: str,
    ) -> None:
        self.host = host
        self.topic = topic
        self._on_item = on_item
        self._forward_if = forward_if
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self.rejected = 0
        self.duplicates = 0

    def parse(self, data: bytes) -> _T:
        """Parse and verify one message (raises `invalid`)."""
        raise NotImplementedError

    def dedup_key(self, item: _T, msg: GossipMessage) -> Hashable:
        """What makes a delivery a repeat."""
        raise NotImplementedError

    def check_topic(self, item: _T, msg: GossipMessage) -> None:
        """Refuse a valid record on a topic it does not belong to (raises `InvalidGossip`)."""

    async def start(self) -> None:
        """Subscribe to the topic (with the validator).

        Raises:
            HostNotRunning: the host is not running.
        """
        await self.host.subscribe(self.topic, self._deliver, validator=self._validate)

    def _validate(self, msg: GossipMessage) -> bool:
        # Runs in the trio thread, for received *and* own messages. An invalid message
        # raises `InvalidGossip` (the host penalises its forwarder); a valid one not
        # worth forwarding returns False (stale news is not an offence).
        if len(msg.data) > self.max_bytes:
            self.rejected += 1
            raise InvalidGossip(f"{len(msg.data)} bytes, over {self.max_bytes}")
        try:
            item = self.parse(msg.data)
        except self.invalid as e:
            # Debug only: a flood of forged records would otherwise flood the log.
            log.debug("dropping invalid message on %s from %s: %s", self.topic, msg.origin, e)
            self.rejected += 1
            raise InvalidGossip(str(e)) from None
        try:
            self.check_topic(item, msg)
        except InvalidGossip:
            self.rejected += 1
            raise
        # Our own messages are always sent; others only if worth forwarding.
        return self._forward_if is None or msg.from_self or self._forward_if(item)

    async def _deliver(self, msg: GossipMessage) -> None:
        try:
            # The validator checked it already; parsing again keeps this path safe even
            # if a validator was bypassed (and costs one ed25519 verify).
            item = self.parse(msg.data)
        except self.invalid:
            self.rejected += 1
            return
        key = self.dedup_key(item, msg)
        if key in self._seen:
            self.duplicates += 1
            return
        self._seen[key] = None
        while len(self._seen) > self.max_seen:
            self._seen.popitem(last=False)
        await self._on_item(item, msg.origin)


class HeadGossip(SignedGossip[HeadRecord]):
    """Announces and receives signed head records on shard topics and `HEADS_TOPIC`.

    Args:
        host: the libp2p host (started before `start`).
        on_record: called for each new valid record (see the module docstring).
        is_fresh: optional predicate, run in the host's trio thread, that rejects
            records not worth forwarding (must be thread-safe and quick).
        topic: the single head topic (tests may isolate themselves with another one).
        single_topic: also publish on and listen to ``topic``; off, the node speaks
            shard topics only (``None``: the host's ``GossipSettings.legacy_topic``,
            read when the gossip starts).
        backbone_per_node: backbone shards joined.
    """

    max_bytes = MAX_HEAD_RECORD_BYTES
    max_seen = MAX_SEEN_RECORDS
    invalid = InvalidHeadRecord

    def __init__(
        self,
        host: P2PHost,
        on_record: RecordHandler,
        *,
        is_fresh: Callable[[HeadRecord], bool] | None = None,
        topic: str = HEADS_TOPIC,
        single_topic: bool | None = None,
        backbone_per_node: int = BACKBONE_SHARDS_PER_NODE,
    ) -> None:
        super().__init__(host, on_record, forward_if=is_fresh, topic=topic)
        self._single_topic = single_topic
        self.shards = ShardSubscriptions(
            host, self._join_shard, backbone_per_node=backbone_per_node
        )

    @property
    def is_fresh(self) -> Callable[[HeadRecord], bool] | None:
        """The forwarding predicate (assignable)."""
        return self._forward_if

    @is_fresh.setter
    def is_fresh(self, value: Callable[[HeadRecord], bool] | None) -> None:
        self._forward_if = value

    @property
    def single_topic(self) -> bool:
        """Whether heads also go on, and come from, the single topic."""
        if self._single_topic is None:
            return self.host.config.gossip.legacy_topic
        return self._single_topic

    @property
    def topics(self) -> frozenset[str]:
        """Every head topic this node is subscribed to now."""
        single = {self.topic} if self.single_topic else set()
        return self.shards.joined | single

    async def start(self) -> None:
        """Subscribe to the single topic (if spoken) and the backbone shards.

        Raises:
            HostNotRunning: the host is not running.
        """
        if self.single_topic:
            await super().start()
        await self.shards.sync()

    async def _join_shard(self, topic: str) -> None:
        await self.host.subscribe(topic, self._deliver, validator=self._validate)

    async def follow(self, datasets: Iterable[DatasetId], *, every_shard: bool = False) -> None:
        """Listen to the shards of ``datasets`` (every shard with ``every_shard``).

        Raises:
            HostNotRunning: the host is not running.
        """
        await self.shards.follow(datasets, every_shard=every_shard)

    def parse(self, data: bytes) -> HeadRecord:
        """Parse and verify a head record."""
        return HeadRecord.from_json(data)

    def dedup_key(self, item: HeadRecord, msg: GossipMessage) -> Hashable:
        """Same bytes from the same origin (a re-announcement elsewhere is news)."""
        return (hashlib.sha256(msg.data).digest(), msg.origin)

    def check_topic(self, item: HeadRecord, msg: GossipMessage) -> None:
        """A record on a shard topic must be of that shard (raises `InvalidGossip`)."""
        if is_shard_topic(msg.topic) and topic_for(item.dataset_id) != msg.topic:
            raise InvalidGossip(f"a head of {topic_for(item.dataset_id)} on {msg.topic}")

    async def announce(self, record: HeadRecord) -> None:
        """Publish ``record`` (signed by the dataset key) on its shard and the single topic.

        The host joins the record's shard first (it publishes that dataset from now on).

        Raises:
            InvalidHeadRecord: the record does not verify (never gossip a bad one).
            HostError / HostNotRunning: see `P2PHost.publish`.
        """
        record.verify()
        data = record.to_json()
        shard = await self.shards.publishing(record.dataset_id)
        await self.host.publish(shard, data)
        if self.single_topic:
            await self.host.publish(self.topic, data)
