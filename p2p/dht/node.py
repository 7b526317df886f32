"""`DhtNode`: content routing and signed heads for one trio run of a libp2p host.

It wraps py-libp2p's `KadDHT` in server mode, in odf's private swarm
(`p2p.dht.protocol`), with the ``/odf-head/`` validator (`p2p.dht.records`). Everything
here runs in the host's trio thread.

* Routing table: every peer the host connects to is offered to it (py-libp2p adds only
  peers that talk to it first or that a lookup returns), so bootstrap links are enough
  for lookups to reach the whole swarm.
* Providers: `provide` announces this node as a holder of a dataset to the closest
  peers of `p2p.dht.keys.provider_key`; `find_providers` asks the closest peers of that
  key (never the local store alone) and returns each holder once; `run` re-announces
  every provided dataset each `DhtSettings.reprovide_interval_s`, and stores again the
  newest head record this node put for it (storing peers that joined since learn it).
  Records expire at the storing peers after py-libp2p's 48 h (swept every 10 min), so
  a holder that stops re-announcing drops out.
* Heads: `put_head` refuses locally what a storing peer would refuse (a lower or equal
  sequence number; a different head at the same one is kept as evidence), then stores
  the record at the closest peers. `get_head` never answers from the local store
  (py-libp2p's ``get_value`` does, so a reader would keep a stale head): it asks the k
  closest peers, checks every answer (signature, DID, key), keeps the highest
  sequence number and reports whether `DhtSettings.quorum` peers answered.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import multiaddr  # type: ignore[import-untyped]
import trio
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee
from libp2p.custom_types import TProtocol
from libp2p.kad_dht.common import ALPHA, BUCKET_SIZE
from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.records.validator import NamespacedValidator
from libp2p.tools.anyio_service import background_trio_service

from fbs.did import DatasetId
from p2p.dht.evidence import EvidenceLog
from p2p.dht.keys import HEAD_NAMESPACE, head_key, provider_key
from p2p.dht.protocol import use_odf_protocol
from p2p.dht.records import HeadRecordValidator, best_record, parse_head_value
from p2p.dht.settings import DhtSettings
from p2p.errors import Equivocation, InvalidHeadRecord, StaleHead
from p2p.head_record import HeadRecord

__all__ = ["DhtNode", "HeadLookup"]

log = logging.getLogger(__name__)

#: Connections waiting to be offered to the routing table (more are dropped: a
#: lookup or the peer's own requests add it later).
_PEER_QUEUE = 256
#: Tries to add a new peer (delays 0.1, 0.2, ... 1.6 s: identify takes milliseconds on
#: a healthy link) and how many peers are being tried at once.
_OFFER_ATTEMPTS = 5
_OFFER_FIRST_DELAY_S = 0.1
_OFFERS_AT_ONCE = 8


@dataclass(frozen=True, slots=True)
class HeadLookup:
    """What the closest peers hold for one dataset's head.

    Attributes:
        record: the highest-sequence valid record among the answers (``None``: none).
        answers: peers that returned a valid record for the dataset.
        asked: peers asked.
        invalid: peers that returned bytes that do not validate.
        quorum_met: ``answers`` reached the quorum asked for.
    """

    record: HeadRecord | None
    answers: int
    asked: int
    invalid: int
    quorum_met: bool


class _PeerFeed(INotifee):
    """Queues every new connection's peer for the routing table (trio thread)."""

    def __init__(self, send: trio.MemorySendChannel[ID]) -> None:
        self._send = send

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError):
            self._send.send_nowait(conn.muxed_conn.peer_id)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        return None

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None


