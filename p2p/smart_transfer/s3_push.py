"""Smart-protocol push into an S3 repository: presigned ``PUT`` into ``quarantine/`` only.

The pushed blocks are checked by the receive path (each hashed before it is parsed,
then the chain rules on top of the chain read from S3; `S3Repo.chain_state` reads only
the blocks added since the node last read that dataset). An object not stored yet gets
a presigned ``PUT`` of a fresh key under the dataset's ``quarantine/``, never of its
final name. At ``DatasetPushComplete`` each upload is verified and named by
`storage.s3.quarantine.admit_upload` (hashed before anything; a mismatch refuses the
push and leaves nothing outside ``quarantine/``), every object the blocks name must then
be stored with its declared size, the blocks are written create-only, and ``refs/head``
moves by compare-and-swap from the head the push started from: the head moves only
once everything it names is durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from fbs.model import MetadataBlock, Seed
from fbs.multiformats import Multihash
from p2p.errors import PeerMisbehaved
from p2p.http.s3_repo import S3_REPO, S3Repo, authorized, dataset_layout
from p2p.receive import (
    ChainRuleBroken,
    ObjectJob,
    ReceivedBlock,
    object_jobs,
    receive_block,
    validate_chain,
)
from p2p.smart_transfer.messages import (
    EMPTY,
    MAX_MESSAGE_BYTES,
    ErrorReply,
    ObjectFile,
    PushMetadataRequest,
    PushObjectsAccepted,
    PushObjectsRequest,
    PushRequest,
    PushStrategy,
    TransferUrl,
    internal_error,
    ok,
    unpack_blocks,
)
from p2p.smart_transfer.server import (
    _Abort,
    _await_uploads,
    _check_version,
    _expect,
    _open_socket,
    _run,
    _send,
)
from storage.chain import ChainState
from storage.errors import HashMismatch, ObjectNotFound, RefCASFailed, StorageError
from storage.s3.client import MAX_COPY_SIZE
from storage.s3.layout import S3DatasetLayout
from storage.s3.presign import presign_put
from storage.s3.quarantine import admit_upload, new_upload_key

__all__ = ["s3_smart_push"]

log = logging.getLogger(__name__)

#: Uploads verified and named at once at the end of a push.
PARALLEL_ADMISSIONS: Final = 8


@dataclass(slots=True)
class _S3Push:
    """A push in progress: the dataset, the head it started from, blocks, uploads."""

    repo: S3Repo
    layout: S3DatasetLayout
    alias: str
    old_head: Multihash | None
    blocks: list[ReceivedBlock] = field(default_factory=list)
    state: ChainState | None = None
    uploads: dict[tuple[str, Multihash], str] = field(default_factory=dict)

    def blocks_only(self) -> Iterator[MetadataBlock]:
        """The decoded pushed blocks, oldest first."""
        return (b.block for b in self.blocks)


def _abort(phase: str, message: str) -> _Abort:
    return _Abort(internal_error("Push", phase, message))


def _receive_batch(push: _S3Push, req: PushMetadataRequest) -> None:
    """Hash, decode and chain-check the pushed blocks on top of the stored chain."""
    try:
        blocks = [receive_block(raw, expected=h) for h, raw in unpack_blocks(req.new_blocks)]
    except PeerMisbehaved as e:
        raise _abort("MetadataRequest", str(e)) from None
    if not blocks:
        raise _abort("MetadataRequest", "no blocks")
    try:
        local = push.repo.chain_state(push.layout, push.old_head)
    except StorageError as e:
        log.error("smart push to S3: reading the chain: %s", e)
        raise _abort("MetadataRequest", "stored chain is damaged") from None
    if local is not None and isinstance(blocks[0].block.event, Seed):
        raise _Abort(ErrorReply("SeedBlockOverwriteRestricted", {}))
    try:
        push.state = validate_chain(blocks, local)
    except ChainRuleBroken as e:
        raise _abort("MetadataRequest", f"chain rule broken at {e.block}: {e.error}") from None
    push.blocks = blocks


def _strategy(push: _S3Push, f: ObjectFile) -> PushStrategy:
    """No upload for an object stored with its size (its age restarted); else a presigned
    quarantine ``PUT``."""
    store = push.layout.data if f.kind == "data" else push.layout.checkpoints
    if f.size > min(store.max_object_size, MAX_COPY_SIZE):
        # An upload is named by one server-side copy, which S3 caps at MAX_COPY_SIZE.
        raise _abort("ObjectsRequest", f"{f.kind} object {f.physical_hash} is too large")
    # Re-used objects restart their age (copied onto themselves), so GC's grace
    # period runs from this push, not from whoever stored them first.
    stat = push.layout.client.touch(store.key_of(f.physical_hash))
    if stat is not None and stat.size == f.size:
        return PushStrategy(f, None)
    key = push.uploads.setdefault((f.kind, f.physical_hash), new_upload_key(push.layout))
    url = presign_put(push.layout.client, key, f.size, expires_s=push.repo.url_expiry_s)
    return PushStrategy(f, TransferUrl(url.url, (), url.expires_at))


def _accepted(push: _S3Push, files: Sequence[ObjectFile]) -> PushObjectsAccepted:
    return PushObjectsAccepted(tuple(_strategy(push, f) for f in files))


def _admit(push: _S3Push, job: ObjectJob) -> None:
    """Name ``job``'s upload, if it had one; then the object must be stored whole."""
    layout = push.layout
    key = push.uploads.get((job.kind, job.hash))
    if key is not None:
        admit_upload(layout, job.kind, key, job.hash, job.size)
    store = layout.data if job.kind == "data" else layout.checkpoints
    stat = layout.client.stat(store.key_of(job.hash))
    if stat is None or stat.size != job.size:
        raise _abort("CompleteRequest", f"not uploaded: {job.kind} object {job.hash}")


