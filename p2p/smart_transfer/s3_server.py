"""Smart Transfer Protocol v1 for an S3 repository: objects move by presigned URLs only.

The same exchanges as `p2p.smart_transfer.server`, for a dataset whose chain and objects
live under an S3 prefix (`p2p.http.s3_repo`):

Pull: the interval's blocks are read from S3 (each hashed before it is parsed) and sent
as the one batch; every slice and checkpoint is answered with a presigned ``GET`` of its
key (kamu's ``download_from``), so object bytes go from S3 to the puller.

Push: `p2p.smart_transfer.s3_push` (presigned ``PUT`` into ``quarantine/`` only).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from aiohttp import web

from fbs.codec import decode_block
from fbs.multiformats import Multihash
from p2p.http.s3_repo import (
    S3_REPO,
    S3_SIMPLE_ROUTES,
    RepoRoute,
    S3Repo,
    dataset_layout,
    object_url,
    s3_repo_app,
)
from p2p.smart_transfer.messages import (
    ErrorReply,
    ObjectFile,
    PullObjectsRequest,
    PullObjectsResponse,
    PullRequest,
    PullStrategy,
    TransferUrl,
    internal_error,
    metadata_response_text,
    ok,
    pack_blocks,
)
from p2p.smart_transfer.plan import transfer_plan
from p2p.smart_transfer.s3_push import s3_smart_push
from p2p.smart_transfer.server import (
    MAX_PULL_MESSAGE_BYTES,
    _Abort,
    _check_version,
    _expect,
    _open_socket,
    _receive,
    _run,
    _send,
)
from storage.errors import ObjectNotFound, StorageError
from storage.s3.layout import S3DatasetLayout

__all__ = ["S3_SMART_ROUTES", "s3_repository_app", "s3_smart_pull"]

log = logging.getLogger(__name__)


# -- pull -------------------------------------------------------------------------------------


def _interval(
    layout: S3DatasetLayout, req: PullRequest
) -> tuple[list[tuple[Multihash, bytes, Any]], Multihash] | ErrorReply | None:
    """The blocks after ``begin_after`` up to ``stop_at`` or the head, oldest first
    (``None``: no dataset; an `ErrorReply` for an interval not in the chain)."""
    head = req.stop_at or layout.refs.get_or_none("head")
    if head is None:
        return None
    found: list[tuple[Multihash, bytes, Any]] = []
    h: Multihash | None = head
    while h is not None and h != req.begin_after:
        try:
            raw = layout.blocks.get(h)  # hashed before it is parsed
        except ObjectNotFound:
            break
        block = decode_block(raw)
        found.append((h, raw, block))
        h = block.prev_block_hash
    if h != req.begin_after and not req.force_update_if_diverged:
        tail = req.begin_after or head
        return ErrorReply(
            "InvalidInterval", {"head": head.to_multibase(), "tail": tail.to_multibase()}
        )
    found.reverse()
    return found, head


def _read_interval(layout: S3DatasetLayout, req: PullRequest) -> Any:
    try:
        return _interval(layout, req)
    except StorageError as e:
        log.error("smart pull from S3: reading the chain: %s", e)
        raise _Abort(internal_error("Pull", "InitialRequest", "stored chain is damaged")) from None


def _download_url(layout: S3DatasetLayout, f: ObjectFile, expiry_s: int) -> TransferUrl:
    kind = "data" if f.kind == "data" else "checkpoint"
    url, expires = object_url(layout, kind, f.physical_hash, expiry_s)
    return TransferUrl(url, (), expires)


def _pull_strategies(
    layout: S3DatasetLayout, files: Sequence[ObjectFile], expiry_s: int
) -> tuple[PullStrategy, ...]:
    return tuple(PullStrategy(f, _download_url(layout, f, expiry_s)) for f in files)


async def _pull_flow(request: web.Request, ws: web.WebSocketResponse) -> None:
    layout = dataset_layout(request)
    expiry = request.app[S3_REPO].url_expiry_s
    req = PullRequest.from_doc(await _expect(ws, "Pull", "InitialRequest"))
    found = await asyncio.to_thread(_read_interval, layout, req)
    if isinstance(found, ErrorReply):
        await _send(ws, found.to_doc())
        return
    if found is None:
        raise _Abort(internal_error("Pull", "InitialRequest", "dataset has no head"))
    blocks, _head = found
    plan, _jobs = transfer_plan(blocks)
    await _send(ws, ok({"transfer_plan": plan.to_doc()}))
    if await _receive(ws) is None:
        return
    text = await asyncio.to_thread(
        lambda: metadata_response_text(pack_blocks([(h, r) for h, r, _b in blocks]))
    )
    await ws.send_str(text)
    while (doc := await _receive(ws)) is not None:
        files = PullObjectsRequest.from_doc(doc).object_files
        strategies = await asyncio.to_thread(_pull_strategies, layout, files, expiry)
        await _send(ws, PullObjectsResponse(strategies).to_doc())


async def s3_smart_pull(request: web.Request) -> web.StreamResponse:
    """``GET pull`` (WebSocket) of a dataset in the S3 repository."""
    _check_version(request)
    ws = await _open_socket(request, MAX_PULL_MESSAGE_BYTES)
    return await _run(ws, _pull_flow(request, ws), "pull")


#: The smart-protocol routes of an S3 repository, relative to a dataset base path.
S3_SMART_ROUTES: Final = (
    RepoRoute("GET", "/pull", s3_smart_pull, "pull"),
    RepoRoute("GET", "/push", s3_smart_push, "push"),
)


def s3_repository_app(repo: S3Repo) -> web.Application:
    """Both protocols for every dataset of ``repo`` (`p2p.http.s3_repo`, this module)."""
    return s3_repo_app(repo, (*S3_SIMPLE_ROUTES, *S3_SMART_ROUTES))
