"""Keeping the daemon's bootstrap peers connected (run beside `node.daemon.watch.WatchRound`).

`BootstrapPeers` dials every bootstrap peer once at start, then checks the connections
every `BOOTSTRAP_CHECK_INTERVAL_S` and redials a peer that is not connected with
exponential, capped, jittered back-off (`redial_delay`), so a peer that restarts is
connected again a few seconds after it is back. It logs one line when a bootstrap peer
is unreachable at start or lost, each failed redial at debug level, and one line when
the peer is back (whether our dial or theirs brought it back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fbs.errors import OdfError
from node.daemon.log import event
from node.worker_threads import WorkerThreads
from p2p.errors import P2PError
from p2p.libp2p.host import P2PHost

__all__ = [
    "BOOTSTRAP_CHECK_INTERVAL_S",
    "BOOTSTRAP_REDIAL_FIRST_S",
    "BOOTSTRAP_REDIAL_MAX_S",
    "BootstrapPeers",
    "redial_delay",
]

#: How often the connections to bootstrap peers are checked (seconds).
BOOTSTRAP_CHECK_INTERVAL_S: Final = 0.5
#: Back-off of bootstrap redials: the first delay, doubled after each failure up to the
#: cap (seconds), each drawn between half and all of it so nodes do not dial in step.
BOOTSTRAP_REDIAL_FIRST_S: Final = 0.5
BOOTSTRAP_REDIAL_MAX_S: Final = 8.0


def redial_delay(failures: int, rng: random.Random) -> float:
    """The delay before the next dial after ``failures`` failed ones (1, 2, ...)."""
    base = min(BOOTSTRAP_REDIAL_FIRST_S * 2.0 ** max(0, failures - 1), BOOTSTRAP_REDIAL_MAX_S)
    return base * (0.5 + rng.random() / 2)


@dataclass(slots=True)
class _Link:
    """What `BootstrapPeers` knows of one bootstrap peer."""

    addr: str
    peer: str
    connected: bool = False
    #: Whether it was ever connected (its return is a reconnection).
    was_connected: bool = False
    #: Failed dials since it was last connected.
    failures: int = 0
    #: When it was lost or first dialled (monotonic), and when to dial next.
    down_since: float = 0.0
    next_dial: float = 0.0
    dialing: bool = False


class BootstrapPeers:
    """Keeps the bootstrap peers connected (see the module docstring).

    Args:
        addrs: ``.../p2p/<peer id>`` addresses (others are ignored with a warning).
        host / threads: the daemon's.
        rng: jitter of the back-off.
    """

    def __init__(
        self,
        addrs: Sequence[str],
        host: P2PHost,
        threads: WorkerThreads,
        rng: random.Random | None = None,
    ) -> None:
        self._host = host
        self._threads = threads
        self._rng = rng or random.Random()
        self._links: list[_Link] = []
        for addr in dict.fromkeys(addrs):
            if "/p2p/" not in addr:
                event(
                    logging.WARNING, "ignoring bootstrap address without /p2p/<peer id>", addr=addr
                )
                continue
            self._links.append(_Link(addr, addr.rsplit("/p2p/", 1)[1]))
        self._dials: set[asyncio.Task[None]] = set()

    async def dial_all(self) -> None:
        """Dial every bootstrap peer once, in parallel (at start; failures are retried)."""
        me = self._host.peer_id
        self._links = [link for link in self._links if link.peer != me]
        connected = set(await self._threads.run(self._host.peers))
        now = time.monotonic()
        for link in self._links:
            link.down_since = now
        await asyncio.gather(
            *(self._dial(link) for link in self._links if link.peer not in connected)
        )

    async def keep(self) -> None:
        """Check and redial until cancelled (dials in flight are cancelled with it)."""
        try:
            while True:
                await asyncio.sleep(BOOTSTRAP_CHECK_INTERVAL_S)
                # A host restarting (`P2PHost` supervision) has no peers to list yet.
                with contextlib.suppress(OdfError, OSError):
                    self._check(set(await self._threads.run(self._host.peers)))
        finally:
            for task in self._dials:
                task.cancel()

    def _check(self, connected: set[str]) -> None:
        """Log peers lost and back; start the dials that are due."""
        now = time.monotonic()
        for link in self._links:
            if link.peer in connected:
                self._up(link, now)
            elif link.connected:
                link.connected, link.failures, link.down_since = False, 0, now
                link.next_dial = now + redial_delay(1, self._rng)
                event(logging.WARNING, "lost bootstrap peer, reconnecting", peer=link.peer)
            elif not link.dialing and now >= link.next_dial:
                task = asyncio.create_task(self._dial(link), name=f"bootstrap-{link.peer}")
                self._dials.add(task)
                task.add_done_callback(self._dials.discard)

    def _up(self, link: _Link, now: float) -> None:
        """``link`` is connected: log it if it was not (a dial of ours or theirs)."""
        if link.connected:
            return
        if link.was_connected:
            event(
                logging.INFO,
                "reconnected to bootstrap peer",
                peer=link.peer,
                down_s=round(now - link.down_since, 1),
                failed_dials=link.failures,
            )
        else:
            event(
                logging.INFO,
                "connected to bootstrap peer",
                addr=link.addr,
                failed_dials=link.failures,
            )
        link.connected = link.was_connected = True
        link.failures = 0

    async def _dial(self, link: _Link) -> None:
        """Dial ``link`` once; a failure schedules the next dial (and is logged)."""
        link.dialing = True
        try:
            await self._host.connect(link.addr)
        except P2PError as e:
            link.failures += 1
            delay = redial_delay(link.failures, self._rng)
            link.next_dial = time.monotonic() + delay
            self._failed(link, str(e), delay)
        else:
            self._up(link, time.monotonic())
        finally:
            link.dialing = False

    def _failed(self, link: _Link, error: str, delay: float) -> None:
        reason = error.removeprefix(f"cannot connect to {link.addr}: ")
        if link.failures == 1 and not link.was_connected:
            event(
                logging.WARNING,
                "bootstrap peer unreachable, retrying in the background",
                addr=link.addr,
                error=reason,
            )
        else:
            event(
                logging.DEBUG,
                "bootstrap dial failed",
                peer=link.peer,
                attempt=link.failures,
                retry_in_s=round(delay, 2),
                error=reason,
            )
