"""Peer scoring for the object exchange: penalties, bans ("drops") and their expiry.

A peer starts at `ScoringPolicy.initial` points. Each successful transfer earns
`reward` points (capped at `max_score`, so a long good history cannot buy unlimited
tolerance); each offence costs the penalty of its `Offence`. When the score falls to
`drop_threshold` or below the peer is *banned*: `is_banned` is true for
`ban_duration_s`, `usable` leaves it out, and every ban listener is called once (the
host disconnects the peer). When the ban expires the peer comes back with
`ScoringPolicy.after_ban` points, so one more offence bans it again.

Penalties are sized so that serving wrong bytes (provably malicious: the hash does not
match) bans at once, while stalls and unavailability (possibly an honest, slow or
overloaded peer) take a few repetitions.

`PeerScores` is thread-safe: the trio thread of the libp2p host and the asyncio
thread of the daemon both use it.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_BAN_DURATION_S",
    "DEFAULT_DROP_THRESHOLD",
    "DEFAULT_GOSSIP_BURST_PER_PEER",
    "DEFAULT_GOSSIP_RATE_PER_PEER",
    "MAX_TRACKED_PEERS",
    "Offence",
    "PeerScores",
    "PeerStanding",
    "ScoringPolicy",
]

log = logging.getLogger(__name__)

#: A score at or below this bans the peer.
DEFAULT_DROP_THRESHOLD: Final = -100.0
#: How long a banned peer is not asked again (seconds).
DEFAULT_BAN_DURATION_S: Final = 600.0
#: Gossip messages per second one forwarder may send us (sustained; checked before any
#: signature, see `p2p.libp2p.pubsub_guard`). Heads and attestations move rarely; a relay of a
#: busy network's announcements stays below this. Kept above py-libp2p's own per-topic
#: forwarding limit (10/s, checked *after* validation, so it saves no validation cost).
DEFAULT_GOSSIP_RATE_PER_PEER: Final = 20.0
#: Messages one forwarder may send in a burst above the sustained rate.
DEFAULT_GOSSIP_BURST_PER_PEER: Final = 50
#: Peers remembered at most; the best-behaved unbanned ones are forgotten first when full
#: (forgetting a banned peer would lift its ban).
MAX_TRACKED_PEERS: Final = 10_000


@enum.unique
class Offence(enum.Enum):
    """What a peer did wrong; the value is the default penalty in points.

    Values must differ: two members with one value would make the second an *alias* of
    the first (``Offence.PROTOCOL_ERROR.name`` would read ``LIMIT_EXCEEDED`` in status
    output), which ``enum.unique`` refuses at import.
    """

    BAD_BYTES = 100.0
    """Served bytes that do not hash to what was asked (or a block that breaks the chain)."""
    PROTOCOL_ERROR = 60.0
    """Sent a malformed or unexpected frame."""
    LIMIT_EXCEEDED = 50.0
    """Sent an oversized frame, more bytes than declared, or too many items."""
    TIMEOUT = 35.0
    """Stalled beyond a timeout."""
    INVALID_MESSAGE = 25.0
    """Forwarded a gossip message that fails its signature or content check (an honest
    node validates before forwarding, so only a faulty or hostile one does this)."""
    UNAVAILABLE = 10.0
    """Could not be reached, or reset the stream."""
    RATE_EXCEEDED = 1.0
    """Sent gossip faster than the per-peer rate (per message over the limit: a sustained
    flood bans within a second, a short burst of an honest relay costs a few points)."""


@dataclass(frozen=True, slots=True)
class ScoringPolicy:
    """Tunable constants of `PeerScores` (defaults suit a small public network).

    Attributes:
        initial: score of a peer not seen before.
        reward: points per successful transfer.
        max_score: rewards never lift a score above this.
        drop_threshold: at or below this score the peer is banned.
        ban_duration_s: how long a ban lasts.
        after_ban: score given back when a ban expires.
        penalties: overrides of the default penalty per offence.
    """

    initial: float = 0.0
    reward: float = 1.0
    max_score: float = 20.0
    drop_threshold: float = DEFAULT_DROP_THRESHOLD
    ban_duration_s: float = DEFAULT_BAN_DURATION_S
    after_ban: float = DEFAULT_DROP_THRESHOLD / 2
    penalties: dict[Offence, float] = field(default_factory=dict)

    def penalty(self, offence: Offence) -> float:
        """Points ``offence`` costs under this policy."""
        return self.penalties.get(offence, offence.value)


@dataclass(frozen=True, slots=True)
class PeerStanding:
    """A snapshot of one peer's record.

    Attributes:
        peer: the peer id (base58 text).
        score: current score.
        banned_until: monotonic time when the ban ends (``None``: not banned).
        offences: number of offences recorded so far.
        last_reason: the text of the last offence, for status output.
    """

    peer: str
    score: float
    banned_until: float | None
    offences: int
    last_reason: str | None


@dataclass(slots=True)
class _Record:
    score: float
    banned_until: float | None = None
    offences: int = 0
    last_reason: str | None = None


BanListener = Callable[[str, str], None]
"""Called as ``listener(peer, reason)`` when a peer gets banned (from any thread)."""


class PeerScores:
    """Scores, bans and ban expiry for a set of peers (see the module docstring).

    Args:
        policy: the scoring constants.
        clock: monotonic time source in seconds (tests pass a fake one).
    """

    def __init__(
        self,
        policy: ScoringPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or ScoringPolicy()
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._listeners: list[BanListener] = []

    def add_ban_listener(self, listener: BanListener) -> None:
        """Call ``listener(peer, reason)`` whenever a peer becomes banned."""
        with self._lock:
            self._listeners.append(listener)

    def _record(self, peer: str) -> _Record:
        """The (expiry-refreshed) record of ``peer``; caller holds the lock."""
        rec = self._records.get(peer)
        if rec is None:
            if len(self._records) >= MAX_TRACKED_PEERS:
                self._evict_one()
            rec = self._records[peer] = _Record(self.policy.initial)
        elif rec.banned_until is not None and self._clock() >= rec.banned_until:
            rec.banned_until = None
            rec.score = self.policy.after_ban
        return rec

    def _evict_one(self) -> None:
        candidates = [(r.score, p) for p, r in self._records.items() if r.banned_until is None]
        if candidates:
            del self._records[max(candidates)[1]]

    def penalise(
        self, peer: str, offence: Offence, reason: str = "", *, quiet: bool = False
    ) -> PeerStanding:
        """Record ``offence`` by ``peer``; bans it when the score reaches the threshold.

        ``quiet`` logs the penalty at debug level (for offences a flood repeats per
        message); a ban is always logged by the ban listeners.

        Returns:
            The peer's standing after the penalty.
        """
        now = self._clock()
        with self._lock:
            rec = self._record(peer)
            rec.score -= self.policy.penalty(offence)
            rec.offences += 1
            rec.last_reason = f"{offence.name}: {reason}" if reason else offence.name
            newly_banned = rec.banned_until is None and rec.score <= self.policy.drop_threshold
            if newly_banned:
                rec.banned_until = now + self.policy.ban_duration_s
            standing = self._standing(peer, rec)
            listeners = list(self._listeners) if newly_banned else []
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "peer %s penalised (%s): score %.1f",
            peer,
            standing.last_reason,
            standing.score,
        )
        for listener in listeners:
            try:
                listener(peer, standing.last_reason or offence.name)
            except Exception:  # a listener bug must not break the transfer path
                log.exception("ban listener failed for peer %s", peer)
        return standing

    def reward(self, peer: str) -> None:
        """Record a successful transfer from ``peer`` (no effect while it is banned)."""
        with self._lock:
            rec = self._record(peer)
            if rec.banned_until is None:
                rec.score = min(self.policy.max_score, rec.score + self.policy.reward)

    def is_banned(self, peer: str) -> bool:
        """Whether ``peer`` is banned right now."""
        with self._lock:
            if peer not in self._records:
                return False
            return self._record(peer).banned_until is not None

    def score(self, peer: str) -> float:
        """The current score of ``peer`` (`ScoringPolicy.initial` if never seen)."""
        with self._lock:
            return self._record(peer).score if peer in self._records else self.policy.initial

    def usable(self, peers: Iterable[str]) -> list[str]:
        """``peers`` without the banned ones, best score first (stable for ties)."""
        with self._lock:
            scored = []
            for i, p in enumerate(peers):
                rec = self._record(p) if p in self._records else None
                if rec is not None and rec.banned_until is not None:
                    continue
                scored.append((-(rec.score if rec else self.policy.initial), i, p))
        return [p for _, _, p in sorted(scored)]

    def standing(self, peer: str) -> PeerStanding:
        """A snapshot of ``peer``'s record."""
        with self._lock:
            if peer not in self._records:
                return PeerStanding(peer, self.policy.initial, None, 0, None)
            return self._standing(peer, self._record(peer))

    def bans(self) -> list[tuple[str, str, float]]:
        """Peers banned right now: ``(peer, reason, seconds left)``, longest ban first."""
        now = self._clock()
        with self._lock:
            rows = [
                (p, r.last_reason or "", r.banned_until - now)
                for p, r in self._records.items()
                if r.banned_until is not None and r.banned_until > now
            ]
        return sorted(rows, key=lambda row: -row[2])

    def snapshot(self) -> list[PeerStanding]:
        """Standings of every tracked peer (for ``odf node peers``)."""
        with self._lock:
            return [self._standing(p, self._record(p)) for p in list(self._records)]

    @staticmethod
    def _standing(peer: str, rec: _Record) -> PeerStanding:
        return PeerStanding(peer, rec.score, rec.banned_until, rec.offences, rec.last_reason)
