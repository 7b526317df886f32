"""Attestation gossip over gossipsub: publish and receive validator `Attestation` s.

Topic: one global topic, `ATTESTATIONS_TOPIC` (``/odf/attestations/1.0.0``), separate
from head announcements so that nodes not interested in verdicts need not relay them
and so that a flood of attestations cannot crowd out heads (gossipsub rate limits are
per topic).

Message: exactly the canonical JSON of the attestation (`Attestation.to_json`), at most
`MAX_ATTESTATION_BYTES`. The gossipsub validator (run in the host's trio thread) parses
it and verifies the signature against the validator's DID before the message is
delivered *or forwarded*: forged and malformed attestations die at the first honest
hop. An optional ``is_relevant`` predicate (e.g. "the dataset is known here") stops
forwarding of attestations about datasets nobody nearby holds.

Receipt: ``on_attestation(attestation, origin)`` runs on the asyncio loop; the daemon
passes it to `p2p.attestation_store.AttestationStore.accept`, which enforces the rest
(known dataset, block in the chain, no replay). An attestation already delivered is not
delivered again (by digest; `MAX_SEEN_ATTESTATIONS` most recent kept), whatever peer
relays it: unlike head records, the origin of an attestation tells nothing useful.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, Final

from p2p.attestation import MAX_ATTESTATION_BYTES, Attestation
from p2p.errors import InvalidAttestation
from p2p.host import GossipMessage, P2PHost

__all__ = [
    "ATTESTATIONS_TOPIC",
    "MAX_SEEN_ATTESTATIONS",
    "AttestationGossip",
    "AttestationHandler",
]

log = logging.getLogger(__name__)

#: The gossipsub topic of attestations.
ATTESTATIONS_TOPIC: Final = "/odf/attestations/1.0.0"
#: Digests remembered for duplicate suppression.
MAX_SEEN_ATTESTATIONS: Final = 16_384

AttestationHandler = Callable[[Attestation, str], Coroutine[Any, Any, None]]
"""asyncio coroutine function called as ``on_attestation(attestation, origin_peer_id)``."""


class AttestationGossip:
    """Publishes and receives attestations on `ATTESTATIONS_TOPIC`.

    Args:
        host: the libp2p host (started before `start`).
        on_attestation: called for each new valid attestation.
        is_relevant: optional predicate, run in the host's trio thread, that rejects
            attestations not worth forwarding (must be thread-safe and quick).
        topic: the topic (tests may isolate themselves with another one).
    """

    def __init__(
        self,
        host: P2PHost,
        on_attestation: AttestationHandler,
        *,
        is_relevant: Callable[[Attestation], bool] | None = None,
        topic: str = ATTESTATIONS_TOPIC,
    ) -> None:
        self.host = host
        self.topic = topic
        self._on_attestation = on_attestation
        self.is_relevant = is_relevant
        self._seen: OrderedDict[bytes, None] = OrderedDict()
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
        if len(msg.data) > MAX_ATTESTATION_BYTES:
            self.rejected += 1
            return False
        try:
            attestation = Attestation.from_json(msg.data)
        except InvalidAttestation as e:
            log.info("dropping invalid attestation from %s: %s", msg.origin, e)
            self.rejected += 1
            return False
        return self.is_relevant is None or msg.from_self or self.is_relevant(attestation)

    async def _deliver(self, msg: GossipMessage) -> None:
        try:
            attestation = Attestation.from_json(msg.data)  # again: cheap, and safe
        except InvalidAttestation:
            self.rejected += 1
            return
        key = bytes.fromhex(attestation.digest)
        if key in self._seen:
            self.duplicates += 1
            return
        self._seen[key] = None
        while len(self._seen) > MAX_SEEN_ATTESTATIONS:
            self._seen.popitem(last=False)
        await self._on_attestation(attestation, msg.origin)

    async def publish(self, attestation: Attestation) -> None:
        """Publish ``attestation`` on the topic.

        Raises:
            InvalidAttestation: it does not verify (never gossip a bad one).
            HostError / HostNotRunning: see `P2PHost.publish`.
        """
        attestation.verify()
        await self.host.publish(self.topic, attestation.to_json())
