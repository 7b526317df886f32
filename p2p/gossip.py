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
from collections.abc import Callable, Coroutine
from typing import Any, Final

from p2p.errors import InvalidHeadRecord
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord
from p2p.host import GossipMessage, P2PHost

__all__ = [
    "HEADS_TOPIC",
    "MAX_SEEN_RECORDS",
    "HeadGossip",
    "RecordHandler",
]

log = logging.getLogger(__name__)

#: The gossipsub topic of head announcements.
HEADS_TOPIC: Final = "/odf/heads/1.0.0"
#: ``(record, origin)`` pairs remembered for duplicate suppression.
MAX_SEEN_RECORDS: Final = 4096

RecordHandler = Callable[[HeadRecord, str], Coroutine[Any, Any, None]]
"""asyncio coroutine function called as ``on_record(record, origin_peer_id)``."""


class HeadGossip:
    """Announces and receives signed head records on `HEADS_TOPIC`.

    Args:
        host: the libp2p host (started before `start`).
        on_record: called for each new valid record (see the module docstring).
        is_fresh: optional predicate, run in the host's trio thread, that rejects
            records not worth forwarding (must be thread-safe and quick).
        topic: the topic (tests may isolate themselves with another one).
    """

    def __init__(
        self,
        host: P2PHost,
        on_record: RecordHandler,
        *,
        is_fresh: Callable[[HeadRecord], bool] | None = None,
        topic: str = HEADS_TOPIC,
    ) -> None:
        self.host = host
        self.topic = topic
        self._on_record = on_record
        self.is_fresh = is_fresh
        self._seen: OrderedDict[tuple[bytes, str], None] = OrderedDict()
        self.rejected = 0
        self.duplicates = 0

    async def start(self) -> None:
        """Subscribe to the topic (with the validator).

        Raises:
            HostNotRunning: the host is not running.
        """
        await self.host.subscribe(self.topic, self._deliver, validator=self._validate)

    def _validate(self, msg: GossipMessage) -> bool:
        # Runs in the trio thread, for received *and* own messages.
        if len(msg.data) > MAX_HEAD_RECORD_BYTES:
            self.rejected += 1
            return False
        try:
            record = HeadRecord.from_json(msg.data)
        except InvalidHeadRecord as e:
            log.info("dropping invalid head record from %s: %s", msg.origin, e)
            self.rejected += 1
            return False
        # Our own announcements are always sent; others only if worth forwarding.
        return self.is_fresh is None or msg.from_self or self.is_fresh(record)

    async def _deliver(self, msg: GossipMessage) -> None:
        try:
            # The validator checked it already; parsing again keeps this path safe even
            # if a validator was bypassed (and costs one ed25519 verify).
            record = HeadRecord.from_json(msg.data)
        except InvalidHeadRecord:
            self.rejected += 1
            return
        key = (hashlib.sha256(msg.data).digest(), msg.origin)
        if key in self._seen:
            self.duplicates += 1
            return
        self._seen[key] = None
        while len(self._seen) > MAX_SEEN_RECORDS:
            self._seen.popitem(last=False)
        await self._on_record(record, msg.origin)

    async def announce(self, record: HeadRecord) -> None:
        """Publish ``record`` (signed by the dataset key) on the topic.

        Raises:
            InvalidHeadRecord: the record does not verify (never gossip a bad one).
            HostError / HostNotRunning: see `P2PHost.publish`.
        """
        record.verify()
        await self.host.publish(self.topic, record.to_json())
