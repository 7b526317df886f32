"""The daemon's watcher round (`node.daemon.service`): peers, heads to announce, peers to probe.

`WatchRound.run` repeats one round every ``head_poll_interval_s``, or sooner when woken
(the ``wake`` event: a follow or an unfollow). A round first keeps the head gossip's
shard subscriptions to the followed datasets (`p2p.libp2p.gossip.HeadGossip.follow`:
every shard when ``all`` is followed; the shards of published heads and the backbone
are kept by the gossip itself), refreshes the peer view (connected peers, the peers
subscribed to any head topic this node is in), has the head watcher
(`node.daemon.heads.HeadWatcher`) scan and announce: every held head on the first
round, when peers joined a topic (after `JOIN_ANNOUNCE_DELAY_S`) and every
``reannounce_interval_s``, so late joiners learn them. It hands replicas that moved to
``on_new_head``, runs the attestation round
(`node.daemon.attest.AttestationService.round`) and has the pull scheduler probe peers:
all of them on the first round and when woken, the ones that just joined otherwise. A
round that fails is logged and the next one runs. Beside the rounds, the bootstrap peers
are kept connected (`node.daemon.bootstrap_peers.BootstrapPeers`) and, with the DHT, the
shards of the followed datasets linked (`node.daemon.shard_links.ShardLinks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from fbs.did import DatasetId
from fbs.errors import OdfError
from node.daemon.attest import AttestationService
from node.daemon.bootstrap_peers import BootstrapPeers
from node.daemon.config import NodeConfig
from node.daemon.heads import HeadWatcher
from node.daemon.log import event
from node.daemon.pulls import PeerView, PullScheduler
from node.daemon.shard_links import ShardLinks
from node.worker_threads import WorkerThreads
from p2p.libp2p.host import P2PHost

__all__ = ["JOIN_ANNOUNCE_DELAY_S", "WatchRound"]

#: Delay before announcing to peers that just joined the topic (their subscription
#: must reach our gossipsub router first).
JOIN_ANNOUNCE_DELAY_S: Final = 0.5


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
        #: Followed datasets' shards kept reachable through the DHT (``None``: no DHT).
        self.links = (
            None
            if pulls.routing is None
            else ShardLinks(
                pulls.ws,
                host,
                threads,
                routing=pulls.routing,
                pulls=pulls,
                follows=pulls.follows,
                lookup_interval_s=config.dht_lookup_interval_s,
            )
        )

    async def dial_bootstrap(self) -> None:
        """Dial the bootstrap peers once (in parallel; `run` keeps them connected)."""
        await self._bootstrap.dial_all()

    async def run(self) -> None:
        """Run rounds until cancelled; meanwhile the bootstrap peers are kept connected
        and the followed shards linked (tasks owned here, ended with the rounds)."""
        tasks = [asyncio.create_task(self._bootstrap.keep(), name="bootstrap-peers")]
        if self.links is not None:
            tasks.append(asyncio.create_task(self.links.run(), name="shard-links"))
        try:
            await self._rounds()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _rounds(self) -> None:
        """One round every ``head_poll_interval_s`` or when woken (a failed one is logged)."""
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
        await self._follow_shards()
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
        if woke and self.links is not None:
            self.links.wake()  # a follow or an unfollow: link its shard now
        if self._first or woke:
            await self._pulls.probe_peers(self._peers.connected)
        elif joined:
            await self._pulls.probe_peers(sorted(joined))
        self._first = False

    async def _follow_shards(self) -> None:
        """Subscribe to the shards of the followed datasets, leave the unfollowed ones."""
        gossip, follows = self._watcher.gossip, self._pulls.follows
        if gossip is not None:
            ids = await self._threads.run(follows.ids)
            await gossip.follow(ids, every_shard=follows.all)

    async def _topic_peers(self) -> frozenset[str]:
        """Peers subscribed to any head topic this node is subscribed to."""
        gossip = self._watcher.gossip
        topics = sorted(gossip.topics) if gossip is not None else []
        return frozenset(await self._threads.run(self._host.topic_peers, topics))

    async def _refresh_peers(self) -> tuple[frozenset[str], bool]:
        """Update the peer view; the peers that joined a topic, and whether to announce all."""
        peers = await self._threads.run(self._host.peers)
        topic_peers = await self._topic_peers()
        self._peers.connected = sorted(peers)
        joined = topic_peers - self._peers.subscribed
        self._peers.subscribed = topic_peers
        return joined, self._first or bool(joined)
