"""``odf pull``'s remote references (node URL, peer address, dataset DID) opened as sources.

`resolve_remote` gives `p2p.sync.pull_dataset` its sources: a URL gives one
`p2p.http.source.HttpSource`; a peer address, or a DID resolved through the running
node's peers (``GET /api/network/{did}``), gives `p2p.libp2p.source.Libp2pSource` s over
a temporary libp2p host. Used by `node.usecases.pull` and `node.usecases.fetch`; it
imports neither them nor the daemon (only its run file, `node.runfile`), and
loads nothing beyond the standard library until called (CLI start-up).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from node.errors import UsageError

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from p2p.head_record import HeadRecord
    from p2p.sync import ObjectSource
    from storage.workspace import Workspace

__all__ = [
    "RemoteRef",
    "ResolvedRemote",
    "default_alias_for_url",
    "open_libp2p_sources",
    "parse_remote_ref",
    "resolve_remote",
]


def default_alias_for_url(url: str) -> str | None:
    """The local alias a fetch from ``url`` uses by default: the URL's last path segment.

    ``None`` when that segment is a DID (the clone is then named by its DID) or not a
    valid dataset name.
    """
    from fbs.did import DatasetId, DatasetName
    from fbs.errors import FbsError

    segments = [unquote(s) for s in urlsplit(url).path.split("/") if s]
    if not segments:
        return None
    last = segments[-1]
    try:
        DatasetId.from_multibase(last)
        return None
    except FbsError:
        pass
    try:
        DatasetName(last)
    except FbsError:
        return None
    return last


@dataclass(frozen=True, slots=True)
class RemoteRef:
    """A parsed remote reference.

    Attributes:
        kind: ``"http"`` (node or dataset URL), ``"libp2p"`` (peer multiaddr), or
            ``"did"`` (resolved through the running node's peers).
        url: the URL (http).
        addr: the peer multiaddr with ``/p2p/<id>`` (libp2p).
        dataset: the dataset named with the reference, if any (alias or DID text).
        smart: an ``odf+http(s)://`` URL: speak the Smart Transfer Protocol.
    """

    kind: str
    url: str = ""
    addr: str = ""
    dataset: str | None = None
    smart: bool = False


def parse_remote_ref(ref: str, dataset: str | None = None) -> RemoteRef:
    """Parse ``ref`` for `resolve_remote`.

    Forms: ``http(s)://host:port[/dataset]`` (``odf+`` prefix allowed),
    ``/ip4/…/tcp/…/p2p/<peer>[/did:odf:…]``, ``did:odf:…``.

    Raises:
        UsageError: none of these forms, or a libp2p address without a dataset DID.
    """
    from fbs.did import DatasetId
    from fbs.errors import FbsError

    text = ref.strip()
    low = text.lower()
    smart = low.startswith(("odf+http://", "odf+https://"))
    if smart:
        text, low = text[4:], low[4:]
    if low.startswith(("http://", "https://")):
        return RemoteRef("http", url=text, dataset=dataset, smart=smart)
    if text.startswith("did:"):
        try:
            did = DatasetId.from_did(text)
        except FbsError as e:
            raise UsageError(f"invalid dataset id {text!r}: {e}") from None
        return RemoteRef("did", dataset=did.to_did_odf())
    if text.startswith("/"):
        addr, sep, did_text = text.partition("/did:")
        ds = f"did:{did_text}" if sep else dataset
        if "/p2p/" not in addr:
            raise UsageError(f"a peer address needs /p2p/<peer id>: {ref!r}")
        if ds is None or not ds.startswith("did:"):
            raise UsageError("pulling from a peer address needs the dataset DID")
        return RemoteRef("libp2p", addr=addr, dataset=ds)
    raise UsageError(f"not a node URL, peer address or dataset DID: {ref!r}")


@dataclass(slots=True)
class ResolvedRemote:
    """Sources for `p2p.sync.pull_dataset` (valid inside `resolve_remote`'s block).

    Attributes:
        sources: the object sources.
        dataset_id: the dataset, when known.
        head_record: the best signed head record the sources offered (or ``None``).
        alias: a suggested local alias (the URL's last segment), if any.
    """

    sources: list[ObjectSource]
    dataset_id: DatasetId | None = None
    head_record: HeadRecord | None = None
    alias: str | None = None


@contextlib.asynccontextmanager
async def resolve_remote(
    ref: str, ws: Workspace, *, dataset: str | None = None, timeout_s: float = 30.0
) -> AsyncIterator[ResolvedRemote]:
    """Open the sources named by ``ref`` (see `parse_remote_ref`) for a pull into ``ws``.

    A URL gives one `p2p.http.source.HttpSource`; a peer address, or a DID resolved
    through the running node's peers (``GET /api/network/{did}``), gives
    `p2p.libp2p.source.Libp2pSource` s over a temporary libp2p host (ephemeral identity,
    loopback listener) that lives as long as the block. Example::

        async with resolve_remote(ref, ws) as remote:
            await pull_dataset(ws, remote.sources, dataset_id=remote.dataset_id,
                               head_record=remote.head_record)

    Raises:
        UsageError: an unparsable reference.
        NodeNotRunning: a DID but no running node for ``ws``.
        PeerUnavailable: nobody reachable serves the dataset.
    """
    from fbs.did import DatasetId

    parsed = parse_remote_ref(ref, dataset)
    if parsed.kind == "http":
        async with _http_remote(parsed) as remote:
            yield remote
        return
    assert parsed.dataset is not None
    did = DatasetId.from_did(parsed.dataset)
    if parsed.kind == "libp2p":
        addrs = [parsed.addr]
    else:
        addrs = await _provider_addrs(ws, did, timeout_s)
    async with open_libp2p_sources(did, addrs) as remote:
        yield remote


@contextlib.asynccontextmanager
async def _http_remote(parsed: RemoteRef) -> AsyncIterator[ResolvedRemote]:
    """One HTTP (simple or smart protocol) source of a URL reference."""
    import aiohttp

    from p2p.http.source import HttpSource, dataset_base_url
    from p2p.smart_transfer.client import SmartSource

    url = parsed.url
    if parsed.dataset is not None:
        url = dataset_base_url(url, parsed.dataset)
    async with aiohttp.ClientSession() as session:
        src = SmartSource(url, session) if parsed.smart else HttpSource(url, session)
        try:
            record = await src.get_head_record()
            yield ResolvedRemote(
                [src],
                record.dataset_id if record is not None else None,
                record,
                default_alias_for_url(url),
            )
        finally:
            if isinstance(src, SmartSource):
                await src.aclose()


async def _provider_addrs(ws: Workspace, did: DatasetId, timeout_s: float) -> list[str]:
    """Addresses of the peers the running node knows to serve ``did`` (two per peer)."""
    import aiohttp

    from node.runfile import NodeNotRunning, read_run_info
    from p2p.errors import PeerUnavailable

    info = read_run_info(ws)
    if info is None:
        raise NodeNotRunning("resolving a dataset id needs a running node (odf node run)")
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        url = f"{info.http_url}/api/network/{did.to_did_odf()}"
        try:
            async with session.get(url) as resp:
                doc = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise PeerUnavailable(f"cannot ask the running node: {e}") from None
    addrs = [a for p in doc.get("providers", []) for a in p.get("addrs", [])[:2]]
    if not addrs:
        raise PeerUnavailable(f"no peer of the running node serves {did}")
    return addrs


@contextlib.asynccontextmanager
async def open_libp2p_sources(did: DatasetId, addrs: list[str]) -> AsyncIterator[ResolvedRemote]:
    """Libp2p sources of ``did`` at ``addrs`` over a temporary host, with the newest head
    record any of them offers."""
    from p2p.errors import PeerMisbehaved, PeerUnavailable, TransferError
    from p2p.libp2p.exchange import ExchangeClient
    from p2p.libp2p.host import HostConfig, P2PHost
    from p2p.libp2p.source import Libp2pSource

    host = P2PHost(HostConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",)))
    await host.start()
    try:
        client = ExchangeClient(host)
        peers: list[str] = []
        for addr in addrs:
            try:
                peer = await host.connect(addr)
            except PeerUnavailable:
                continue
            if peer not in peers:
                peers.append(peer)
        if not peers:
            raise PeerUnavailable(f"cannot reach any peer serving {did}")
        sources = [Libp2pSource(host, client, p, did) for p in peers]
        best: HeadRecord | None = None
        for s in sources:
            with contextlib.suppress(TransferError, PeerMisbehaved, PeerUnavailable):
                r = await s.get_head_record()
                if r is not None and (best is None or r.sequence_number > best.sequence_number):
                    best = r
        yield ResolvedRemote(list(sources), did, best, None)
    finally:
        await host.stop()
