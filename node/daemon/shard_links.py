"""Shard links (`node.daemon.watch` runs them): every followed dataset's shard kept reachable.

A head reaches a follower over gossip only through peers subscribed to the dataset's
shard topic (`p2p.libp2p.shards`), and bootstrap links rarely include one. So for
every dataset followed by DID or alias (held or not; owned ones and ``all`` left out:
``all`` joins every shard), a dataset is *linked* while one of the peers in its shard
topic (`P2PHost.topic_peers`) is a proven provider of it: a peer that announced or
served a verified head record of it (`PullScheduler.providers_of`, and the providers
probed here). An unlinked dataset (at start, after its publisher restarted, after
churn) is looked up in the DHT (`ContentRouting.lookup`): at once, then after
`FIRST_RETRY_S`, doubled up to ``dht_lookup_interval_s``; its providers are dialled and
asked for their head record at once:

* one that serves a verified record of the dataset is kept as a link, remembered as a
  provider, and a record above the held one is queued as a pull (the verified path of
  `node.daemon.pulls`);
* one that does not (a false or stale provider) is disconnected, if it was dialled
  here, and skipped for `SKIP_S`: it costs one dial, and its slot goes to the next;
* one that cannot be reached is tried again at the next lookup (a restarted provider
  comes back at a new address).

Bounds: `DIALS_PER_TICK` dials a tick and `PROVIDERS_PER_DATASET` serving providers per
dataset; at most `MAX_LINKS` connections opened here are kept, and one that no followed
dataset needs any more (unfollowed, or owned here now) is closed.

Slow schedule: the DHT head record of each linked held dataset is read again every
`RECHECK_FACTOR` lookup intervals (5 minutes by default, each dataset at its own time),
so a head missed by gossip is still pulled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import OdfError
from node.daemon.follow import FollowList
from node.daemon.log import dataset_fields, event
from node.daemon.pulls import PullScheduler
from node.daemon.routing import FIRST_RETRY_S, ContentRouting
from node.worker_threads import WorkerThreads
from p2p.errors import P2PError
from p2p.head_record import HeadRecord
from p2p.libp2p.host import P2PHost
from p2p.libp2p.shards import topic_for
from storage.workspace import Workspace

__all__ = [
    "DIALS_PER_TICK",
    "MAX_LINKS",
    "PROVIDERS_PER_DATASET",
    "RECHECK_FACTOR",
    "SKIP_S",
    "TICK_S",
    "ShardLinks",
]

#: How often the links are checked (seconds; woken sooner by a follow).
TICK_S: Final = 1.0
#: Providers dialled per tick, all datasets together: a node that starts with a
#: hundred unlinked follows opens connections a few at a time, not in one burst.
DIALS_PER_TICK: Final = 4
#: Serving providers linked per dataset: two, so one that stops serving (or lies
#: about its subscriptions) does not cut the dataset off until the next lookup.
PROVIDERS_PER_DATASET: Final = 2
#: Connections opened for shard links kept at once. Above the gossip mesh's upper
#: degree (12): one link usually serves every dataset of one publisher, so 16 covers
#: the publishers of a node's follows when nothing else connects them, while a node
#: following thousands of datasets cannot open thousands of connections.
MAX_LINKS: Final = 16
#: How long a provider that did not serve the dataset is skipped (seconds).
SKIP_S: Final = 600.0
#: Providers remembered as skipped.
MAX_SKIPPED: Final = 1024
#: Lookups run at once in one tick.
LOOKUPS_PER_TICK: Final = 4
#: Lookup intervals between two reads of a linked held dataset's DHT head record.
RECHECK_FACTOR: Final = 5


@dataclass(slots=True)
class _Backoff:
    next_at: float
    delay_s: float = FIRST_RETRY_S


@dataclass(slots=True)
class _Counters:
    lookups: int = 0
    dials: int = 0
    linked: int = 0
    skipped: int = 0
    unreachable: int = 0
    closed: int = 0
    rechecks: int = 0
    pulls_queued: int = 0


@dataclass(slots=True)
class _State:
    """What the links know between ticks."""

    #: Unlinked datasets: when to look each up next.
    backoff: dict[DatasetId, _Backoff] = field(default_factory=dict)
    #: Peers that served a verified record, per dataset.
    served: dict[DatasetId, set[str]] = field(default_factory=dict)
    #: Connections opened here: peer -> the datasets it serves.
    links: dict[str, set[DatasetId]] = field(default_factory=dict)
    #: Providers skipped, until when.
    skipped: dict[str, float] = field(default_factory=dict)
    #: Linked held datasets: when to read their DHT head record again.
    recheck_at: dict[DatasetId, float] = field(default_factory=dict)
    #: The followed datasets of the last tick, and the unlinked ones among them.
    followed: frozenset[DatasetId] = frozenset()
    unlinked: frozenset[DatasetId] = frozenset()


class ShardLinks:
    """Keeps the shards of the followed datasets reachable (see the module docstring).

    Args:
        ws / host / threads: the daemon's.
        routing: the daemon's content routing.
        pulls: the pull scheduler (providers heard of, probes, pulls).
        follows: the follow list.
        lookup_interval_s: the longest wait between two lookups of an unlinked dataset.
    """

    def __init__(
        self,
        ws: Workspace,
        host: P2PHost,
        threads: WorkerThreads,
        *,
        routing: ContentRouting,
        pulls: PullScheduler,
        follows: FollowList,
        lookup_interval_s: float,
    ) -> None:
        self._ws, self._host, self._threads = ws, host, threads
        self._routing, self._pulls, self._follows = routing, pulls, follows
        self._interval_s = lookup_interval_s
        self._state = _State()
        self.counters = _Counters()
        self._wake = asyncio.Event()
        #: Dials under way (they count against `MAX_LINKS` until they end).
        self._dialling = 0
        routing.links_status = self.status

    def wake(self) -> None:
        """Check at once (a follow or an unfollow)."""
        self._wake.set()

    async def run(self) -> None:
        """Check every `TICK_S` until cancelled (the watcher round owns the task)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            self._wake.clear()
            try:
                await self.tick()
            except (P2PError, OdfError, OSError) as e:  # the host restarting, a lost file
                event(logging.DEBUG, "shard links check failed", error=str(e))

    async def tick(self) -> None:
        """One check: close unneeded links, look up unlinked datasets, recheck heads."""
        followed = await self._threads.run(self._followed)
        shard_peers = await self._threads.run(self._shard_peers, followed)
        connected = frozenset(await self._threads.run(self._host.peers))
        await self._close_unneeded(followed, connected)
        unlinked = {d for d in followed if not (shard_peers[d] & self._proven(d))}
        st = self._state
        st.followed, st.unlinked = frozenset(followed), frozenset(unlinked)
        now = time.monotonic()
        for did in [d for d in st.backoff if d not in unlinked]:
            del st.backoff[did]  # linked again (or unfollowed): the next loss starts over
        for did in unlinked:
            st.backoff.setdefault(did, _Backoff(next_at=now))
        due = sorted((d for d in unlinked if st.backoff[d].next_at <= now), key=str)
        budget = [DIALS_PER_TICK]
        await asyncio.gather(*(self._link(d, connected, budget) for d in due[:LOOKUPS_PER_TICK]))
        await self._recheck(followed - unlinked, now)

    def _followed(self) -> set[DatasetId]:
        """Followed datasets (by DID or alias) this node does not own (a worker thread)."""
        return {d for d in self._follows.ids() if not self._ws.keys.has(d)}

    def _shard_peers(self, followed: set[DatasetId]) -> dict[DatasetId, frozenset[str]]:
        """The peers in each followed dataset's shard topic (a worker thread)."""
        topics = {topic_for(d) for d in followed}
        peers = {t: frozenset(self._host.topic_peers([t])) for t in sorted(topics)}
        return {d: peers[topic_for(d)] for d in followed}

    def _proven(self, did: DatasetId) -> frozenset[str]:
        return self._pulls.providers_of(did) | self._state.served.get(did, set())

    async def _link(self, did: DatasetId, connected: frozenset[str], budget: list[int]) -> None:
        """Look ``did`` up; link up to `PROVIDERS_PER_DATASET` providers that serve it."""
        st, backoff = self._state, self._state.backoff[did]
        backoff.next_at = time.monotonic() + backoff.delay_s
        backoff.delay_s = min(self._interval_s, backoff.delay_s * 2)
        self.counters.lookups += 1
        try:
            head, providers = await self._routing.lookup(did)
        except (P2PError, OdfError) as e:
            event(
                logging.INFO,
                "shard link lookup failed",
                **dataset_fields(self._ws, did),
                error=str(e),
            )
            return
        linked: list[str] = []
        for peer, addrs in providers:
            if len(linked) >= PROVIDERS_PER_DATASET:
                break
            if st.skipped.get(peer, 0.0) > time.monotonic() or self._host.scores.is_banned(peer):
                continue
            if await self._try(did, peer, addrs, connected, budget):
                linked.append(peer)
        self._routing.note(did, head, providers, linked)
        if head.record is not None and linked:
            await self._offer(head.record, linked[0])

    async def _try(
        self,
        did: DatasetId,
        peer: str,
        addrs: list[str],
        connected: frozenset[str],
        budget: list[int],
    ) -> bool:
        """Dial ``peer`` if needed (within the bounds), then check that it serves ``did``."""
        dialled = peer not in connected
        if dialled:
            if budget[0] <= 0 or len(self._state.links) + self._dialling >= MAX_LINKS:
                return False
            budget[0] -= 1
            self.counters.dials += 1
            self._dialling += 1
            try:
                reached = await self._routing.connect(peer, addrs)
            finally:
                self._dialling -= 1
            if not reached:
                # Not skipped: a restarted provider is back at a new address, and the
                # dataset's back-off bounds the retries.
                self.counters.unreachable += 1
                return False
        record = await self._pulls.probe(peer, did)
        if record is None:
            self._skip(peer, did, "does not serve the dataset", dialled=dialled)
            if dialled:
                with contextlib.suppress(P2PError):
                    await self._host.disconnect(peer)
            return False
        self._state.served.setdefault(did, set()).add(peer)
        if dialled:
            self._state.links.setdefault(peer, set()).add(did)
        elif peer in self._state.links:
            self._state.links[peer].add(did)
        self.counters.linked += 1
        event(logging.INFO, "shard link", **dataset_fields(self._ws, did, record.name), peer=peer)
        await self._offer(record, peer)
        return True

    def _skip(self, peer: str, did: DatasetId, why: str, *, dialled: bool) -> None:
        skipped = self._state.skipped
        skipped[peer] = time.monotonic() + SKIP_S
        while len(skipped) > MAX_SKIPPED:
            del skipped[next(iter(skipped))]
        self.counters.skipped += 1
        event(
            logging.INFO,
            "provider skipped",
            **dataset_fields(self._ws, did),
            peer=peer,
            why=why,
            dialled=dialled,
        )

    async def _offer(self, record: HeadRecord, peer: str) -> None:
        """Hand a verified record to the pulls (queued only if above the held one)."""
        if await self._pulls.offer(record, peer):
            self.counters.pulls_queued += 1

    async def _close_unneeded(self, followed: set[DatasetId], connected: frozenset[str]) -> None:
        """Forget links that dropped; close those no followed dataset needs any more."""
        st = self._state
        for did in [d for d in st.served if d not in followed]:
            del st.served[did]
        for peer, dids in list(st.links.items()):
            dids &= followed
            if peer not in connected:
                del st.links[peer]  # gone (a restart, churn): the next tick looks up again
            elif not dids:
                del st.links[peer]
                self.counters.closed += 1
                with contextlib.suppress(P2PError):
                    await self._host.disconnect(peer)

    async def _recheck(self, linked: set[DatasetId], now: float) -> None:
        """Read the DHT head record of linked held datasets on the slow schedule."""
        st, period = self._state, self._interval_s * RECHECK_FACTOR
        for did in [d for d in st.recheck_at if d not in linked]:
            del st.recheck_at[did]
        for did in linked:
            st.recheck_at.setdefault(did, now + random.uniform(0.5, 1.0) * period)
        due = sorted((d for d in linked if st.recheck_at[d] <= now), key=str)
        for did in due[:LOOKUPS_PER_TICK]:
            st.recheck_at[did] = now + period
            self.counters.rechecks += 1
            with contextlib.suppress(P2PError, OdfError):
                head, _providers = await self._routing.lookup(did)
                if head.record is not None and await self._pulls.offer(head.record, ""):
                    self.counters.pulls_queued += 1
                    event(
                        logging.INFO,
                        "head found in the dht",
                        **dataset_fields(self._ws, did, head.record.name),
                        seq=head.record.sequence_number,
                    )

    def status(self) -> dict[str, Any]:
        """``/api/status`` → ``dht.shardLinks``."""
        c, st = self.counters, self._state
        return {
            "followed": len(st.followed),
            "unlinked": sorted(d.to_did_odf() for d in st.unlinked),
            "links": sorted(st.links),
            "maxLinks": MAX_LINKS,
            "lookups": c.lookups,
            "dials": c.dials,
            "linked": c.linked,
            "skipped": c.skipped,
            "unreachable": c.unreachable,
            "closed": c.closed,
            "rechecks": c.rechecks,
            "pullsQueued": c.pulls_queued,
        }
