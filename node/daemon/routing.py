"""The daemon's content routing (`node.daemon.service`, ``dht: true``): odf's DHT put to use.

* Publishing: every head the node announces (signed here, pulled, pushed to it) goes to
  `ContentRouting.publish`: the node becomes a provider of the dataset (re-provided on
  `p2p.dht.node.DhtNode`'s schedule) and stores the signed head record at the closest
  peers. One task publishes the newest record per dataset, each record once; a restart
  of the libp2p host (a new DHT) publishes every record again. A dataset deleted from
  the workspace is no longer provided (checked every ``dht_lookup_interval_s``); its
  records expire at the storing peers.
* Finding: `ContentRouting.find` asks the DHT for the dataset's newest signed head record
  (a quorum of the closest peers, never the local store) and its providers, dials the
  providers and returns those now connected. The pull scheduler calls it when no
  connected peer serves a dataset (`node.daemon.pulls`); `ContentRouting.want` schedules
  lookups of a followed dataset in the background: at once, then after
  `FIRST_RETRY_S`, doubled each time up to ``dht_lookup_interval_s``, until a lookup
  finds a record and a connected provider, which go to the ``on_found`` callback.
* Status: routing-table size and peers, datasets provided, providers found per dataset,
  lookups (`ContentRouting.status`), refreshed by the finder loop.

Every DHT call runs in the host's trio thread (`P2PHost.run_trio`); `p2p.dht` checks the
bytes from peers there (record signature against the DID, key) before they reach this
module. Provider addresses are only dialled: the peer id is proven by the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from fbs.did import DatasetId
from fbs.errors import OdfError
from node.daemon.log import dataset_fields, event
from p2p.dht.node import DhtNode, HeadLookup
from p2p.errors import Equivocation, P2PError, StaleHead
from p2p.head_record import HeadRecord
from p2p.libp2p.host import P2PHost
from storage.workspace import Workspace

__all__ = ["FIRST_RETRY_S", "ContentRouting", "Found", "Provider"]

#: First wait before looking a wanted dataset up again.
FIRST_RETRY_S: Final = 2.0
#: How often the finder loop wakes to refresh the status and run due lookups.
TICK_S: Final = 2.0
#: Providers dialled per lookup, and addresses tried per provider.
MAX_DIALS: Final = 8
MAX_ADDRS_PER_PROVIDER: Final = 4
#: Datasets whose last providers are kept for the status.
MAX_FOUND: Final = 1000
#: Lookups shown in the status (the most recent).
SHOWN_FOUND: Final = 20
#: Lookups run at once by the finder loop.
LOOKUPS_AT_ONCE: Final = 4


Provider = tuple[str, list[str]]
"""A provider the DHT named: its peer id and the addresses it advertised (unproven)."""


@dataclass(frozen=True, slots=True)
class Found:
    """What one DHT lookup found for a dataset.

    Attributes:
        dataset_id: the dataset.
        record: the newest valid head record a quorum read returned (``None``: none).
        quorum_met: enough peers answered the head read.
        providers: provider peer ids the DHT returned (this node left out).
        connected: those of ``providers`` connected now (dialled if they were not).
    """

    dataset_id: DatasetId
    record: HeadRecord | None
    quorum_met: bool
    providers: tuple[str, ...]
    connected: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "dataset": self.dataset_id.to_did_odf(),
            "sequenceNumber": None if self.record is None else self.record.sequence_number,
            "quorumMet": self.quorum_met,
            "providers": list(self.providers),
            "connected": list(self.connected),
        }


@dataclass(frozen=True, slots=True)
class _Table:
    """The routing table as last read in the trio thread."""

    size: int = 0
    peers: tuple[str, ...] = ()
    provided: int = 0


@dataclass(slots=True)
class _Wanted:
    next_at: float
    delay_s: float = FIRST_RETRY_S
    lookups: int = 0


@dataclass(slots=True)
class _Counters:
    lookups: int = 0
    found: int = 0
    failed: int = 0
    published: int = 0
    publish_failed: int = 0
    republished_after_restart: int = 0


@dataclass(slots=True)
class _Queue:
    """Records waiting to be published, the newest per dataset."""

    pending: dict[DatasetId, HeadRecord] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class ContentRouting:
    """The daemon's use of odf's DHT (see the module docstring).

    Args:
        ws / host: the daemon's (the host must run with a DHT).
        lookup_interval_s: the longest wait between lookups of a wanted dataset.
        on_found: called with each background lookup that found a record and a provider.
        is_wanted: whether a dataset is still worth looking up (followed, not held).
    """

    def __init__(
        self,
        ws: Workspace,
        host: P2PHost,
        *,
        lookup_interval_s: float,
        on_found: Callable[[Found], Awaitable[None]],
        is_wanted: Callable[[DatasetId], bool],
    ) -> None:
        self.ws = ws
        self.host = host
        self._interval_s = lookup_interval_s
        self._on_found = on_found
        self._is_wanted = is_wanted
        self._queue = _Queue()
        self._published: dict[DatasetId, HeadRecord] = {}
        #: Records no peer took yet: (record, when to try again, last wait).
        self._retry: dict[DatasetId, tuple[HeadRecord, float, float]] = {}
        self._wanted: dict[DatasetId, _Wanted] = {}
        self._wake = asyncio.Event()
        self._found: OrderedDict[DatasetId, Found] = OrderedDict()
        self._table = _Table()
        self._dht: DhtNode | None = None
        self.counters = _Counters()
        #: The shard links' status (`node.daemon.shard_links`), shown beside the DHT's.
        self.links_status: Callable[[], dict[str, Any]] | None = None

    # -- publishing -------------------------------------------------------------------

    def publish(self, record: HeadRecord) -> None:
        """Provide ``record``'s dataset and store the record (in the background, once)."""
        did = record.dataset_id
        if self._published.get(did) == record:
            return
        queued = self._queue.pending.get(did)
        if queued is None or queued.sequence_number <= record.sequence_number:
            self._queue.pending[did] = record
            self._queue.ready.set()

    async def _publisher(self) -> None:
        while True:
            await self._queue.ready.wait()
            self._queue.ready.clear()
            pending, self._queue.pending = self._queue.pending, {}
            for record in pending.values():
                await self._publish_one(record)

    async def _publish_one(self, record: HeadRecord) -> None:
        if self._published.get(record.dataset_id) == record:
            return  # announced twice while it was being published

        async def go() -> bool:
            dht = self.host.dht
            provided = await dht.provide(record.dataset_id)
            with contextlib.suppress(StaleHead, Equivocation):  # a newer record is held
                await dht.put_head(record)
            return provided

        fields = dataset_fields(self.ws, record.dataset_id, record.name)
        try:
            provided = await self.host.run_trio(go)
        except (P2PError, OdfError) as e:
            self.counters.publish_failed += 1
            event(logging.WARNING, "dht publish failed", **fields, error=str(e))
            return
        if not provided:  # no peer took it (an empty routing table): try again later
            retry = self._retry.get(record.dataset_id)
            delay = FIRST_RETRY_S if retry is None else min(self._interval_s, retry[2] * 2)
            self._retry[record.dataset_id] = (record, time.monotonic() + delay, delay)
            event(logging.DEBUG, "no peer took the provider record yet", **fields)
            return
        self._retry.pop(record.dataset_id, None)
        self._published[record.dataset_id] = record
        self.counters.published += 1
        event(logging.INFO, "provided", **fields, seq=record.sequence_number)

    def _requeue_due(self) -> None:
        """Records no peer took yet whose wait is over go back to the publisher."""
        now = time.monotonic()
        for did, (record, at, _delay) in list(self._retry.items()):
            if at <= now and did not in self._queue.pending:
                self._queue.pending[did] = record
                self._queue.ready.set()

    # -- finding ----------------------------------------------------------------------

    def want(self, did: DatasetId) -> None:
        """Look ``did`` up in the background until a provider is found (see the docstring)."""
        if did not in self._wanted:
            self._wanted[did] = _Wanted(next_at=time.monotonic())
            self._wake.set()

    async def lookup(self, did: DatasetId) -> tuple[HeadLookup, list[Provider]]:
        """Ask the DHT for ``did``'s head record and providers (this node left out); no dial.

        Raises:
            HostNotRunning: the host is not running.
        """
        self.counters.lookups += 1

        async def both() -> tuple[HeadLookup, list[Provider]]:
            dht = self.host.dht
            me = self.host.peer_id
            out: dict[str, Any] = {}
            async with trio.open_nursery() as nursery:

                async def head() -> None:
                    out["head"] = await dht.get_head(did)

                async def providers() -> None:
                    found = await dht.find_providers(did)
                    out["providers"] = [
                        (str(p.peer_id), [str(a) for a in p.addrs])
                        for p in found
                        if str(p.peer_id) != me
                    ]

                nursery.start_soon(head)
                nursery.start_soon(providers)
            return out["head"], out["providers"]

        return await self.host.run_trio(both)

    def note(
        self, did: DatasetId, head: HeadLookup, providers: list[Provider], connected: list[str]
    ) -> Found:
        """Keep what a lookup found for the status (and log it)."""
        record = head.record
        found = Found(
            did, record, head.quorum_met, tuple(p for p, _ in providers), tuple(connected)
        )
        self._found[did] = found
        self._found.move_to_end(did)
        while len(self._found) > MAX_FOUND:
            self._found.popitem(last=False)
        if found.connected:
            self.counters.found += 1
        event(
            logging.INFO,
            "dht lookup",
            **dataset_fields(self.ws, did, None if record is None else record.name),
            seq=None if record is None else record.sequence_number,
            quorum=head.quorum_met,
            providers=len(providers),
            connected=len(connected),
        )
        return found

    async def find(self, did: DatasetId) -> Found:
        """Ask the DHT for ``did``'s head record and providers; dial the providers.

        Raises:
            HostNotRunning: the host is not running.
        """
        head, providers = await self.lookup(did)
        connected = await self._dial(providers[:MAX_DIALS])
        return self.note(did, head, providers, connected)

    async def connect(self, peer: str, addrs: list[str]) -> bool:
        """Dial ``peer`` at the first of its TCP addresses that answers; whether it did."""
        if self.host.scores.is_banned(peer):
            return False
        for addr in [a for a in addrs if "/tcp/" in a][:MAX_ADDRS_PER_PROVIDER]:
            full = addr if "/p2p/" in addr else f"{addr}/p2p/{peer}"
            with contextlib.suppress(P2PError):
                await self.host.connect(full)
                return True
        return False

    async def _dial(self, providers: list[Provider]) -> list[str]:
        """Connect to each provider (at the first address that answers); those connected."""
        already = set(await asyncio.to_thread(self.host.peers))

        async def one(peer: str, addrs: list[str]) -> str | None:
            if peer in already or await self.connect(peer, addrs):
                return peer
            return None

        got = await asyncio.gather(*(one(p, a) for p, a in providers))
        return [p for p in got if p is not None]

    async def _finder(self) -> None:
        checked = time.monotonic()
        while True:
            await self._refresh()
            self._requeue_due()
            if time.monotonic() - checked >= self._interval_s:
                checked = time.monotonic()
                await self._drop_deleted()
            now = time.monotonic()
            due = [d for d, w in self._wanted.items() if w.next_at <= now]
            # `is_wanted` reads the workspace: in a thread, not on the loop.
            keep = await asyncio.to_thread(self._still_wanted, due)
            for did in set(due) - set(keep):
                self._wanted.pop(did, None)
            due = [d for d in keep if d in self._wanted][:LOOKUPS_AT_ONCE]
            if due:
                await asyncio.gather(*(self._look_up(d) for d in due))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)

    def _still_wanted(self, dids: list[DatasetId]) -> list[DatasetId]:
        return [d for d in dids if self._is_wanted(d)]

    async def _look_up(self, did: DatasetId) -> None:
        wanted = self._wanted[did]
        wanted.lookups += 1
        try:
            found = await self.find(did)
        except (P2PError, OdfError, OSError) as e:
            self.counters.failed += 1
            event(logging.INFO, "dht lookup failed", **dataset_fields(self.ws, did), error=str(e))
            found = None
        if found is not None and found.record is not None and found.connected:
            self._wanted.pop(did, None)
            await self._on_found(found)
            return
        wanted.next_at = time.monotonic() + wanted.delay_s
        wanted.delay_s = min(self._interval_s, wanted.delay_s * 2)

    async def _drop_deleted(self) -> None:
        """Stop providing datasets no longer in the workspace (their records expire)."""
        datasets = self.ws.datasets_dir

        def gone(dids: list[DatasetId]) -> list[DatasetId]:
            return [d for d in dids if not (datasets / d.as_multibase()).is_dir()]

        for did in await asyncio.to_thread(gone, [*self._published, *self._retry]):
            self._published.pop(did, None)
            self._retry.pop(did, None)

            async def stop(did: DatasetId = did) -> None:
                self.host.dht.stop_providing(did)

            with contextlib.suppress(P2PError):
                await self.host.run_trio(stop)
            event(logging.INFO, "no longer provided", dataset=did.to_did_odf())

    async def _refresh(self) -> None:
        """Read the routing table; after a host restart, publish every record again."""

        async def read() -> tuple[DhtNode, _Table]:
            dht = self.host.dht
            table = _Table(dht.routing_table_size, tuple(dht.routing_peers()), len(dht.provided))
            return dht, table

        try:
            dht, self._table = await self.host.run_trio(read)
        except P2PError:
            return  # stopped or restarting: the next tick reads again
        if self._dht is not None and dht is not self._dht:
            self.counters.republished_after_restart += len(self._published)
            for record in self._published.values():
                self._queue.pending.setdefault(record.dataset_id, record)
            self._published = {}
            self._queue.ready.set()
        self._dht = dht

    # -- running and status -----------------------------------------------------------

    async def run(self) -> None:
        """Publish and find until cancelled (the daemon owns the task and cancels it)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._publisher(), name="dht-publisher")
            group.create_task(self._finder(), name="dht-finder")

    def routing_peers(self) -> frozenset[str]:
        """Peers in the routing table at the last refresh."""
        return frozenset(self._table.peers)

    def providers_of(self) -> dict[str, list[str]]:
        """Datasets (DIDs) each peer was last found providing, by peer id."""
        out: dict[str, list[str]] = {}
        for did, found in self._found.items():
            for peer in found.providers:
                out.setdefault(peer, []).append(did.to_did_odf())
        return out

    def status(self) -> dict[str, Any]:
        """``/api/status`` → ``dht``."""
        c = self.counters
        return {
            "enabled": True,
            "routingTableSize": self._table.size,
            "provided": self._table.provided,
            "published": c.published,
            "publishFailed": c.publish_failed,
            "lookups": c.lookups,
            "lookupsFound": c.found,
            "lookupsFailed": c.failed,
            "wanted": sorted(d.to_did_odf() for d in self._wanted),
            "providersFound": [f.to_dict() for f in list(self._found.values())[-SHOWN_FOUND:]],
            **({} if self.links_status is None else {"shardLinks": self.links_status()}),
        }