def _commit(push: _S3Push) -> None:
    """Admit every upload, check every object, write the blocks, move the head.

    Raises:
        _Abort: an upload that is not its object, an object missing, the head moved.
    """
    layout = push.layout
    try:
        with ThreadPoolExecutor(PARALLEL_ADMISSIONS) as pool:
            for _ in pool.map(lambda job: _admit(push, job), object_jobs(push.blocks_only())):
                pass
        layout.blocks.put_many((b.hash, b.raw) for b in push.blocks)
        layout.refs.set_if_equals("head", push.old_head, push.blocks[-1].hash)
    except HashMismatch as e:
        raise _abort("CompleteRequest", f"refused upload: {e}") from None
    except ObjectNotFound as e:
        raise _abort("CompleteRequest", f"not uploaded: {e}") from None
    except RefCASFailed as e:
        raise _abort("CompleteRequest", f"head moved (conflict): {e}") from None
    if push.old_head is None:
        layout.write_alias(push.alias)


async def _push_flow(request: web.Request, ws: web.WebSocketResponse, push: _S3Push) -> None:
    req = PushRequest.from_doc(await _expect(ws, "Push", "InitialRequest"))
    push.old_head = await asyncio.to_thread(push.layout.refs.get_or_none, "head")
    if req.current_head != push.old_head:
        fields = {
            "actual_head": push.old_head and push.old_head.to_multibase(),
            "expected_head": req.current_head and req.current_head.to_multibase(),
        }
        await _send(ws, ErrorReply("InvalidHead", fields).to_doc())
        return
    await _send(ws, ok(EMPTY))
    meta = PushMetadataRequest.from_doc(await _expect(ws, "Push", "MetadataRequest"))
    await asyncio.to_thread(_receive_batch, push, meta)
    await _send(ws, ok(EMPTY))
    while "object_files" in (doc := await _expect(ws, "Push", "ObjectsRequest")):
        files = PushObjectsRequest.from_doc(doc).object_files
        accepted = await asyncio.to_thread(_accepted, push, files)
        await _send(ws, ok(accepted.to_doc()))
        await _await_uploads(ws)
    await asyncio.to_thread(_commit, push)
    await _send(ws, EMPTY)


async def s3_smart_push(request: web.Request) -> web.StreamResponse:
    """``GET push`` (WebSocket, bearer token) into a dataset of the S3 repository."""
    if not authorized(request):
        return web.Response(status=401, text="a bearer token is required to push\n")
    _check_version(request)
    layout = dataset_layout(request)
    repo = request.app[S3_REPO]
    ws = await _open_socket(request, MAX_MESSAGE_BYTES)
    push = _S3Push(repo, layout, request.match_info["dataset"], None)
    return await _run(ws, _push_flow(request, ws, push), "push")
