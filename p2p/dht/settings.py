"""`DhtSettings`: the parameters of odf's DHT, each with the reason for its value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_LOOKUP_TIMEOUT_S",
    "DEFAULT_QUERY_TIMEOUT_S",
    "DEFAULT_QUORUM",
    "DEFAULT_REPROVIDE_INTERVAL_S",
    "DhtSettings",
]

#: Re-announce provided datasets hourly: well inside py-libp2p's 48 h record expiry,
#: and fast enough that a small, churning swarm (where the closest peers of a key
#: change often) relearns its holders within the hour. IPFS uses 22 h on millions of peers.
DEFAULT_REPROVIDE_INTERVAL_S: Final = 3600.0
#: Valid answers a head read wants (IPNS asks 16 of 20 on the public swarm; 3 suits
#: swarms of tens of peers, where fewer than 16 may be reachable).
DEFAULT_QUORUM: Final = 3
#: A whole lookup (iterative FIND_NODE and the queries after it); py-libp2p caps its
#: own lookups at 30 s.
DEFAULT_LOOKUP_TIMEOUT_S: Final = 30.0
#: One request to one peer (py-libp2p's ``QUERY_TIMEOUT``).
DEFAULT_QUERY_TIMEOUT_S: Final = 10.0
#: Equivocation pairs kept in memory (a flood of them cannot grow without bound).
DEFAULT_MAX_EVIDENCE: Final = 1000


@dataclass(frozen=True, slots=True)
class DhtSettings:
    """How a `p2p.dht.node.DhtNode` runs (defaults above)."""

    reprovide_interval_s: float = DEFAULT_REPROVIDE_INTERVAL_S
    quorum: int = DEFAULT_QUORUM
    lookup_timeout_s: float = DEFAULT_LOOKUP_TIMEOUT_S
    query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S
    max_evidence: int = DEFAULT_MAX_EVIDENCE

    def __post_init__(self) -> None:
        if self.reprovide_interval_s <= 0 or self.lookup_timeout_s <= 0:
            raise ValueError("DHT intervals and timeouts must be positive")
        if self.query_timeout_s <= 0 or self.quorum < 1 or self.max_evidence < 1:
            raise ValueError("DHT query timeout, quorum and evidence bound must be positive")
