"""Updating a replica from wherever its publisher's newer heads can be found.

A replica (`node.ownership`: a dataset whose key this workspace does not hold) never
grows here; ``odf pull DS`` brings its publisher's blocks instead, from:

1. its pull alias, if it was cloned from a URL (`node.remote.aliases`);
2. the running node (``odf node run``): the newest signed head it heard for the DID and
   the peers that serve it (`node.remote.network`).

It reports "up to date" only when no newer signed head is known: a newer head that was
heard but that no reachable source serves is an error (`SourceUnreachable`, exit 7),
never "up to date".
Everything goes through the one verified receive path (`p2p.sync.pull_dataset`).

The attestations of the blocks held come along (`import_attestations`): the source's
``GET {dataset}/attestations``, each attestation checked by the local store's rules
(signature, a block of the local chain) as any other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.usecases.fetch import FetchOptions, OnProgress, fetch

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from node.remote.network import NetworkView
    from p2p.sync import PullResult
    from storage.workspace import Workspace

__all__ = [
    "ReplicaUpdate",
    "accept_attestations",
    "attestations_url",
    "import_attestations",
    "update_replica",
]

#: Largest attestation document read from a source.
MAX_ATTESTATIONS_DOC_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReplicaUpdate:
    """What updating a replica did.

    Attributes:
        synced: the transfer (``old_head == new_head``: up to date).
        attestations: attestations brought from the source and accepted.
    """

    synced: PullResult
    attestations: int = 0


def update_replica(
    ws: Workspace,
    ref: str,
    url: str | None,
    *,
    require_signed: bool = False,
    on_progress: OnProgress = None,
) -> ReplicaUpdate:
    """Bring replica ``ref`` to the newest signed head known (see the module docstring).

    Raises:
        SourceUnreachable: a newer signed head is known and no source serves it.
        PeerUnavailable: nowhere to look (no pull alias and no running node).
        P2PError / StorageError: see `p2p.sync.pull_dataset`.
    """
    from node.remote.network import ask_network
    from p2p.errors import PeerUnavailable, StaleHead

    entry = ws.resolve(ref)
    result: PullResult | None = None
    alias_error: PeerUnavailable | None = None
    if url is not None:
        try:
            options = FetchOptions(url, entry.alias, (), require_signed, False)
            result = fetch(ws, options, on_progress)
        except StaleHead:
            pass  # the alias has nothing newer; the network may
        except PeerUnavailable as e:
            alias_error = e
    view = asyncio.run(ask_network(ws, entry.id))
    newer = _newer(ws, entry.id, view)
    if newer is not None:
        result = _pull_network(ws, entry.alias, newer, require_signed, on_progress)
    if result is None:
        if alias_error is not None:
            raise alias_error
        if url is None and view is None:
            raise PeerUnavailable(
                f"{entry.alias} is a replica of {entry.id.to_did_odf()} with no pull alias, "
                "and no node is running to find its publisher's newer heads (start "
                "`odf node run`, or pull it from a node URL)"
            )
        result = _up_to_date(ws, entry.id, entry.alias)
    brought = import_attestations(ws, url) if url is not None else 0
    return ReplicaUpdate(result, brought)


def _newer(ws: Workspace, did: DatasetId, view: NetworkView | None) -> NetworkView | None:
    """``view`` if it knows a signed head above the local head, else ``None``.

    Raises:
        SourceUnreachable: that head was heard but no reachable peer serves it (exit 7:
            a later try may find one).
    """
    from p2p.errors import SourceUnreachable

    if view is None or view.record is None:
        return None
    state = ws.get(did).state()
    if state is not None and view.record.sequence_number <= state.sequence_number:
        return None
    if not view.addrs:
        record = view.record
        raise SourceUnreachable(
            f"{ws.resolve(did).alias}: its publisher signed a newer head (block "
            f"{record.sequence_number}, {record.head.short()}) but no reachable peer "
            "serves it yet; try again later"
        )
    return view


def _pull_network(
    ws: Workspace, alias: str, view: NetworkView, require_signed: bool, on_progress: OnProgress
) -> PullResult:
    from node.remote.resolve import open_libp2p_sources
    from p2p.sync import pull_dataset

    assert view.record is not None
    record = view.record

    async def run() -> PullResult:
        async with open_libp2p_sources(record.dataset_id, list(view.addrs)) as remote:
            return await pull_dataset(
                ws,
                remote.sources,
                dataset_id=record.dataset_id,
                alias=alias,
                head_record=record,
                require_signed=require_signed,
                on_progress=on_progress,
            )

    return asyncio.run(run())


def _up_to_date(ws: Workspace, did: DatasetId, alias: str) -> PullResult:
    from p2p.sync import PullResult

    head = ws.get(did).head()
    assert head is not None  # a dataset of the workspace has a Seed at least
    return PullResult(did, alias, head, head)


def attestations_url(url: str) -> str | None:
    """Where a node serving dataset URL ``url`` lists its attestations (``None``: not a
    node URL, e.g. an S3 repository)."""
    low = url.lower()
    if low.startswith(("odf+http://", "odf+https://")):
        url, low = url[4:], low[4:]
    if not low.startswith(("http://", "https://")):
        return None
    return url.rstrip("/") + "/attestations"


def import_attestations(ws: Workspace, url: str) -> int:
    """Bring the attestations the node at dataset URL ``url`` holds, each checked by the
    local store's rules; the number accepted. A source that lists none, or cannot, adds
    nothing (attestations are evidence to add, never needed for the data)."""
    source = attestations_url(url)
    if source is None:
        return 0
    docs = asyncio.run(_get_attestations(source))
    return accept_attestations(ws, docs)


async def _get_attestations(url: str) -> list[object]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=30.0)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as resp,
        ):
            if resp.status != 200:
                return []
            body = await resp.content.read(MAX_ATTESTATIONS_DOC_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError):
        return []
    if len(body) > MAX_ATTESTATIONS_DOC_BYTES:
        return []
    import json

    try:
        doc = json.loads(body)
    except ValueError:
        return []
    items = doc.get("attestations") if isinstance(doc, dict) else None
    return list(items) if isinstance(items, list) else []


def accept_attestations(ws: Workspace, docs: list[object]) -> int:
    """Take each attestation of ``docs`` (wire JSON objects) the local store accepts
    (`p2p.attestation_store.AttestationStore.accept`); the number newly accepted."""
    from p2p.attestation import Attestation
    from p2p.attestation_store import AcceptStatus, AttestationStore
    from p2p.errors import P2PError

    store = AttestationStore.for_workspace(ws)
    accepted = 0
    for doc in docs:
        try:
            result = store.accept(Attestation.from_dict(doc))
        except (P2PError, ValueError, TypeError, KeyError):
            continue  # a duplicate, another history's block, a bad signature: not taken
        accepted += result.status is AcceptStatus.ACCEPTED
    return accepted
