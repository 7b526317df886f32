"""HTTP routes for validator attestations (aiohttp), added to the node's API app.

====================================  =====================================================
``GET  {ds}/attestations[?block=H]``  the attestations held for the dataset's current
                                      chain (or one block), its dispute status, the number
                                      queued; JSON
``POST {ds}/attestations``            offer attestations: one canonical attestation JSON
                                      object, or a JSON array of at most
                                      `MAX_POST_ATTESTATIONS` attestation objects
====================================  =====================================================

``{ds}`` is ``/{dataset}`` or ``/{account}/{dataset}`` (alias or DID multibase, as in
`node.http.api`) and also ``/api/attestations/{dataset}`` (same handlers). The node API's
catch-all route shadows routes registered after it: pass `attestation_routes` as
`node.http.api.create_app`'s ``extra_routes``, with `attach_attestations` as its
``setup``.

POST of one object answers 201 (accepted), 202 (queued: the block is above the local
head), 409 (duplicate: a replay or the same verdict re-signed), 422 (rejected: unknown
dataset, block not in the chain...) or 400 (malformed, bad signature, or an
attestation of another dataset than the path's). An array answers 200 with one result
per item, in order: ``{"status": "accepted"|"queued"|"duplicate"|"rejected"|"invalid",
"error"?: text}``. Nothing is trusted for being posted: every attestation goes through
`p2p.attestation_store.AttestationStore.accept`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, InvalidName
from fbs.multiformats import SHA3_256, parse_hash
from node.error_contract import http_status_for
from p2p.attestation import MAX_ATTESTATION_BYTES, Attestation
from p2p.attestation_store import AcceptResult, AcceptStatus, AttestationStore
from p2p.errors import AttestationRejected, DuplicateAttestation, InvalidAttestation
from p2p.http.server import Route, add_routes
from storage.errors import DatasetNotFound, InvalidAlias
from storage.workspace import Workspace

__all__ = [
    "MAX_POST_ATTESTATIONS",
    "MAX_POST_BODY_BYTES",
    "OnAccepted",
    "add_attestation_routes",
    "attach_attestations",
    "attestation_routes",
]

#: Most attestations in one POST.
MAX_POST_ATTESTATIONS: Final = 256
#: Largest POST body.
MAX_POST_BODY_BYTES: Final = MAX_POST_ATTESTATIONS * (MAX_ATTESTATION_BYTES + 16)

OnAccepted = Callable[[AcceptResult], Awaitable[None]]
"""Called for each attestation accepted or queued through POST (e.g. to gossip it)."""

_STORE: Final = web.AppKey("attestation_store", AttestationStore)
_WS: Final = web.AppKey("attestation_workspace", Workspace)
_HOOK: Final = web.AppKey("attestation_hook", object)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _dataset_id(request: web.Request) -> DatasetId | web.Response:
    name = request.match_info["dataset"]
    account = request.match_info.get("account")
    ref: str | DatasetId
    if account is None:
        try:
            ref = DatasetId.from_multibase(name)
        except FbsError:
            ref = name
    else:
        ref = f"{account}/{name}"
    if isinstance(ref, str):
        try:
            DatasetAlias.parse(ref)
        except InvalidName as e:
            return _error(400, f"invalid dataset reference: {e}")
    try:
        return request.app[_WS].resolve(ref).id
    except DatasetNotFound:
        return _error(404, "no such dataset")
    except (InvalidAlias, FbsError) as e:
        return _error(400, str(e))


async def get_attestations(request: web.Request) -> web.StreamResponse:
    """``GET {ds}/attestations``."""
    did = _dataset_id(request)
    if isinstance(did, web.Response):
        return did
    store = request.app[_STORE]
    block_text = request.query.get("block")
    status = await asyncio.to_thread(store.status, did)
    items = list(status.attestations)
    if block_text is not None:
        try:
            block = parse_hash(block_text, code=SHA3_256)
        except FbsError as e:
            return _error(400, f"invalid block: {e}")
        items = [a for a in items if a.block_hash == block]
    doc: dict[str, Any] = {
        "datasetId": did.to_did_odf(),
        "head": None if status.head is None else status.head.to_multibase(),
        "disputed": status.disputed,
        "disputedBlocks": [h.to_multibase() for h in status.disputed_blocks],
        "pending": status.pending,
        "attestations": [a.to_dict() for a in items],
    }
    return web.json_response(doc)


def _accept_one(store: AttestationStore, did: DatasetId, att: Attestation) -> AcceptResult:
    if att.dataset_id != did:
        raise InvalidAttestation("the attestation names another dataset than the path")
    return store.accept(att)


async def post_attestations(request: web.Request) -> web.StreamResponse:
    """``POST {ds}/attestations``."""
    did = _dataset_id(request)
    if isinstance(did, web.Response):
        return did
    length = request.content_length
    if length is not None and length > MAX_POST_BODY_BYTES:
        return _error(413, f"body larger than {MAX_POST_BODY_BYTES} bytes")
    body = await request.content.read(MAX_POST_BODY_BYTES + 1)
    if len(body) > MAX_POST_BODY_BYTES:
        return _error(413, f"body larger than {MAX_POST_BODY_BYTES} bytes")
    store = request.app[_STORE]
    hook = request.app[_HOOK]
    if body.lstrip()[:1] != b"[":
        try:
            att = Attestation.from_json(body)
            result = await asyncio.to_thread(_accept_one, store, did, att)
        except (InvalidAttestation, AttestationRejected) as e:
            return _error(http_status_for(e), str(e))
        if callable(hook):
            await hook(result)
        code = 201 if result.status is AcceptStatus.ACCEPTED else 202
        return web.json_response(_result_doc(result), status=code)
    try:
        items = json.loads(body.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error(400, "body is not ASCII JSON")
    if not isinstance(items, list) or len(items) > MAX_POST_ATTESTATIONS:
        return _error(400, f"expected a JSON array of at most {MAX_POST_ATTESTATIONS} items")
    results: list[dict[str, Any]] = []
    for item in items:
        try:
            att = Attestation.from_dict(item)
            result = await asyncio.to_thread(_accept_one, store, did, att)
        except InvalidAttestation as e:
            results.append({"status": "invalid", "error": str(e)})
            continue
        except DuplicateAttestation as e:
            results.append({"status": "duplicate", "error": str(e)})
            continue
        except AttestationRejected as e:
            results.append({"status": "rejected", "error": str(e)})
            continue
        if callable(hook):
            await hook(result)
        results.append(_result_doc(result))
    return web.json_response({"results": results})


def _result_doc(result: AcceptResult) -> dict[str, Any]:
    doc: dict[str, Any] = {"status": str(result.status), "digest": result.attestation.digest}
    if result.conflict:
        doc["conflict"] = True
    return doc


def attestation_routes(*, per_dataset: bool = True) -> tuple[Route, ...]:
    """The attestation routes (see the module docstring).

    Args:
        per_dataset: also ``/{dataset}/attestations`` (these only work when registered
            before a catch-all route: `node.http.api.create_app`'s ``extra_routes``).
    """
    prefixes = ["/api/attestations/{dataset}", "/api/attestations/{account}/{dataset}"]
    if per_dataset:
        prefixes += ["/{dataset}/attestations", "/{account}/{dataset}/attestations"]
    return tuple(
        route
        for prefix in prefixes
        for route in (
            Route("GET", prefix, get_attestations),
            Route("POST", prefix, post_attestations),
        )
    )


def attach_attestations(
    app: web.Application,
    store: AttestationStore,
    workspace: Workspace,
    *,
    on_accepted: OnAccepted | None = None,
) -> None:
    """Give the attestation routes of ``app`` their state.

    Args:
        app: the node's HTTP app (not started yet).
        store: the attestation store.
        workspace: resolves aliases in paths.
        on_accepted: awaited for each attestation accepted or queued by POST.
    """
    app[_STORE] = store
    app[_WS] = workspace
    app[_HOOK] = on_accepted


def add_attestation_routes(
    app: web.Application,
    store: AttestationStore,
    workspace: Workspace,
    *,
    on_accepted: OnAccepted | None = None,
    per_dataset: bool = True,
) -> None:
    """`attach_attestations` and register `attestation_routes` on ``app`` now."""
    attach_attestations(app, store, workspace, on_accepted=on_accepted)
    add_routes(app, attestation_routes(per_dataset=per_dataset))