class DhtNode:
    """The odf DHT on ``host`` (build it before the host runs; see the module docstring)."""

    def __init__(self, host: IHost, settings: DhtSettings | None = None) -> None:
        use_odf_protocol()  # before KadDHT registers its stream handler
        self.settings = settings or DhtSettings()
        self.host = host
        #: Same-sequence, different-head pairs seen by validation (stores and reads).
        self.evidence = EvidenceLog(self.settings.max_evidence)
        validator = NamespacedValidator(
            {HEAD_NAMESPACE: HeadRecordValidator(self.evidence.add)}, strict_validation=True
        )
        self.kad = KadDHT(
            host,
            DHTMode.SERVER,
            validator=validator,
            validator_changed=True,
            protocol_prefix=TProtocol("/odf"),
            strict_validation=True,
        )
        self._provided: set[DatasetId] = set()
        #: The newest head record put per dataset (stored again with each re-provide).
        self._heads: dict[DatasetId, HeadRecord] = {}
        self._offer_limiter = trio.CapacityLimiter(_OFFERS_AT_ONCE)
        self._peers_send, self._peers_recv = trio.open_memory_channel[ID](_PEER_QUEUE)
        host.get_network().register_notifee(_PeerFeed(self._peers_send))

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run the DHT, the routing-table feed and the re-provide loop until the block ends."""
        async with background_trio_service(self.kad), trio.open_nursery() as nursery:
            for peer in self.host.get_connected_peers():
                self._peers_send.send_nowait(peer)
            nursery.start_soon(self._feed_routing_table)
            nursery.start_soon(self._reprovide_loop)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()

    async def _feed_routing_table(self) -> None:
        async with trio.open_nursery() as nursery:
            async for peer in self._peers_recv:
                nursery.start_soon(self._offer_peer, peer)

    async def _offer_peer(self, peer: ID) -> None:
        """Add ``peer`` to the routing table once identify has told its addresses.

        A listener learns the addresses of a peer that dialled it only from identify,
        a moment after the connection; until then py-libp2p refuses to add it.
        """
        async with self._offer_limiter:
            for attempt in range(_OFFER_ATTEMPTS):
                with (
                    contextlib.suppress(Exception),
                    trio.move_on_after(self.settings.query_timeout_s),
                ):
                    if await self.kad.add_peer(peer):
                        return
                await trio.sleep(_OFFER_FIRST_DELAY_S * 2**attempt)

    async def _reprovide_loop(self) -> None:
        while True:
            await trio.sleep(self.settings.reprovide_interval_s)
            for dataset_id in sorted(self._provided, key=str):
                try:
                    await self._announce(dataset_id)
                    record = self._heads.get(dataset_id)
                    if record is not None:
                        await self.put_head(record)
                except Exception as e:  # a failed round (a newer record held) goes on
                    log.warning("re-providing %s failed: %s", dataset_id, e)

    @property
    def routing_table_size(self) -> int:
        """Peers in the routing table."""
        return self.kad.get_routing_table_size()

    def routing_peers(self) -> list[str]:
        """Base58 ids of the peers in the routing table, sorted."""
        return sorted(str(p) for p in self.kad.routing_table.get_peer_ids())

    @property
    def provided(self) -> frozenset[DatasetId]:
        """Datasets this node announces (and re-announces on schedule)."""
        return frozenset(self._provided)

    # -- providers ---------------------------------------------------------------------

    async def provide(self, dataset_id: DatasetId) -> bool:
        """Announce this node as a holder of ``dataset_id`` (and re-announce it on schedule).

        Returns whether at least one peer took the record.
        """
        self._provided.add(dataset_id)
        return await self._announce(dataset_id)

    def stop_providing(self, dataset_id: DatasetId) -> None:
        """Stop re-announcing ``dataset_id``; the records expire at their holders."""
        self._provided.discard(dataset_id)
        self._heads.pop(dataset_id, None)

    async def _announce(self, dataset_id: DatasetId) -> bool:
        stored = False
        with trio.move_on_after(self.settings.lookup_timeout_s):
            stored = await self.kad.provider_store.provide(provider_key(dataset_id))
        return stored

    async def find_providers(self, dataset_id: DatasetId, count: int = 20) -> list[PeerInfo]:
        """Holders of ``dataset_id`` other than this node, each once.

        Asks the closest peers of the provider key (py-libp2p's ``find_providers``
        answers from the local store alone once it holds one record, so a reader would
        keep a holder that left and never learn a new one), adds the records this node
        stores itself, and keeps what arrived by the lookup timeout.
        """
        key = provider_key(dataset_id)
        me = self.host.get_id()
        found: dict[ID, PeerInfo] = {
            p.peer_id: p for p in self.kad.provider_store.get_providers(key)
        }
        limiter = trio.CapacityLimiter(ALPHA)

        async def ask(peer: ID) -> None:
            async with limiter:
                infos = await self._providers_from(peer, key)
            for info in infos:
                found.setdefault(info.peer_id, info)

        with trio.move_on_after(self.settings.lookup_timeout_s):
            closest = await self.kad.peer_routing.find_closest_peers_network(key)
            async with trio.open_nursery() as nursery:
                for peer in [p for p in closest if p != me][:BUCKET_SIZE]:
                    nursery.start_soon(ask, peer)
        return [p for p in found.values() if p.peer_id != me][:count]

    async def _providers_from(self, peer: ID, key: bytes) -> list[PeerInfo]:
        """One GET_PROVIDERS (empty: none, an error or the per-query timeout)."""
        store = self.kad.provider_store
        infos: list[PeerInfo] = []
        with trio.move_on_after(self.settings.query_timeout_s):
            try:
                got, _closer = await store._get_providers_from_peer_with_closers(peer, key)
                infos = list(got)
            except Exception:
                infos = []
        return infos

    # -- heads -------------------------------------------------------------------------

    def _held(self, dataset_id: DatasetId) -> HeadRecord | None:
        key = head_key(dataset_id)
        stored = self.kad.value_store.get(key.encode("utf-8"))
        if stored is None:
            return None
        try:
            return parse_head_value(key, stored.value)
        except InvalidHeadRecord:
            return None

    async def put_head(self, record: HeadRecord) -> None:
        """Store ``record`` at the closest peers of its dataset's key (and locally).

        Raises:
            InvalidHeadRecord: the signature does not verify against the record's DID.
            StaleHead: this node holds a record of a higher or equal sequence number.
            Equivocation: this node holds another head for the same sequence number
                (the pair is kept in `evidence`).
        """
        record.verify()
        held = self._held(record.dataset_id)
        if held is not None and held != record:
            if held.sequence_number == record.sequence_number:
                self.evidence.add(held, record)
                raise Equivocation(
                    f"{record.dataset_id} has another head at sequence {record.sequence_number}",
                    held,
                    record,
                )
            if held.sequence_number > record.sequence_number:
                raise StaleHead(
                    f"head record for {record.dataset_id} at sequence "
                    f"{record.sequence_number} is older than the held one "
                    f"({held.sequence_number})"
                )
        newest = self._heads.get(record.dataset_id)
        provided = record.dataset_id in self._provided
        if provided and (newest is None or newest.sequence_number <= record.sequence_number):
            self._heads[record.dataset_id] = record
        with trio.move_on_after(self.settings.lookup_timeout_s):
            await self.kad.put_value(head_key(record.dataset_id), record.to_json())

    async def get_head(self, dataset_id: DatasetId, quorum: int | None = None) -> HeadLookup:
        """Ask the closest peers for ``dataset_id``'s head record; never the local store."""
        need = self.settings.quorum if quorum is None else quorum
        key = head_key(dataset_id)
        key_bytes = key.encode("utf-8")
        me = self.host.get_id()
        peers: list[ID] = []
        with trio.move_on_after(self.settings.lookup_timeout_s):
            found = await self.kad.peer_routing.find_closest_peers_network(key_bytes)
            peers = [p for p in found if p != me][:BUCKET_SIZE]
        answers: list[HeadRecord] = []
        invalid = [0]
        limiter = trio.CapacityLimiter(ALPHA)

        async def ask(peer: ID) -> None:
            async with limiter:
                value = await self._value_from(peer, key_bytes)
            if value is None:
                return
            try:
                answers.append(parse_head_value(key, value))
            except InvalidHeadRecord:
                invalid[0] += 1

        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(ask, peer)
        best = best_record(answers, self.evidence.add)
        record = answers[best] if best >= 0 else None
        return HeadLookup(record, len(answers), len(peers), invalid[0], len(answers) >= need)

    async def _value_from(self, peer: ID, key: bytes) -> bytes | None:
        """One GET_VALUE (``None``: no value, an error or the per-query timeout)."""
        value: object = None
        with trio.move_on_after(self.settings.query_timeout_s):
            try:
                value = await self.kad.value_store._get_from_peer(peer, key)
            except Exception:
                return None
        return value if isinstance(value, bytes) else None
