"""Validators' attestations brought from the node a dataset was pulled from.

An odf-node serves the attestations it holds for a dataset at
``GET {dataset URL}/attestations`` (`node.http.attestations`). A clone or update from a
node URL brings them too, so that ``odf verify --trust N`` judges a replica by the same
evidence as its source. Nothing is taken on the source's word: each attestation goes
through the local store's rules (`p2p.attestation_store.AttestationStore.accept`:
signature, a data block of the local chain, one verdict per validator and block), and a
source that lists none, or cannot, adds nothing (attestations are evidence added to the
data, never needed to read it).

A replica pulled from libp2p peers asks each of them over ``/odf/exchange/attestations/1.0.0``
(`p2p.libp2p.exchange.attestations`, `import_from_peers`) with the same rules.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

    from p2p.attestation import Attestation
    from p2p.sync import ObjectSource
    from storage.workspace import Workspace

__all__ = [
    "accept_attestations",
    "accept_verified",
    "attestations_url",
    "fetch_from_peers",
    "import_attestations",
    "import_from_peers",
]

#: Largest attestation document read from a source.
MAX_ATTESTATIONS_DOC_BYTES: Final = 64 * 1024 * 1024
#: Bound on the request for them (seconds).
TIMEOUT_S: Final = 30.0


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

    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
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
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    items = doc.get("attestations") if isinstance(doc, dict) else None
    return list(items) if isinstance(items, list) else []


async def import_from_peers(ws: Workspace, sources: Sequence[ObjectSource]) -> int:
    """Bring the attestations each libp2p peer among ``sources`` holds for its dataset
    (`fetch_from_peers`), each checked by the local store's rules; the number accepted."""
    found = await fetch_from_peers(sources)
    return await asyncio.to_thread(accept_verified, ws, found)


async def fetch_from_peers(sources: Sequence[ObjectSource]) -> list[Attestation]:
    """The attestations each libp2p peer among ``sources`` holds for its dataset, each
    signature checked (`p2p.libp2p.exchange.attestations`). A peer that cannot answer
    (gone, an older node without the protocol, a broken answer) adds nothing."""
    from p2p.errors import P2PError
    from p2p.libp2p.exchange.attestations import peer_attestations
    from p2p.libp2p.source import Libp2pSource

    found: list[Attestation] = []
    for source in sources:
        if not isinstance(source, Libp2pSource):
            continue
        try:
            found += await peer_attestations(source.host, source.peer, source.dataset_id)
        except P2PError:
            continue
    return found


def accept_verified(ws: Workspace, attestations: Sequence[Attestation]) -> int:
    """Take each of ``attestations`` the local store accepts; the number newly accepted."""
    from p2p.attestation_store import AcceptStatus, AttestationStore
    from p2p.errors import P2PError

    store = AttestationStore.for_workspace(ws)
    accepted = 0
    for att in attestations:
        try:
            result = store.accept(att)
        except P2PError:
            continue  # a duplicate, another history's block: not taken
        accepted += result.status is AcceptStatus.ACCEPTED
    return accepted


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
