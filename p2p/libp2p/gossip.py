"""Signed-head gossip over gossipsub: announce and receive `HeadRecord` s.

Topic: **one global topic**, `HEADS_TOPIC` (``/odf/heads/1.0.0``). A head announcement
is under 1 KiB and datasets move rarely, so every node can afford to see every
announcement; one topic means one gossipsub mesh (per-dataset topics would need a mesh
per followed dataset and would hide datasets a node does not know yet, which matters
for resolving a DID through the network).

Message: exactly the canonical JSON of the record (`HeadRecord.to_json`), at most
`MAX_HEAD_RECORD_BYTES`. The gossipsub validator (run in the host's trio thread)
parses it and verifies the signature against the DID before the message is delivered
*or forwarded*, so forged or malformed records die at the first honest hop and lower
their sender's gossipsub score. An optional ``is_fresh`` predicate (for example "the
sequence number is above the one in `p2p.head_store.HeadStore`") also stops stale
records from being forwarded.

Receipt: ``on_record(record, origin)`` runs on the asyncio loop; ``origin`` is the peer
that published this message (gossipsub StrictSign authenticates it), i.e. a peer that
claims to hold that head. The daemon passes the record to ``HeadStore.accept`` and
schedules a pull (from ``origin`` and any connected peer that has the head). Nodes
that finish replicating a head may re-announce the same record: that is a new
gossipsub message from a new origin, so receivers learn one more provider.

Duplicates: gossipsub drops repeats of one message; on top of that, a record already
delivered *from the same origin* is not delivered again (`MAX_SEEN_RECORDS` most recent
kept). Equivocation (same sequence number, different head) differs in bytes and is
always delivered, so the head store can record the evidence.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Final, Generic, TypeVar

from p2p.errors import InvalidGossip, InvalidHeadRecord
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord
from p2p.libp2p.host import GossipMessage, P2PHost

__all__ = [
    "HEADS_TOPIC",
    "MAX_SEEN_RECORDS",
    "HeadGossip",
    "RecordHandler",
    "SignedGossip",
]

log = logging.getLogger(__name__)

#: The gossipsub topic of head announcements.
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
    """Announces and receives signed head records on `HEADS_TOPIC`.

    Args:
        host: the libp2p host (started before `start`).
        on_record: called for each new valid record (see the module docstring).
        is_fresh: optional predicate, run in the host's trio thread, that rejects
            records not worth forwarding (must be thread-safe and quick).
        topic: the topic (tests may isolate themselves with another one).
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
    ) -> None:
        super().__init__(host, on_record, forward_if=is_fresh, topic=topic)

    @property
    def is_fresh(self) -> Callable[[HeadRecord], bool] | None:
        """The forwarding predicate (assignable)."""
        return self._forward_if

    @is_fresh.setter
    def is_fresh(self, value: Callable[[HeadRecord], bool] | None) -> None:
        self._forward_if = value

    def parse(self, data: bytes) -> HeadRecord:
        """Parse and verify a head record."""
        return HeadRecord.from_json(data)

    def dedup_key(self, item: HeadRecord, msg: GossipMessage) -> Hashable:
        """Same bytes from the same origin (a re-announcement elsewhere is news)."""
        return (hashlib.sha256(msg.data).digest(), msg.origin)

    async def announce(self, record: HeadRecord) -> None:
        """Publish ``record`` (signed by the dataset key) on the topic.

        Raises:
            InvalidHeadRecord: the record does not verify (never gossip a bad one).
            HostError / HostNotRunning: see `P2PHost.publish`.
        """
        record.verify()
        await self.host.publish(self.topic, record.to_json())
