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

The attestations of the blocks held come along from a node URL (`node.usecases.fetch`)
and from the libp2p peers pulled from (`node.remote.attestations`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.usecases.fetch import FetchOptions, OnProgress, fetch_with_attestations

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from node.remote.network import NetworkView
    from p2p.sync import PullResult
    from storage.workspace import Workspace

__all__ = ["ReplicaUpdate", "update_replica"]


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
    from node.remote.attestations import import_attestations
    from node.remote.network import ask_network
    from p2p.errors import PeerUnavailable, SourceUnreachable, StaleHead

    entry = ws.resolve(ref)
    result: PullResult | None = None
    brought = 0
    alias_error: PeerUnavailable | SourceUnreachable | None = None
    if url is not None:
        try:
            options = FetchOptions(url, entry.alias, (), require_signed, False)
            result, brought = fetch_with_attestations(ws, options, on_progress)
        except StaleHead:
            # The alias has nothing newer (the network may); attestations made since may.
            brought = import_attestations(ws, url)
        except (PeerUnavailable, SourceUnreachable) as e:
            alias_error = e  # the network may still serve it
    try:
        view = asyncio.run(ask_network(ws, entry.id))
    except PeerUnavailable:
        if url is None:
            raise
        view = None  # a node that does not answer: what the alias said stands
    newer = _newer(ws, entry.id, view)
    if newer is not None:
        result, from_peers = _pull_network(ws, entry.alias, newer, require_signed, on_progress)
        brought += from_peers
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
) -> tuple[PullResult, int]:
    """The pull from the peers ``view`` names, and the attestations they hold (accepted)."""
    from node.remote.attestations import import_from_peers
    from node.remote.resolve import open_libp2p_sources
    from p2p.sync import pull_dataset

    assert view.record is not None
    record = view.record

    async def run() -> tuple[PullResult, int]:
        async with open_libp2p_sources(record.dataset_id, list(view.addrs)) as remote:
            result = await pull_dataset(
                ws,
                remote.sources,
                dataset_id=record.dataset_id,
                alias=alias,
                head_record=record,
                require_signed=require_signed,
                on_progress=on_progress,
            )
            return result, await import_from_peers(ws, remote.sources)

    return asyncio.run(run())


def _up_to_date(ws: Workspace, did: DatasetId, alias: str) -> PullResult:
    from p2p.sync import PullResult

    head = ws.get(did).head()
    assert head is not None  # a dataset of the workspace has a Seed at least
    return PullResult(did, alias, head, head)
