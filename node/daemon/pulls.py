"""The daemon's pull scheduler (`node.daemon.service`): what the network has, and pulls of it.

A received head record (already signature-checked by the gossip validator) is checked
against the head store (stale, replayed and lower records cost nothing), then, for
followed datasets (`node.daemon.follow.FollowList`), a pull is queued (`PullScheduler.offer`).
Pulls are serialized per dataset (one task each; a newer record received meanwhile is
pulled next), run from the announcing peer and every connected peer that has the head,
retry with jittered exponential backoff, and resume: objects already stored are not fetched again
(`p2p.sync.pull_dataset`). `PullScheduler.probe_peers` looks up interrupted pulls
(``.odf/staging/pull-*``, held records ahead of the local head) and followed datasets on
peers. Heads heard of (`PullScheduler.known`), queued pulls and the last finished ones
(`PullRecord`) are kept for ``/api/status``.

Content routing (``dht: true``, `node.daemon.routing.ContentRouting`): a pull that no
connected peer can serve asks the DHT for the dataset's providers and dials them before
it fails; `probe_peers` hands a wanted dataset no connected peer serves to the DHT
lookups (what they find comes back through `PullScheduler.on_found`); `resolve` (what
``odf pull did:...`` asks the running node) falls back to the DHT the same way. Every
record found so is checked against the head store like a gossiped one, and the pull
itself goes through the one verified receive path (`p2p.sync.pull_dataset`).

Retries never give up on a head while it is the newest one wanted (a peer
that answers ``busy`` under abuse must not make an honest follower drop the head): after
``pull_attempts`` fast tries the delay stays at `MAX_RETRY_DELAY_S`; each delay is
jittered (so followers told ``busy`` together do not come back together), and a newer
record or a new provider wakes the waiting pull at once. The first time a pull crosses
``pull_attempts`` it is reported once in the history ("still failing").

What happens after a pull (announce, attestations, validation) and the dispute policy
are the daemon's: it passes them in as callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import FbsError, OdfError
from node.daemon.config import NodeConfig
from node.daemon.follow import FollowList
from node.daemon.log import dataset_fields, event
from node.daemon.routing import ContentRouting, Found
from node.remote.attestations import fetch_from_peers
from node.remote.replica_names import replica_alias
from node.worker_threads import WorkerThreads
from p2p.attestation import Attestation
from p2p.errors import (
    Equivocation,
    InvalidHeadRecord,
    NotDescendant,
    P2PError,
    PeerUnavailable,
    StaleHead,
)
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from p2p.libp2p.exchange import ExchangeClient
from p2p.libp2p.host import P2PHost
from p2p.libp2p.source import Libp2pSource
from p2p.peers import PeerScores
from p2p.sync import ObjectSource, PullResult, pull_dataset
from storage.errors import StorageError
from storage.layout import DatasetLayout
from storage.workspace import Workspace

__all__ = ["PeerView", "PullRecord", "PullScheduler", "retry_delay"]

#: Network heads remembered (datasets seen in gossip), most recent kept.
MAX_KNOWN_HEADS: Final = 10_000
#: Providers remembered per dataset.
MAX_PROVIDERS: Final = 32
#: Finished pulls kept for ``/api/status``.
PULL_HISTORY: Final = 50
#: Bound on asking one peer for a head (seconds).
PROBE_TIMEOUT_S: Final = 10.0
#: Cap of the retry backoff (seconds).
MAX_RETRY_DELAY_S: Final = 30.0


def retry_delay(attempt: int, first_s: float, *, rng: random.Random | None = None) -> float:
    """Delay before retry ``attempt`` (1-based): exponential, capped, jittered.

    "Equal jitter": a uniform draw in [d/2, d] of the capped exponential d, so the
    delay never collapses to zero but followers told ``busy`` together spread out.
    """
    d = min(MAX_RETRY_DELAY_S, first_s * float(2 ** min(max(attempt - 1, 0), 30)))
    draw = rng.random() if rng is not None else random.random()
    return d / 2 + draw * d / 2


@dataclass(slots=True)
class PeerView:
    """The node's view of its peers (refreshed by the head watcher and by pulls).

    Attributes:
        connected: connected peers, sorted.
        subscribed: peers in the mesh of the heads topic.
    """

    connected: list[str] = field(default_factory=list)
    subscribed: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Want:
    """A pull to do: the highest record seen and peers that announced it."""

    record: HeadRecord
    providers: list[str] = field(default_factory=list)
    attempts: int = 0
    started_at: float | None = None
    last_error: str | None = None
    task: asyncio.Task[None] | None = None
    #: Set when a newer record or a new provider arrives: ends a retry wait early.
    wake: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class PullRecord:
    """One finished pull, for ``/api/status``.

    Attributes:
        dataset_id: the dataset.
        alias: its name here (else its publisher's; ``None``: neither is known).
        sequence_number: the record pulled to.
        ok: whether it completed.
        detail: result summary or the error.
        blocks / objects / objects_present / bytes: what the pull moved.
        seconds: duration.
        finished_at: UNIX time.
    """

    dataset_id: DatasetId
    sequence_number: int
    ok: bool
    detail: str
    alias: str | None = None
    blocks: int = 0
    objects: int = 0
    objects_present: int = 0
    bytes: int = 0
    seconds: float = 0.0
    finished_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "dataset": self.dataset_id.to_did_odf(),
            "alias": self.alias,
            "sequenceNumber": self.sequence_number,
            "ok": self.ok,
            "detail": self.detail,
            "blocks": self.blocks,
            "objects": self.objects,
            "objectsPresent": self.objects_present,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "finishedAt": round(self.finished_at, 3),
        }


@dataclass(slots=True)
class _Known:
    record: HeadRecord
    providers: list[str] = field(default_factory=list)


def _add_provider(providers: list[str], peer: str) -> None:
    if peer and peer not in providers:
        providers.insert(0, peer)
        del providers[MAX_PROVIDERS:]


class PullScheduler:
    """Pulls of announced heads for a node serving ``ws`` (see the module docstring).

    Args:
        ws / config / host / head_store / scores: the daemon's.
        peers: the daemon's `PeerView` (``connected`` is refreshed here too).
        follows: which datasets to replicate.
        refusal: why policy refuses new heads of a dataset (``None``: pull it).
        on_pulled: called after each successful pull (before the next one starts).
        on_equivocation: called when a received record conflicts with the held one.
        threads: the daemon's worker threads (blocking calls it waits for at stop).
        on_attestations: given the attestations the sources of a pull hold for the
            dataset (signatures checked, nothing stored yet).
    """

    def __init__(
        self,
        ws: Workspace,
        config: NodeConfig,
        host: P2PHost,
        head_store: HeadStore,
        scores: PeerScores,
        peers: PeerView,
        follows: FollowList,
        *,
        refusal: Callable[[DatasetId], Awaitable[str | None]],
        on_pulled: Callable[[DatasetId, HeadRecord], Awaitable[None]],
        on_equivocation: Callable[[], None],
        threads: WorkerThreads,
        on_attestations: Callable[[list[Attestation]], Awaitable[None]] | None = None,
    ) -> None:
        self.ws = ws
        self.threads = threads
        self.config = config
        self.host = host
        self.head_store = head_store
        self.scores = scores
        self.peers = peers
        self.follows = follows
        self._refusal = refusal
        self._on_pulled = on_pulled
        self._on_equivocation = on_equivocation
        self._on_attestations = on_attestations
        #: Set once the host runs (`node.daemon.service.NodeDaemon.start`).
        self.client: ExchangeClient | None = None
        #: Content routing over the DHT (``None``: ``dht: false``); set by the daemon.
        self.routing: ContentRouting | None = None
        self.wants: dict[DatasetId, _Want] = {}
        self.known: OrderedDict[DatasetId, _Known] = OrderedDict()
        self._history: deque[PullRecord] = deque(maxlen=PULL_HISTORY)
        self.stopping = False

    def close(self) -> list[asyncio.Task[None]]:
        """Stop pulling; the pull tasks, for the caller to cancel and await."""
        self.stopping = True
        return [w.task for w in self.wants.values() if w.task is not None]

    def remember(self, record: HeadRecord, origin: str) -> None:
        known = self.known.get(record.dataset_id)
        if known is None or record.sequence_number > known.record.sequence_number:
            event(
                logging.INFO,
                "head heard",
                **dataset_fields(self.ws, record.dataset_id, record.name),
                seq=record.sequence_number,
                origin=origin,
            )
            known = _Known(record)
            self.known[record.dataset_id] = known
        self.known.move_to_end(record.dataset_id)
        if record.head == known.record.head:
            _add_provider(known.providers, origin)
        while len(self.known) > MAX_KNOWN_HEADS:
            self.known.popitem(last=False)

    async def offer(self, record: HeadRecord, origin: str) -> bool:
        """Consider a verified ``record`` announced by peer ``origin``; queue a pull.

        Returns:
            Whether a pull was queued (or an already queued one gained a provider).
        """
        did = record.dataset_id
        self.remember(record, origin)
        if self.ws.keys.has(did):
            return False  # our own dataset: only we move it
        try:
            await self.threads.run(self.head_store.check, record)
        except StaleHead:
            return False
        except Equivocation as e:
            event(
                logging.WARNING,
                "equivocation recorded",
                **dataset_fields(self.ws, did, record.name),
                error=str(e),
            )
            self._on_equivocation()
            return False
        except P2PError as e:
            event(
                logging.INFO,
                "record refused",
                **dataset_fields(self.ws, did, record.name),
                error=str(e),
            )
            return False
        if not self.follows.is_followed(did):
            return False
        self.queue(record, origin)
        return True

    def queue(self, record: HeadRecord, origin: str | None) -> None:
        did = record.dataset_id
        want = self.wants.get(did)
        if want is None:
            want = self.wants[did] = _Want(record)
        elif record.sequence_number > want.record.sequence_number:
            want.record = record
            want.attempts = 0
            want.wake.set()
        elif record.head != want.record.head:
            return  # older (or conflicting: the head store decides at pull time)
        if origin and origin not in want.providers:
            _add_provider(want.providers, origin)
            want.wake.set()
        if want.task is None or want.task.done():
            want.task = asyncio.create_task(self._pull_loop(did), name=f"pull-{did}")

    def pulls_in_progress(self) -> list[dict[str, Any]]:
        """Queued and running pulls (JSON rows)."""
        return [
            {
                **dataset_fields(self.ws, did, w.record.name),
                "sequenceNumber": w.record.sequence_number,
                "head": str(w.record.head),
                "running": w.started_at is not None,
                "attempts": w.attempts,
                "providers": list(w.providers),
                "lastError": w.last_error,
            }
            for did, w in self.wants.items()
        ]

    @property
    def history(self) -> list[PullRecord]:
        """Finished pulls, oldest first."""
        return list(self._history)

    async def _pull_loop(self, did: DatasetId) -> None:
        while not self.stopping:
            want = self.wants[did]
            record = want.record
            want.started_at = time.monotonic()
            t0 = time.monotonic()
            refused = await self._refusal(did)
            if refused is not None:
                self._finish(did, record, False, f"refused by policy: {refused}", t0)
                if self.wants[did].record is record:
                    del self.wants[did]
                    return
                continue
            try:
                result = await self._pull_once(record, want.providers)
            except asyncio.CancelledError:
                event(logging.INFO, "pull cancelled", **dataset_fields(self.ws, did, record.name))
                raise
            except (StaleHead, Equivocation, NotDescendant, InvalidHeadRecord) as e:
                # Not retryable: the record is behind, conflicting or off our history.
                self._finish(did, record, False, f"{type(e).__name__}: {e}", t0)
                if self.wants[did].record is record:
                    del self.wants[did]
                    return
                continue
            except (OdfError, OSError) as e:
                await self._retry_later(did, want, record, e, t0)
                continue
            self._finish(did, record, True, "ok", t0, result)
            await self._on_pulled(did, record)
            current = self.wants.get(did)
            if current is None or current.record is record:
                self.wants.pop(did, None)
                return

    async def _retry_later(
        self, did: DatasetId, want: _Want, record: HeadRecord, error: BaseException, t0: float
    ) -> None:
        """Wait before the next try (see the module docstring); a wake-up ends it early."""
        want.attempts += 1
        want.last_error = f"{type(error).__name__}: {error}"
        want.started_at = None
        if want.attempts == self.config.pull_attempts:
            self._finish(did, record, False, f"still failing, retrying: {want.last_error}", t0)
        delay = retry_delay(want.attempts, self.config.pull_retry_delay_s)
        event(
            logging.INFO,
            "pull failed, retrying",
            **dataset_fields(self.ws, did, record.name),
            attempt=want.attempts,
            delay_s=round(delay, 3),
            error=want.last_error,
        )
        want.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(want.wake.wait(), delay)

    def _finish(
        self,
        did: DatasetId,
        record: HeadRecord,
        ok: bool,
        detail: str,
        t0: float,
        result: PullResult | None = None,
    ) -> None:
        rec = PullRecord(
            did,
            record.sequence_number,
            ok,
            detail,
            alias=dataset_fields(self.ws, did, record.name)["alias"],
            blocks=result.blocks_fetched if result else 0,
            objects=result.objects_fetched if result else 0,
            objects_present=result.objects_present if result else 0,
            bytes=result.bytes_fetched if result else 0,
            seconds=time.monotonic() - t0,
            finished_at=time.time(),
        )
        self._history.append(rec)
        event(
            logging.INFO if ok else logging.WARNING,
            "pull done" if ok else "pull failed",
            **rec.to_dict(),
        )

    async def probe(self, peer: str, did: DatasetId) -> HeadRecord | None:
        """The verified head record ``peer`` serves for ``did`` (``None``: none, or failed)."""
        return await self._probe(peer, did)

    def providers_of(self, did: DatasetId) -> frozenset[str]:
        """Peers that announced or served the newest record heard of ``did``."""
        known = self.known.get(did)
        return frozenset() if known is None else frozenset(known.providers)

    async def _probe(self, peer: str, did: DatasetId) -> HeadRecord | None:
        assert self.client is not None
        src = Libp2pSource(self.host, self.client, peer, did)
        try:
            return await asyncio.wait_for(src.get_head_record(), PROBE_TIMEOUT_S)
        except (TimeoutError, P2PError):
            return None

    async def sources_for(self, record: HeadRecord, providers: Sequence[str]) -> list[str]:
        """Connected or announcing peers that serve ``record``'s head (or a later one)."""
        me = self.host.peer_id
        # Only connected peers: an announcement's origin may be several hops away, and
        # dialling a peer without known addresses would only charge it as unavailable.
        self.peers.connected = sorted(await self.threads.run(self.host.peers))
        connected = set(self.peers.connected)
        order = [p for p in providers if p in connected] + self.peers.connected
        candidates = [p for p in dict.fromkeys(order) if p != me]
        candidates = self.scores.usable(candidates)
        records = await asyncio.gather(*(self._probe(p, record.dataset_id) for p in candidates))
        return [
            p
            for p, r in zip(candidates, records, strict=True)
            if r is not None
            and (r.head == record.head or r.sequence_number > record.sequence_number)
        ]

    async def _pull_once(self, record: HeadRecord, providers: Sequence[str]) -> PullResult:
        assert self.client is not None
        peers = await self.sources_for(record, providers)
        if not peers and self.routing is not None:
            # Nobody connected serves it (an announcement heard from afar): ask the DHT.
            found = await self.routing.find(record.dataset_id)
            peers = await self.sources_for(record, [*found.connected, *providers])
        if not peers:
            raise PeerUnavailable(f"no reachable peer serves {record.dataset_id} at {record.head}")
        sources: list[ObjectSource] = [
            Libp2pSource(self.host, self.client, p, record.dataset_id) for p in peers
        ]
        event(
            logging.INFO,
            "pulling",
            **dataset_fields(self.ws, record.dataset_id, record.name),
            seq=record.sequence_number,
            sources=peers,
        )
        result = await pull_dataset(
            self.ws,
            sources,
            dataset_id=record.dataset_id,
            # A new replica is named as its publisher signed it (`node.remote.replica_names`).
            alias=replica_alias(self.ws, record.dataset_id, record.name),
            head_record=record,
            head_store=self.head_store,
        )
        if self._on_attestations is not None:  # the verdicts its sources hold
            await self._on_attestations(await fetch_from_peers(sources))
        return result

    def _resume_candidates(self) -> set[DatasetId]:
        """Datasets worth asking peers about: followed, half-pulled, behind their record."""
        out = self.follows.ids()
        staging = self.ws.root / "staging"
        with contextlib.suppress(OSError):
            for name in os.listdir(staging):
                if name.startswith("pull-"):
                    with contextlib.suppress(FbsError):
                        out.add(DatasetId.from_multibase(name[len("pull-") :]))
        for record in self.head_store.list():
            layout = DatasetLayout(self.ws.datasets_dir / record.dataset_id.as_multibase())
            with contextlib.suppress(StorageError, OSError):
                if layout.refs.get_or_none("head") != record.head:
                    out.add(record.dataset_id)
        return {d for d in out if not self.ws.keys.has(d)}

    async def probe_peers(self, peers: Sequence[str]) -> None:
        """Ask ``peers`` for the heads of `_resume_candidates` and queue what is newer."""
        dids = await self.threads.run(self._resume_candidates)
        for did in sorted(dids, key=str):
            held = await self.threads.run(self.head_store.get, did)
            local_head = None
            with contextlib.suppress(StorageError, OSError):
                layout = DatasetLayout(self.ws.datasets_dir / did.as_multibase())
                local_head = layout.refs.get_or_none("head")
            behind = held is not None and local_head != held.head
            if held is not None and behind:
                # An interrupted update: the held record itself is the target (resume).
                self.queue(held, None)
            # Half-pulled clones are resumed even when only `all` is followed.
            wanted = self.follows.is_followed(did) or self._is_staged(did)
            served = False
            for peer in peers:
                if not wanted and not behind:
                    break
                record = await self._probe(peer, did)
                if record is None:
                    continue
                served = True
                self.remember(record, peer)
                if held is not None and record.sequence_number <= held.sequence_number:
                    if record.head == held.head and did in self.wants:
                        _add_provider(self.wants[did].providers, peer)
                    continue
                if not wanted:
                    continue
                try:
                    await self.threads.run(self.head_store.check, record)
                except P2PError:
                    continue
                self.queue(record, peer)
            if not served and wanted and self.routing is not None:
                self.routing.want(did)  # nobody connected has it: look it up in the DHT

    def is_wanted(self, did: DatasetId) -> bool:
        """Whether a DHT lookup of ``did`` is still useful: wanted here and not held."""
        if self.ws.keys.has(did) or self.stopping:
            return False
        if not (self.follows.is_followed(did) or self._is_staged(did)):
            return False
        with contextlib.suppress(StorageError, OSError):
            layout = DatasetLayout(self.ws.datasets_dir / did.as_multibase())
            return layout.refs.get_or_none("head") is None
        return True

    async def on_found(self, found: Found) -> None:
        """A DHT lookup found a record and connected providers: pull it like gossip.

        Providers that serve a verified record are offered with it; the DHT's record is
        offered too (the pull asks every connected peer that serves its head).
        """
        if found.record is None:
            return
        for peer in reversed(found.connected):
            # A provider record is a claim: a peer counts as a provider once it serves
            # a verified record of the dataset.
            served = await self._probe(peer, found.dataset_id)
            if served is not None:
                await self.offer(served, peer)
        await self.offer(found.record, "")

    def _is_staged(self, did: DatasetId) -> bool:
        return (self.ws.root / "staging" / f"pull-{did.as_multibase()}").is_dir()

    async def resolve(self, did: DatasetId) -> dict[str, Any]:
        """What the network says about ``did``: best record and peers that serve it."""
        self.peers.connected = sorted(await self.threads.run(self.host.peers))
        peers = [p for p in self.peers.connected if p != self.host.peer_id]
        records = list(await asyncio.gather(*(self._probe(p, did) for p in peers)))
        best: HeadRecord | None = None
        known = self.known.get(did)
        if known is not None:
            best = known.record
        if self.routing is not None and not any(r is not None for r in records):
            # No connected peer has it: find its providers in the DHT and ask them.
            try:
                found = await self.routing.find(did)
            except P2PError:
                found = Found(did, None, False, (), ())  # the host is restarting
            fresh = [p for p in found.connected if p not in peers]
            peers += fresh
            records += await asyncio.gather(*(self._probe(p, did) for p in fresh))
            best = best or found.record  # what providers serve may raise it below
        for r in records:
            if r is not None and (best is None or r.sequence_number > best.sequence_number):
                best = r
        providers = []
        for p, r in zip(peers, records, strict=True):
            if r is not None and best is not None and r.head == best.head:
                providers.append({"peerId": p, "addrs": await self._peer_addrs(p)})
        return {
            "dataset": did.to_did_odf(),
            "record": best.to_dict() if best is not None else None,
            "providers": providers,
        }

    async def _peer_addrs(self, peer: str) -> list[str]:
        from p2p.libp2p.host import parse_peer_id

        host = self.host.libp2p_host
        pid = parse_peer_id(peer)

        async def addrs() -> list[str]:
            try:
                return [f"{a}/p2p/{peer}" for a in host.get_peerstore().addrs(pid)]
            except Exception:  # peerstore lookups raise assorted errors for unknown peers
                return []

        try:
            return await self.host.run_trio(addrs)
        except P2PError:
            return []
