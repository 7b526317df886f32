"""The head shard topics one host is subscribed to, kept equal to the ones it wants.

A node wants the shards (`p2p.libp2p.shards`) of the datasets it publishes (every head
it announces, its own or a replica's), of the datasets it follows (every shard when it
follows ``all``), and its backbone shards of the current epoch. `ShardSubscriptions.sync`
joins what is wanted and not joined and leaves what is joined and no longer wanted; it
runs when the head gossip starts, before a head of a new shard is published, and on
every round of the daemon's watcher (`node.daemon.watch`), so a follow or unfollow at
run time and the daily backbone rotation take effect within one round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from libp2p.peer.id import ID

from fbs.did import DatasetId
from p2p.libp2p.host import P2PHost
from p2p.libp2p.shards import (
    BACKBONE_SHARDS_PER_NODE,
    SHARD_COUNT,
    backbone_shards,
    current_epoch,
    topic_for,
    wanted_topics,
)

__all__ = ["ShardSubscriptions"]

Join = Callable[[str], Awaitable[None]]
"""Subscribes the host to one shard topic (with the gossip's validator and handler)."""


class ShardSubscriptions:
    """The shard topics of one host's head gossip (asyncio side; one `sync` at a time).

    Args:
        host: the libp2p host (running before `sync`).
        join: subscribes the host to one topic.
        clock: unix seconds (the backbone epoch).
        backbone_per_node: backbone shards joined (0: none).
        count: shard count.
    """

    def __init__(
        self,
        host: P2PHost,
        join: Join,
        *,
        clock: Callable[[], float] = time.time,
        backbone_per_node: int = BACKBONE_SHARDS_PER_NODE,
        count: int = SHARD_COUNT,
    ) -> None:
        self._host, self._join, self._clock = host, join, clock
        self._backbone_per_node, self._count = backbone_per_node, count
        self._followed: frozenset[DatasetId] = frozenset()
        self._every_shard = False
        self._published: set[DatasetId] = set()
        self._joined: set[str] = set()
        self._lock = asyncio.Lock()

    @property
    def joined(self) -> frozenset[str]:
        """The shard topics subscribed to now."""
        return frozenset(self._joined)

    def backbone(self) -> tuple[int, ...]:
        """This host's backbone shards in the current epoch."""
        me = ID.from_base58(self._host.peer_id).to_bytes()
        epoch = current_epoch(self._clock())
        return backbone_shards(me, epoch, self._count, self._backbone_per_node)

    def wanted(self) -> frozenset[str]:
        """The shard topics this host should be subscribed to now."""
        datasets = self._followed | self._published
        return wanted_topics(
            datasets, self.backbone(), every_shard=self._every_shard, count=self._count
        )

    async def follow(self, datasets: Iterable[DatasetId], *, every_shard: bool) -> None:
        """Set the followed datasets (``every_shard``: ``all`` is followed), then `sync`."""
        self._followed, self._every_shard = frozenset(datasets), every_shard
        await self.sync()

    async def publishing(self, dataset: DatasetId) -> str:
        """Join the shard of ``dataset`` (kept while the host runs); its topic."""
        topic = topic_for(dataset, self._count)
        if dataset not in self._published:
            self._published.add(dataset)
            await self.sync()
        return topic

    async def sync(self) -> None:
        """Join the wanted shard topics not joined and leave the joined ones not wanted.

        Raises:
            HostNotRunning: the host is not running.
        """
        async with self._lock:
            wanted = self.wanted()
            for topic in sorted(wanted - self._joined):
                await self._join(topic)
                self._joined.add(topic)
            for topic in sorted(self._joined - wanted):
                await self._host.unsubscribe(topic)
                self._joined.discard(topic)
