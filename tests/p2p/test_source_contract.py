"""The `ObjectSource` contract, kept by every source: memory, libp2p and HTTP.

Each test runs against the socket-free `MemorySource`, a `Libp2pSource` over two real
libp2p hosts on loopback, and an `HttpSource` against the node's real aiohttp app, all
serving the same dataset. What `p2p.sync.pull_dataset` relies on is asserted here once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetId
from fbs.multiformats import Multihash
from p2p.errors import NotFoundOnPeer, PeerMisbehaved, PeerUnavailable
from p2p.http.source import HttpSource, dataset_base_url
from p2p.libp2p.exchange import ExchangeClient, ExchangeServer
from p2p.libp2p.host import P2PHost
from p2p.libp2p.source import Libp2pSource
from p2p.memory_source import MemorySource
from p2p.sync import ObjectKind, ObjectSource, pull_dataset
from storage.dataset import Dataset
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace, serve_workspace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: "The source does not have it": `PeerUnavailable` is what the Protocol names; the
#: libp2p source reports the peer's not_found answer as `NotFoundOnPeer` (a
#: `TransferError`). `pull_dataset` treats both as "try another source".
NOT_FOUND = (PeerUnavailable, NotFoundOnPeer)
KINDS: tuple[ObjectKind, ...] = ("data", "checkpoint")
NOWHERE = Multihash.sha3_256(b"held by no one")


@dataclass
class Served:
    """A dataset, a source serving it, and a source of the same peer lacking a dataset."""

    ds: Dataset
    did: DatasetId
    source: ObjectSource
    without: ObjectSource


@contextlib.asynccontextmanager
async def _libp2p(ws: Workspace, did: DatasetId) -> AsyncIterator[tuple[Libp2pSource, ...]]:
    server, client_host = P2PHost(), P2PHost()
    ExchangeServer(ws).register(server)
    async with server, client_host:
        await client_host.connect(server.addrs[0])
        client = ExchangeClient(client_host)
        other = DatasetId.new_seeded(b"\x01" * 32)
        yield (
            Libp2pSource(client_host, client, server.peer_id, did),
            Libp2pSource(client_host, client, server.peer_id, other),
        )


@contextlib.asynccontextmanager
async def _http(ws: Workspace) -> AsyncIterator[tuple[HttpSource, ...]]:
    async with serve_workspace(ws) as url, aiohttp.ClientSession() as session:
        yield (
            HttpSource(dataset_base_url(url, "prices"), session, read_timeout_s=10),
            HttpSource(dataset_base_url(url, "nope"), session, read_timeout_s=10),
        )


@pytest.fixture(params=["memory", "libp2p", "http"])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Served]:
    ws = new_workspace(tmp_path / "src")
    # Seed, schema and 3 slices with checkpoints: 5 blocks, more than one memory batch.
    ds = make_dataset(ws, "prices", tmp_path / "files", 3, checkpoints=True)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    if request.param == "memory":
        yield Served(ds, did, MemorySource.of_dataset(ds), MemorySource(None))
        return
    transport = _libp2p(ws, did) if request.param == "libp2p" else _http(ws)
    async with transport as (source, without):
        yield Served(ds, did, source, without)


def chain_of(ds: Dataset) -> list[Multihash]:
    """The dataset's block hashes, newest first."""
    return [h for h, _raw, _block in ds.iter_blocks(ds.head())]


async def walk(source: ObjectSource, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
    """Every block from ``head`` back, asking again from each batch's oldest parent."""
    out: list[bytes] = []
    h: Multihash | None = head
    while h is not None and h != stop_at:
        batch = await source.get_blocks(h, stop_at)
        assert batch, "a batch is never empty"
        assert block_hash(batch[0]) == h, "a batch starts with the block asked for"
        out += batch
        h = decode_block(batch[-1]).prev_block_hash
    return out


async def test_head(served: Served) -> None:
    assert await served.source.get_head() == served.ds.head()
    assert await served.without.get_head() is None
    assert served.source.name and isinstance(served.source.name, str)


async def test_blocks_newest_first_in_batches(served: Served) -> None:
    chain = chain_of(served.ds)
    assert len(chain) == 5
    got = await walk(served.source, chain[0], None)
    assert [block_hash(raw) for raw in got] == chain
    assert got[0] == served.ds.layout.blocks.get(chain[0])  # the stored bytes, unchanged


@pytest.mark.parametrize("stop", [1, 2, 4])
async def test_blocks_stop_before_stop_at(served: Served, stop: int) -> None:
    chain = chain_of(served.ds)
    got = await walk(served.source, chain[0], chain[stop])
    assert [block_hash(raw) for raw in got] == chain[:stop]
    assert decode_block(got[-1]).prev_block_hash == chain[stop]


async def test_missing_block_is_not_found(served: Served) -> None:
    with pytest.raises(NOT_FOUND):
        await served.source.get_blocks(NOWHERE, None)


@pytest.mark.parametrize("kind", KINDS)
async def test_object_of_each_kind(served: Served, kind: ObjectKind, tmp_path: Path) -> None:
    store = served.ds.layout.data if kind == "data" else served.ds.layout.checkpoints
    hashes = list(store.iter_hashes())
    assert len(hashes) == 3
    for h in hashes:
        body = store.get(h)
        dest = tmp_path / f"{kind}-{h.to_multibase()}"
        digest = await served.source.get_object(kind, h, dest, expected_size=len(body))
        assert dest.read_bytes() == body
        assert digest is None or digest == h.digest  # a digest is of what was written


async def test_missing_object_is_not_found_and_leaves_no_file(
    served: Served, tmp_path: Path
) -> None:
    data_hash = next(iter(served.ds.layout.data.iter_hashes()))
    # Absent everywhere, or present only as the other kind: not served either way.
    cases: list[tuple[ObjectKind, Multihash]] = [
        ("data", NOWHERE),
        ("checkpoint", NOWHERE),
        ("checkpoint", data_hash),
    ]
    for kind, h in cases:
        dest = tmp_path / f"{kind}-{h.to_multibase()}"
        with pytest.raises(NOT_FOUND):
            await served.source.get_object(kind, h, dest)
        assert not dest.exists()


async def test_object_larger_than_expected_is_refused(served: Served, tmp_path: Path) -> None:
    h = next(iter(served.ds.layout.data.iter_hashes()))
    size = served.ds.layout.data.size(h)
    dest = tmp_path / "q"
    with pytest.raises(PeerMisbehaved):
        await served.source.get_object("data", h, dest, expected_size=size - 1)
    assert not dest.exists()  # refused from the declared size, before any byte


async def test_pull_dataset_gives_a_dataset_that_verifies(served: Served, tmp_path: Path) -> None:
    dst = new_workspace(tmp_path / "dst")
    result = await pull_dataset(dst, served.source, dataset_id=served.did)
    assert result.created and result.new_head == served.ds.head()
    assert result.blocks_fetched == 5 and result.objects_fetched == 6
    copy = dst.get(served.did)
    report = verify_integrity(copy)
    assert report.ok, report
    for kind in ("data", "checkpoints"):
        mine, theirs = getattr(copy.layout, kind), getattr(served.ds.layout, kind)
        assert sorted(mine.iter_hashes()) == sorted(theirs.iter_hashes())
    # Pulled again: up to date, nothing fetched.
    again = await pull_dataset(dst, served.source, dataset_id=served.did)
    assert again.up_to_date and again.objects_fetched == 0
