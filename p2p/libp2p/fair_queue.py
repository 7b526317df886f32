"""Per-peer queues in front of the exchange's shared capacity, served in turn (trio side).

`p2p.libp2p.admission.Admission` answers ``busy`` at once when a *shared* limit is full
(requests or object downloads of all peers). Each refused client then retries after
the hint (with jitter), and whoever asks right after a slot frees wins it: peers that
ask most often (many streams, many identities) take nearly every slot that frees, and a
peer asking once a second can wait a long time.

`FairAdmission` puts such a request in its peer's queue instead, for up to
``wait_s``. Each slot that frees wakes one waiting request, taking peers in turn (round
robin over peers, first in first out within a peer), so a peer with one request waits
for at most one slot per other waiting peer, however many requests the others have
queued. A peer may queue at most ``max_waiting_per_peer`` requests; beyond that, and
after ``wait_s``, the answer is `Busy` as before. Refusals by a *per-peer* limit
(`Admission`'s own share rules, the object rate budget) are never queued: the peer is
over its own share and waiting would only let it hold a place in the queue.

Used from the host's trio thread only, like `Admission`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

import trio

from p2p.libp2p.admission import Admission, Busy, Op, Ticket

__all__ = ["CAPACITY_REASONS", "FairAdmission", "FairQueueStats"]

#: `Admission` refusals caused by the shared capacity (not by the peer's own share).
CAPACITY_REASONS: Final = frozenset(
    {
        "server at capacity",
        "object downloads at capacity",
        "remaining capacity is reserved for other peers",
    }
)
#: How long a request may wait for shared capacity before it is answered ``busy``.
DEFAULT_WAIT_S: Final = 5.0
#: Requests of one peer that may wait at once.
DEFAULT_MAX_WAITING_PER_PEER: Final = 4


@dataclass(slots=True)
class FairQueueStats:
    """Counters since creation, and requests waiting now."""

    queued: int = 0
    served_after_wait: int = 0
    gave_up: int = 0
    waiting: int = 0

    def to_dict(self) -> dict[str, int]:
        """JSON-ready (camelCase)."""
        return {
            "queued": self.queued,
            "servedAfterWait": self.served_after_wait,
            "gaveUp": self.gave_up,
            "waiting": self.waiting,
        }


class FairAdmission:
    """`Admission` with per-peer queues for the shared capacity (see the module docstring).

    Args:
        admission: the admission rules and state.
        wait_s: the longest wait for shared capacity.
        max_waiting_per_peer: requests of one peer that may wait at once.
    """

    def __init__(
        self,
        admission: Admission,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        max_waiting_per_peer: int = DEFAULT_MAX_WAITING_PER_PEER,
    ) -> None:
        self.admission = admission
        self.wait_s = wait_s
        self.max_waiting_per_peer = max_waiting_per_peer
        self.stats = FairQueueStats()
        self._queues: dict[str, deque[trio.Event]] = {}
        self._turns: deque[str] = deque()  # peers with waiting requests, next first
        self._handoffs = 0  # requests woken for a freed slot that have not taken it yet

    async def admit(self, peer: str, op: Op) -> Ticket | Busy:
        """A ticket for ``peer``'s request, waiting in turn for shared capacity if full."""
        deadline = trio.current_time() + self.wait_s
        result = self._admit_now(peer, op, woken=False)
        if not _capacity(result):
            return result
        queue = self._queues.get(peer)
        if queue is not None and len(queue) >= self.max_waiting_per_peer:
            return result
        self.stats.queued += 1
        while _capacity(result):
            if not await self._wait_turn(peer, deadline):
                self.stats.gave_up += 1
                return result
            # No checkpoint between the wake-up and this: the freed slot is still free.
            result = self._admit_now(peer, op, woken=True)
        if isinstance(result, Ticket):
            self.stats.served_after_wait += 1
        return result

    def _admit_now(self, peer: str, op: Op, *, woken: bool) -> Ticket | Busy:
        # While requests wait (or were just woken), a new request queues behind them
        # rather than taking the slot that was freed for them.
        if not woken and (self._turns or self._handoffs):
            return Busy("server at capacity", self.admission.limits.busy_retry_after_s)
        return self.admission.admit(peer, op)

    def release(self, ticket: Ticket) -> None:
        """The request of ``ticket`` ended: free its slot and wake the next peer's request."""
        self.admission.release(ticket)
        self._wake_next()

    async def _wait_turn(self, peer: str, deadline: float) -> bool:
        """Queue one wake-up for ``peer``; ``False`` if ``deadline`` passed first."""
        woken = trio.Event()
        queue = self._queues.setdefault(peer, deque())
        queue.append(woken)
        if peer not in self._turns:
            self._turns.append(peer)
        self.stats.waiting += 1
        try:
            with trio.move_on_at(deadline):
                await woken.wait()
        except BaseException:  # cancelled (the stream ended): pass a freed slot on
            self._forget(peer, woken)
            raise
        finally:
            self.stats.waiting -= 1
        if woken.is_set():
            self._handoffs -= 1
            return True
        self._drop(peer, woken)
        return False

    def _forget(self, peer: str, woken: trio.Event) -> None:
        if woken.is_set():
            self._handoffs -= 1
            self._wake_next()
        else:
            self._drop(peer, woken)

    def _wake_next(self) -> None:
        """Wake the oldest request of the peer whose turn it is; that peer goes last."""
        while self._turns:
            peer = self._turns.popleft()
            queue = self._queues.get(peer)
            if not queue:
                self._queues.pop(peer, None)
                continue
            queue.popleft().set()
            self._handoffs += 1
            if queue:
                self._turns.append(peer)
            else:
                del self._queues[peer]
            return

    def _drop(self, peer: str, woken: trio.Event) -> None:
        queue = self._queues.get(peer)
        if queue is None:
            return
        if woken in queue:
            queue.remove(woken)
        if not queue:
            del self._queues[peer]
            if peer in self._turns:
                self._turns.remove(peer)


def _capacity(result: Ticket | Busy) -> bool:
    return isinstance(result, Busy) and result.reason in CAPACITY_REASONS
