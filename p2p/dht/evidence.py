"""`EvidenceLog`: equivocation pairs the DHT saw, bounded and de-duplicated.

The DHT sees pairs while validating stores and reads, in the trio thread, where it
must not write files; the node that owns the DHT copies them into its
`p2p.head_store.HeadStore` evidence (which checks both signatures again).
"""

from __future__ import annotations

import threading

from p2p.head_record import HeadRecord

__all__ = ["EvidenceLog"]


class EvidenceLog:
    """Pairs of valid records with one sequence number and two heads (thread-safe).

    Args:
        limit: pairs kept; later ones are counted in `dropped`, not kept.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._pairs: dict[tuple[HeadRecord, HeadRecord], None] = {}
        self._lock = threading.Lock()
        #: Pairs not kept because the log was full.
        self.dropped = 0

    def add(self, a: HeadRecord, b: HeadRecord) -> None:
        """Keep the pair (ordered by head, so each pair is kept once)."""
        if a.dataset_id != b.dataset_id or a.sequence_number != b.sequence_number:
            return
        if a.head == b.head:
            return
        pair = (a, b) if a.head < b.head else (b, a)
        with self._lock:
            if pair in self._pairs:
                return
            if len(self._pairs) >= self._limit:
                self.dropped += 1
                return
            self._pairs[pair] = None

    def pairs(self) -> list[tuple[HeadRecord, HeadRecord]]:
        """The pairs kept, oldest first."""
        with self._lock:
            return list(self._pairs)
