"""The daemon's watcher round (`node.daemon.service`): peers, heads to announce, peers to probe.

`WatchRound.run` repeats one round every ``head_poll_interval_s``, or sooner when woken
(the ``wake`` event: a new follow). A round refreshes the peer view (connected peers,
the mesh of the heads topic), has the head watcher (`node.daemon.heads.HeadWatcher`)
scan and announce: every held head on the first round, when peers joined the topic
(after `JOIN_ANNOUNCE_DELAY_S`) and every ``reannounce_interval_s``, so late joiners
learn them. It hands replicas that moved to
``on_new_head``, runs the attestation round (`node.daemon.attest.AttestationService.round`)
and has the pull scheduler probe peers: all of them on the first round and when woken,
the ones that just joined otherwise. A round that fails is logged and the next one runs.

`BootstrapPeers` keeps the bootstrap peers connected, beside the rounds: it checks the
connections every `BOOTSTRAP_CHECK_INTERVAL_S` and redials a peer that is not connected
with exponential, capped, jittered back-off (`redial_delay`), so a peer that restarts is
connected again a few seconds after it is back. It logs one line when a bootstrap peer is
unreachable at start or lost, each retry at debug level, and one when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from fbs.did import DatasetId
from fbs.errors import OdfError
from node.daemon.attest import AttestationService
from node.daemon.config import NodeConfig
from node.daemon.heads import HeadWatcher
from node.daemon.log import event
from node.daemon.pulls import PeerView, PullScheduler
from node.worker_threads import WorkerThreads
from p2p.errors import P2PError
from p2p.libp2p.gossip import HEADS_TOPIC
from p2p.libp2p.host import P2PHost

__all__ = [
    "BOOTSTRAP_CHECK_INTERVAL_S",
    "BOOTSTRAP_REDIAL_FIRST_S",
    "BOOTSTRAP_REDIAL_MAX_S",
    "JOIN_ANNOUNCE_DELAY_S",
    "BootstrapPeers",
    "WatchRound",
    "redial_delay",
]

#: Delay before announcing to peers that just joined the topic (their subscription
#: must reach our gossipsub router first).
JOIN_ANNOUNCE_DELAY_S: Final = 0.5
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


class WatchRound:
    """The daemon's periodic round (see the module docstring).

    Args:
        config / host / peers / threads: the daemon's.
        watcher / attest / pulls: the parts a round drives.
        wake: set to run the next round at once (and probe every peer in it).
        on_new_head: called for each replica whose head moved.
    """

    def __init__(
        self,
        config: NodeConfig,
        host: P2PHost,
        peers: PeerView,
        threads: WorkerThreads,
        *,
        watcher: HeadWatcher,
        attest: AttestationService,
        pulls: PullScheduler,
        wake: asyncio.Event,
        on_new_head: Callable[[DatasetId], Awaitable[None]],
    ) -> None:
        self._config = config
        self._host = host
        self._peers = peers
        self._threads = threads
        self._watcher = watcher
        self._attest = attest
        self._pulls = pulls
        self._wake = wake
        self._on_new_head = on_new_head
        #: No round has completed yet: the next one announces and probes everything.
        self._first = True
        self._last_full = time.monotonic()
        self._bootstrap = BootstrapPeers(config.bootstrap, host, threads)

    async def dial_bootstrap(self) -> None:
        """Dial the bootstrap peers once (in parallel; `run` keeps them connected)."""
        await self._bootstrap.dial_all()

    async def run(self) -> None:
        """Run rounds until cancelled; the bootstrap peers are kept connected meanwhile."""
        keeper = asyncio.create_task(self._bootstrap.keep(), name="bootstrap-peers")
        try:
            await self._rounds()
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _rounds(self) -> None:
        self._last_full = time.monotonic()
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except (OdfError, OSError) as e:
                event(logging.WARNING, "head watcher step failed", error=str(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._config.head_poll_interval_s)

    async def _step(self) -> None:
        """One round."""
        joined, full = await self._refresh_peers()
        if time.monotonic() - self._last_full >= self._config.reannounce_interval_s:
            full, self._last_full = True, time.monotonic()
        if joined:
            await asyncio.sleep(JOIN_ANNOUNCE_DELAY_S)
        records = await self._threads.run(self._watcher.scan, full)
        for record in records:
            await self._watcher.announce(record)
        for did in self._watcher.take_changed():
            await self._on_new_head(did)
        await self._attest.round(full)
        woke = self._wake.is_set()
        self._wake.clear()
        if self._first or woke:
            await self._pulls.probe_peers(self._peers.connected)
        elif joined:
            await self._pulls.probe_peers(sorted(joined))
        self._first = False

    async def _refresh_peers(self) -> tuple[frozenset[str], bool]:
        """Update the peer view; the peers that joined the topic, and whether to announce all."""
        peers = await self._threads.run(self._host.peers)
        topic_peers = frozenset(await self._threads.run(self._host.mesh_peers, HEADS_TOPIC))
        self._peers.connected = sorted(peers)
        joined = topic_peers - self._peers.subscribed
        self._peers.subscribed = topic_peers
        return joined, self._first or bool(joined)
