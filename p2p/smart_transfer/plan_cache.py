"""The smart pull server's cache of answers: a plan and its metadata message per interval.

Answering a pull reads, hashes and decodes every block of the interval (the transfer
plan counts its objects and records) and packs them into a gzip tar; for a long chain
that is most of the server's work, and every client pulling the same head asks for the
same answer. Blocks are named by their hash, so the blocks from a head back to
``begin_after`` never change: an answer is kept under (the dataset's directory, head,
``begin_after``, ``force_update_if_diverged``) and stays right for as long as that head
is served. When a dataset's head moves, its answers for older heads are dropped (new
clients ask for the new head; `PlanCache.forget_other_heads`).

The cache is bounded by entries (`MAX_PLAN_CACHE_ENTRIES`) and by the bytes of the
messages it holds (`MAX_PLAN_CACHE_BYTES`); the least recently used answer goes first,
and an answer larger than the whole budget is not kept. One cache serves the process
(`PLAN_CACHE`); it is touched only from the event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from fbs.multiformats import Multihash
from p2p.smart_transfer.messages import TransferPlan

__all__ = [
    "MAX_PLAN_CACHE_BYTES",
    "MAX_PLAN_CACHE_ENTRIES",
    "PLAN_CACHE",
    "CachedPull",
    "PlanCache",
    "PullKey",
]

#: Most bytes of metadata messages the cache holds (a 2,000-block answer is ~0.5 MB).
MAX_PLAN_CACHE_BYTES: Final = 64 << 20
#: Most answers the cache holds.
MAX_PLAN_CACHE_ENTRIES: Final = 256


@dataclass(frozen=True, slots=True)
class PullKey:
    """What determines a pull's answer: the dataset (its directory) and the interval."""

    dataset: str
    head: Multihash
    begin_after: Multihash | None
    force: bool


@dataclass(frozen=True, slots=True)
class CachedPull:
    """A pull's answer: its transfer plan and, once built, its metadata message text.

    Attributes:
        plan: the ``transfer_plan`` sent first.
        message: the ``DatasetMetadataPullResponse`` JSON text (``None``: not built yet,
            the first client needed only the plan).
    """

    plan: TransferPlan
    message: str | None = None

    @property
    def size(self) -> int:
        """Bytes the entry counts against `MAX_PLAN_CACHE_BYTES`."""
        return len(self.message) if self.message is not None else 0


class PlanCache:
    """A bounded LRU map from `PullKey` to `CachedPull` (see the module docstring)."""

    def __init__(
        self, max_bytes: int = MAX_PLAN_CACHE_BYTES, max_entries: int = MAX_PLAN_CACHE_ENTRIES
    ) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[PullKey, CachedPull] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes of the messages held."""
        return self._bytes

    def get(self, key: PullKey) -> CachedPull | None:
        """The answer kept for ``key`` (now the most recently used), if any."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: PullKey, entry: CachedPull) -> None:
        """Keep ``entry`` for ``key`` (replacing what was there), evicting the least
        recently used answers beyond the bounds; an entry over the byte budget is not
        kept."""
        self._drop(key)
        if entry.size > self.max_bytes:
            return
        self._entries[key] = entry
        self._bytes += entry.size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def forget_other_heads(self, dataset: str, head: Multihash) -> None:
        """Drop the answers for ``dataset`` (its directory) at any head but ``head``."""
        stale = [k for k in self._entries if k.dataset == dataset and k.head != head]
        for k in stale:
            self._drop(k)

    def clear(self) -> None:
        """Drop everything."""
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: PullKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size


#: The process's cache of pull answers.
PLAN_CACHE: Final = PlanCache()
