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

from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Final

from p2p.attestation import MAX_ATTESTATION_BYTES, Attestation
from p2p.errors import InvalidAttestation
from p2p.libp2p.gossip import SignedGossip
from p2p.libp2p.host import GossipMessage, P2PHost

__all__ = [
    "ATTESTATIONS_TOPIC",
    "MAX_SEEN_ATTESTATIONS",
    "AttestationGossip",
    "AttestationHandler",
]

#: The gossipsub topic of attestations.
ATTESTATIONS_TOPIC: Final = "/odf/attestations/1.0.0"
#: Digests remembered for duplicate suppression.
MAX_SEEN_ATTESTATIONS: Final = 16_384

AttestationHandler = Callable[[Attestation, str], Coroutine[Any, Any, None]]
"""asyncio coroutine function called as ``on_attestation(attestation, origin_peer_id)``."""


class AttestationGossip(SignedGossip[Attestation]):
    """Publishes and receives attestations on `ATTESTATIONS_TOPIC`.

    Args:
        host: the libp2p host (started before `start`).
        on_attestation: called for each new valid attestation.
        is_relevant: optional predicate, run in the host's trio thread, that rejects
            attestations not worth forwarding (must be thread-safe and quick).
        topic: the topic (tests may isolate themselves with another one).
    """

    max_bytes = MAX_ATTESTATION_BYTES
    max_seen = MAX_SEEN_ATTESTATIONS
    invalid = InvalidAttestation

    def __init__(
        self,
        host: P2PHost,
        on_attestation: AttestationHandler,
        *,
        is_relevant: Callable[[Attestation], bool] | None = None,
        topic: str = ATTESTATIONS_TOPIC,
    ) -> None:
        super().__init__(host, on_attestation, forward_if=is_relevant, topic=topic)

    def parse(self, data: bytes) -> Attestation:
        """Parse and verify an attestation."""
        return Attestation.from_json(data)

    def dedup_key(self, item: Attestation, msg: GossipMessage) -> Hashable:
        """The attestation's digest, whoever relays it."""
        return bytes.fromhex(item.digest)

    async def publish(self, attestation: Attestation) -> None:
        """Publish ``attestation`` on the topic.

        Raises:
            InvalidAttestation: it does not verify (never gossip a bad one).
            HostError / HostNotRunning: see `P2PHost.publish`.
        """
        attestation.verify()
        await self.host.publish(self.topic, attestation.to_json())
