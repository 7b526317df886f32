"""`Libp2pSource`: the `p2p.sync.ObjectSource` of one peer over ``/odf/exchange/1.0.0``.

asyncio-facing: each call hops to the host's trio thread with `P2PHost.run_trio` and
runs the matching `ExchangeClient` coroutine there; bytes are hashed and written in
the trio thread, so no payload crosses the bridge. The exchange client verifies what
it can (block links, object size and hash) and charges the peer in the host's
`p2p.peers.PeerScores`; `p2p.sync.pull_dataset` verifies everything again on its side.

Typical use by the daemon::

    client = ExchangeClient(host)
    sources = [Libp2pSource(host, client, peer, dataset_id) for peer in peers_with_it]
    result = await pull_dataset(ws, sources, dataset_id=dataset_id, head_record=record)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, TypeVar

from fbs.did import DatasetId
from fbs.multiformats import Multihash
from p2p.errors import InvalidHeadRecord, NotFoundOnPeer, PeerMisbehaved, RemoteError
from p2p.head_record import HeadRecord
from p2p.libp2p.exchange import ExchangeClient, ObjectKind, RemoteHead
from p2p.libp2p.host import P2PHost
from p2p.peers import Offence

__all__ = ["BUSY_RETRIES", "DEFAULT_PARALLEL_OBJECTS", "MAX_BUSY_WAIT_S", "Libp2pSource"]

T = TypeVar("T")

#: Times one request is repeated after the peer answered ``busy`` (then the error
#: goes to `p2p.sync.pull_dataset`, which tries other sources, and to the daemon's
#: jittered retries).
BUSY_RETRIES: Final = 5
#: Longest wait after one ``busy`` (the peer's hint is honoured up to this).
MAX_BUSY_WAIT_S: Final = 10.0

#: Objects downloaded at once from one peer. py-libp2p's receive path (noise, yamux)
#: runs in the one trio thread of the local host and is CPU-bound: more streams per
#: peer only contend there, while a second one keeps the pipe busy during a stream's
#: setup and the last chunks of the previous object. Several peers split the objects.
DEFAULT_PARALLEL_OBJECTS: Final = 2


class Libp2pSource:
    """One peer as a source of one dataset (see the module docstring).

    Args:
        host: the started host.
        client: the exchange client (shared by every source of the host).
        peer: the peer id (base58).
        dataset_id: the dataset to pull.
        parallel_objects: objects `p2p.sync.pull_dataset` downloads from this peer at
            once.
    """

    def __init__(
        self,
        host: P2PHost,
        client: ExchangeClient,
        peer: str,
        dataset_id: DatasetId,
        *,
        parallel_objects: int = DEFAULT_PARALLEL_OBJECTS,
    ) -> None:
        self.host = host
        self.client = client
        self.peer = peer
        self.dataset_id = dataset_id
        self.parallel_objects = parallel_objects

    def __repr__(self) -> str:
        return f"Libp2pSource({self.peer!r}, {self.dataset_id})"

    @property
    def name(self) -> str:
        """``libp2p:<peer id>``."""
        return f"libp2p:{self.peer}"

    async def _remote_head(self) -> RemoteHead | None:
        try:
            return await _patient(
                lambda: self.host.run_trio(self.client.get_head, self.peer, self.dataset_id)
            )
        except NotFoundOnPeer:
            return None

    async def get_head(self) -> Multihash | None:
        """The peer's head of the dataset (``None``: it does not have the dataset).

        Raises:
            TransferError / PeerUnavailable / PeerMisbehaved: the request failed.
        """
        remote = await self._remote_head()
        return None if remote is None else remote.head

    async def get_head_record(self) -> HeadRecord | None:
        """The signed head record the peer serves with its head, verified (or ``None``).

        Raises:
            PeerMisbehaved: a record that does not verify or is for another dataset
                (the peer is penalised).
            TransferError / PeerUnavailable: the request failed.
        """
        remote = await self._remote_head()
        if remote is None or remote.record is None:
            return None
        try:
            record = HeadRecord.from_json(remote.record)
        except InvalidHeadRecord as e:
            self.client.scores.penalise(self.peer, Offence.BAD_BYTES, f"head record: {e}")
            raise PeerMisbehaved(f"peer {self.peer} served an invalid head record: {e}") from e
        if record.dataset_id != self.dataset_id:
            self.client.scores.penalise(
                self.peer, Offence.BAD_BYTES, "head record of another dataset"
            )
            raise PeerMisbehaved(f"peer {self.peer} served a head record of another dataset")
        return record

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        """One batch of raw blocks, newest first, starting with ``head`` (see `ObjectSource`).

        Raises:
            PeerUnavailable: the peer lacks the dataset or the block (`NotFoundOnPeer`
                is a `TransferError`; both are what `pull_dataset` expects).
            PeerMisbehaved: a block that does not hash to its link.
        """
        return await _patient(
            lambda: self.host.run_trio(
                self.client.get_blocks_batch, self.peer, self.dataset_id, head, stop_at
            )
        )

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        """Stream object ``h`` into the new file ``dest_path``; returns its SHA3-256 digest.

        The digest returned was computed over exactly the bytes written, and equals
        ``h.digest`` (a mismatch raises instead and removes the file).

        Raises:
            PeerMisbehaved: wrong bytes, or a size other than ``expected_size``.
            TransferError / PeerUnavailable: the transfer failed.
        """
        return await _patient(
            lambda: self.host.run_trio(
                _fetch, self.client, self.peer, self.dataset_id, kind, h, dest_path, expected_size
            )
        )


async def _patient(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, repeated after ``busy`` answers: the peer's hint, jittered x1-2."""
    for attempt in range(BUSY_RETRIES + 1):
        try:
            return await call()
        except RemoteError as e:
            if e.code != "busy" or attempt == BUSY_RETRIES:
                raise
            hint = e.retry_after_s if e.retry_after_s is not None else 0.5
            await asyncio.sleep(min(MAX_BUSY_WAIT_S, hint * (1 + random.random())))
    raise AssertionError("unreachable")


async def _fetch(
    client: ExchangeClient,
    peer: str,
    dataset_id: DatasetId,
    kind: ObjectKind,
    h: Multihash,
    dest_path: Path,
    expected_size: int | None,
) -> bytes:
    return await client.fetch_object(
        peer, dataset_id, kind, h, dest_path, expected_size=expected_size
    )
