"""Fair admission of exchange requests per peer. Pure: no I/O.

The object exchange server (`p2p.libp2p.exchange.server`) asks an `Admission` before it does
any work for a peer, and tells it when the work ends. The rules, each with a named
limit in `AdmissionLimits`:

* **streams per peer**: at most ``max_streams_per_peer`` exchange streams of one peer
  are open at once, counting those that have not sent their request yet; more are reset
  unread. A stream must send its request within ``request_timeout_s`` (the server
  enforces the deadline; a peer cannot park idle streams).
* **requests**: at most ``max_requests`` are served at once, and one peer holds at most
  ``max_requests_per_peer`` of them. The last ``reserved_requests`` slots go only to
  peers with nothing in flight, so a peer that fills its share cannot lock out the
  next one. Over a limit the answer is `Busy` with a retry hint.
* **object reads**: at most ``max_object_reads`` object bodies are read and sent at
  once, ``max_object_reads_per_peer`` per peer (object bodies are what costs memory
  and disk bandwidth).
* **upload budget**: per peer, a token bucket of objects (``objects_per_s``, burst
  ``objects_burst``; over it: `Busy`) and one of bytes (``upload_bytes_per_s``, burst
  ``upload_burst_bytes``; over it the server *slows down* rather than refuses:
  `Admission.upload_delay`), so ~150-byte requests cannot pull gigabytes out of a node
  faster than the budget.

`Admission` is used from one thread (the host's trio thread): no locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "DEFAULT_ADMISSION_LIMITS",
    "Admission",
    "AdmissionLimits",
    "AdmissionStats",
    "Busy",
    "Ticket",
    "TokenBucket",
]

Op = Literal["head", "blocks", "object"]


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """Named limits of `Admission` (see the module docstring); defaults suit a public node.

    Attributes:
        max_streams_per_peer: exchange streams one peer may have open at once.
        request_timeout_s: how long a new stream may stay silent before its request.
        max_requests: requests served at once (all peers).
        max_requests_per_peer: requests of one peer served at once.
        reserved_requests: of ``max_requests``, slots kept for peers with none in flight.
        max_object_reads: object bodies served at once (all peers).
        max_object_reads_per_peer: object bodies served to one peer at once.
        objects_per_s / objects_burst: objects one peer may request (rate, burst).
        upload_bytes_per_s / upload_burst_bytes: bytes one peer is sent (rate, burst).
        busy_retry_after_s: the retry hint sent with ``busy``.
    """

    max_streams_per_peer: int = 32
    request_timeout_s: float = 5.0
    max_requests: int = 64
    max_requests_per_peer: int = 8
    reserved_requests: int = 8
    max_object_reads: int = 16
    max_object_reads_per_peer: int = 4
    objects_per_s: float = 100.0
    objects_burst: int = 400
    upload_bytes_per_s: float = 128 * 2**20
    upload_burst_bytes: int = 512 * 2**20
    busy_retry_after_s: float = 1.0

    def __post_init__(self) -> None:
        counts = (
            self.max_streams_per_peer,
            self.max_requests,
            self.max_requests_per_peer,
            self.max_object_reads,
            self.max_object_reads_per_peer,
            self.objects_burst,
            self.upload_burst_bytes,
        )
        if min(counts) < 1 or not 0 <= self.reserved_requests < self.max_requests:
            raise ValueError("admission limits must be >= 1 (reserved: 0 <= r < max_requests)")
        rates = (self.request_timeout_s, self.objects_per_s, self.upload_bytes_per_s)
        if min(rates) <= 0 or self.busy_retry_after_s < 0:
            raise ValueError("admission rates and timeouts must be > 0")


DEFAULT_ADMISSION_LIMITS: Final = AdmissionLimits()


@dataclass(frozen=True, slots=True)
class Ticket:
    """Admission of one request; hand it back to `Admission.release`."""

    peer: str
    op: Op


@dataclass(frozen=True, slots=True)
class Busy:
    """A refusal: why, and when the peer may try again (seconds)."""

    reason: str
    retry_after_s: float


@dataclass(slots=True)
class AdmissionStats:
    """Counters since the `Admission` was created (for ``/api/status``)."""

    streams_refused: int = 0
    idle_closed: int = 0
    busy: int = 0
    aborted_downloads: int = 0
    throttled_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        """JSON-ready (camelCase)."""
        return {
            "streamsRefused": self.streams_refused,
            "idleClosed": self.idle_closed,
            "busy": self.busy,
            "abortedDownloads": self.aborted_downloads,
            "throttledSeconds": round(self.throttled_s, 3),
        }


@dataclass(slots=True)
class TokenBucket:
    """A token bucket's state: ``tokens`` left as of monotonic time ``at``.

    The rate and size live with the caller (they are limits, not state), so one
    dataclass serves every bucket here and in `p2p.libp2p.pubsub_guard`.
    """

    tokens: float
    at: float

    def refill(self, now: float, rate: float, cap: float) -> None:
        """Add what ``rate`` earned since `at`, up to ``cap``."""
        self.tokens = min(cap, self.tokens + (now - self.at) * rate)
        self.at = now

    def take(self, now: float, rate: float, cap: float, n: float = 1.0) -> bool:
        """Refill, then take ``n`` tokens if there are that many."""
        self.refill(now, rate, cap)
        if self.tokens < n:
            return False
        self.tokens -= n
        return True


@dataclass(slots=True)
class _Peer:
    streams: int = 0
    requests: int = 0
    object_reads: int = 0
    objects: TokenBucket | None = None
    upload: TokenBucket | None = None


class Admission:
    """Per-peer and global admission state (see the module docstring).

    Args:
        limits: the limits.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        limits: AdmissionLimits = DEFAULT_ADMISSION_LIMITS,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.stats = AdmissionStats()
        self._clock = clock
        self._peers: dict[str, _Peer] = {}
        self._requests = 0
        self._object_reads = 0

    # -- streams -------------------------------------------------------------------------

    def open_stream(self, peer: str) -> bool:
        """A new stream of ``peer``; ``False``: over its stream limit (reset it unread)."""
        p = self._peer(peer)
        if p.streams >= self.limits.max_streams_per_peer:
            self.stats.streams_refused += 1
            return False
        p.streams += 1
        return True

    def close_stream(self, peer: str) -> None:
        """A stream accepted by `open_stream` ended."""
        p = self._peers.get(peer)
        if p is not None:
            p.streams = max(0, p.streams - 1)
            self._forget_if_idle(peer, p)

    # -- requests ------------------------------------------------------------------------

    def admit(self, peer: str, op: Op) -> Ticket | Busy:
        """Admit a request of ``peer`` (after its request frame was read)."""
        p = self._peer(peer)
        refusal = self._request_refusal(p)
        if refusal is None and op == "object":
            refusal = self._object_refusal(p)
        if refusal is not None:
            self.stats.busy += 1
            return Busy(refusal, self._retry_hint(p, refusal))
        self._requests += 1
        p.requests += 1
        if op == "object":
            self._object_reads += 1
            p.object_reads += 1
        return Ticket(peer, op)

    def _request_refusal(self, p: _Peer) -> str | None:
        lim = self.limits
        if p.requests >= lim.max_requests_per_peer:
            return "too many requests from this peer in flight"
        if self._requests >= lim.max_requests:
            return "server at capacity"
        if p.requests > 0 and self._requests >= lim.max_requests - lim.reserved_requests:
            return "remaining capacity is reserved for other peers"
        return None

    def _object_refusal(self, p: _Peer) -> str | None:
        lim = self.limits
        if p.object_reads >= lim.max_object_reads_per_peer:
            return "too many object downloads from this peer in flight"
        if self._object_reads >= lim.max_object_reads:
            return "object downloads at capacity"
        now = self._clock()
        bucket = p.objects or TokenBucket(float(lim.objects_burst), now)
        p.objects = bucket
        if not bucket.take(now, lim.objects_per_s, float(lim.objects_burst)):
            return "object request rate over the per-peer budget"
        return None

    def _retry_hint(self, p: _Peer, reason: str) -> float:
        if reason.startswith("object request rate") and p.objects is not None:
            return max(self.limits.busy_retry_after_s, 1.0 / self.limits.objects_per_s)
        return self.limits.busy_retry_after_s

    def release(self, ticket: Ticket) -> None:
        """The request of ``ticket`` ended (served, failed or aborted)."""
        self._requests = max(0, self._requests - 1)
        p = self._peers.get(ticket.peer)
        if ticket.op == "object":
            self._object_reads = max(0, self._object_reads - 1)
        if p is not None:
            p.requests = max(0, p.requests - 1)
            if ticket.op == "object":
                p.object_reads = max(0, p.object_reads - 1)
            self._forget_if_idle(ticket.peer, p)

    # -- upload budget -------------------------------------------------------------------

    def upload_delay(self, peer: str, nbytes: int) -> float:
        """Charge ``nbytes`` sent to ``peer``; seconds to wait first (0: send now).

        The bucket may go negative: a chunk larger than what is left is sent after the
        wait that pays for it, so a peer gets exactly its rate over time.
        """
        lim, p, now = self.limits, self._peer(peer), self._clock()
        bucket = p.upload or TokenBucket(float(lim.upload_burst_bytes), now)
        bucket.refill(now, lim.upload_bytes_per_s, float(lim.upload_burst_bytes))
        p.upload = bucket
        bucket.tokens -= nbytes
        if bucket.tokens >= 0:
            return 0.0
        delay = -bucket.tokens / lim.upload_bytes_per_s
        self.stats.throttled_s += delay
        return delay

    # -- state ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests being served now."""
        return self._requests

    def peer_load(self, peer: str) -> tuple[int, int, int]:
        """``(streams, requests, object reads)`` of ``peer`` now."""
        p = self._peers.get(peer)
        return (p.streams, p.requests, p.object_reads) if p else (0, 0, 0)

    def _peer(self, peer: str) -> _Peer:
        p = self._peers.get(peer)
        if p is None:
            p = self._peers[peer] = _Peer()
        return p

    def _forget_if_idle(self, peer: str, p: _Peer) -> None:
        # Buckets of an idle peer are kept while they still limit it (not yet refilled),
        # so disconnecting and coming back does not reset a budget.
        if p.streams or p.requests or p.object_reads:
            return
        now = self._clock()
        lim = self.limits
        full = all(
            b is None or b.tokens + (now - b.at) * rate >= cap
            for b, rate, cap in (
                (p.objects, lim.objects_per_s, lim.objects_burst),
                (p.upload, lim.upload_bytes_per_s, lim.upload_burst_bytes),
            )
        )
        if full:
            del self._peers[peer]
