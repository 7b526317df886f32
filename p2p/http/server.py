"""HTTP transport, server side: the ODF Simple Transfer Protocol, uploads and push.

The counterpart of `p2p.http.source` (the client): per dataset, under a *dataset base
path* (an alias ``name``, ``account/name`` as two path segments, or the DID multibase
``fed01...``). The first four are exactly the dataset base-relative paths of the ODF
Simple Transfer Protocol (odf-format.md 4.2), so kamu, curl or any HTTP client can pull:

====================================  =====================================================
``GET refs/head``                     head block hash, text, no trailing newline (404: none)
``GET blocks/{hash}``                 raw block bytes
``GET data/{hash}``                   data slice file (streamed)
``GET checkpoints/{hash}``            checkpoint file (streamed)
``GET refs/head.sig``                 signed `HeadRecord` of the current head (JSON; 404 if
                                      the node neither owns the key nor holds a record)
``GET blocks?head=H&stop_at=S``       batched blocks, newest first from H, stopping before S
                                      or after the Seed; body = frames (`p2p.http.source`)
``PUT data/{hash}``                   upload an object (Content-Length required; hashed
``PUT checkpoints/{hash}``            while streamed into quarantine; mismatch: 400)
``POST push[?alias=A]``               frames: head record JSON, then new blocks oldest first;
                                      the head moves only for a record signed by the
                                      dataset key (403 otherwise), chain rules apply (400),
                                      by compare-and-swap (409 when the head moved)
====================================  =====================================================

`TRANSFER_ROUTES` lists them; the node's application (`node.http.api`) is built from
that table plus its own routes, behind its access checks (`node.http.auth`). Uploads
and pushes enter the workspace through `p2p.receive`, the same verification,
quarantine and commit code as a pull.

Hostile input: hashes are parsed with `fbs.multiformats.parse_hash`, and files are only
ever named by the store from the parsed value, so no user text reaches a filesystem path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from aiohttp import web

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, InvalidDid, InvalidHash, InvalidName, MalformedBlock
from fbs.keys import KeyPair
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from p2p.errors import (
    Equivocation,
    FrameTooLarge,
    InvalidHeadRecord,
    NotDescendant,
    P2PError,
    PeerMisbehaved,
    StaleHead,
)
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore
from p2p.http.dataset_cache import ResolveCache, Resolved
from p2p.http.source import BLOCK_FRAMES_MEDIA_TYPE, FRAME_HEADER, iter_frames
from p2p.receive import (
    ChainRuleBroken,
    ObjectJob,
    ObjectKind,
    ReceivedBlock,
    accept_head_record,
    accept_object,
    check_record,
    commit_received,
    object_jobs,
    object_store,
    receive_block,
    stored_size,
    validate_chain,
)
from storage.catalog import open_dataset as open_entry
from storage.chain import ChainState
from storage.dataset import Dataset
from storage.errors import (
    CorruptObject,
    DamagedObject,
    DatasetExists,
    DatasetNotFound,
    InvalidAlias,
    KeyStoreError,
    ObjectNotFound,
    RefCASFailed,
    StorageError,
    UnsafePath,
)
from storage.fsutil import open_for_read, write_all
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE
from storage.staging import open_staging, staging_lock
from storage.verified import verified_object_path
from storage.workspace import Workspace

__all__ = [
    "INLINE_OBJECT_BYTES",
    "MAX_BATCH_BLOCKS",
    "MAX_BATCH_BYTES",
    "MAX_PUSH_BODY_BYTES",
    "SERVER",
    "TRANSFER_ROUTES",
    "HttpError",
    "PushBody",
    "Route",
    "Signer",
    "TransferConfig",
    "TransferServer",
    "add_routes",
    "apply_push",
    "error_response",
    "open_dataset",
    "resolve_dataset",
]

log = logging.getLogger(__name__)

#: Most blocks one batched-blocks response carries (the client asks again).
MAX_BATCH_BLOCKS: Final = 10_000
#: Most bytes of blocks in one batched-blocks response.
MAX_BATCH_BYTES: Final = 64 << 20
#: Largest push body (head record plus blocks; objects go by PUT).
MAX_PUSH_BODY_BYTES: Final = 256 << 20
#: Chunk size when streaming uploads into quarantine.
UPLOAD_CHUNK_SIZE: Final = 1 << 20
#: Staging directory name prefix of a dataset created by push (``staging/push-<did>``).
PUSH_STAGING_PREFIX: Final = "push-"
#: Objects up to this size are served from memory, hashed as read (a pull's small slices
#: and checkpoints: one worker-thread call instead of a file response's several);
#: larger ones are streamed from a verified file.
INLINE_OBJECT_BYTES: Final = 64 << 10

Signer = Callable[[DatasetId], KeyPair | None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """Limits and switches of the transfer routes.

    Attributes:
        max_put_object_size: largest object accepted by PUT (413 above).
        max_push_body_bytes: largest push body (413 above).
        max_batch_blocks / max_batch_bytes: batched-blocks response caps.
        allow_put: accept object uploads.
        allow_push: accept pushes.
        allow_push_create: a push may create a dataset this node does not have.
    """

    max_put_object_size: int = DEFAULT_MAX_OBJECT_SIZE
    max_push_body_bytes: int = MAX_PUSH_BODY_BYTES
    max_batch_blocks: int = MAX_BATCH_BLOCKS
    max_batch_bytes: int = MAX_BATCH_BYTES
    allow_put: bool = True
    allow_push: bool = True
    allow_push_create: bool = True


@dataclass(frozen=True, slots=True)
class TransferServer:
    """What the transfer routes serve, kept in the application under `SERVER`.

    Attributes:
        workspace: the datasets served.
        head_store: the high-water marks of signed heads.
        signer: the key pair of a dataset this node owns, or ``None``.
        config: limits and switches.
        push_lock: serialises pushes in this process (each is validated against the
            head it will move).
        datasets: the dataset references of request paths already resolved.
    """

    workspace: Workspace
    head_store: HeadStore
    signer: Signer
    config: TransferConfig
    push_lock: asyncio.Lock
    datasets: ResolveCache = field(default_factory=ResolveCache)


SERVER: Final = web.AppKey("transfer_server", TransferServer)


@dataclass(frozen=True, slots=True)
class Route:
    """One HTTP route: method, path (relative to the dataset base path for
    `TRANSFER_ROUTES`) and handler."""

    method: str
    path: str
    handler: Handler


def add_routes(app: web.Application, routes: Iterable[Route]) -> None:
    """Register ``routes`` on ``app`` in order (aiohttp matches the first that fits).

    A GET route answers HEAD too (`p2p.http.source.push_dataset` asks before uploading).
    """
    for route in routes:
        if route.method == "GET":
            app.router.add_get(route.path, route.handler)
        else:
            app.router.add_route(route.method, route.path, route.handler)


def error_response(status: int, message: str) -> web.Response:
    """The one-line JSON error every route answers with (``{"error": message}``)."""
    return web.json_response({"error": message}, status=status)


class HttpError(Exception):
    """Raised by a handler to answer `error_response` (the node's middleware does)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# -- request helpers --------------------------------------------------------------------------


def _dataset_ref(request: web.Request) -> str | DatasetId:
    """The dataset named by the path: a DID (multibase) or an alias.

    Raises:
        HttpError: 400 for text that is neither.
    """
    name = request.match_info["dataset"]
    account = request.match_info.get("account")
    if account is None:
        with contextlib.suppress(FbsError):
            return DatasetId.from_multibase(name)
    text = name if account is None else f"{account}/{name}"
    try:
        DatasetAlias.parse(text)
    except InvalidName as e:
        raise HttpError(400, f"invalid dataset reference: {e}") from None
    return text


def resolve_dataset(request: web.Request) -> Resolved:
    """The dataset the request's path names (resolved once, then confirmed by a stat:
    `p2p.http.dataset_cache`).

    Raises:
        HttpError: 404 if there is none, 400 for an invalid name.
    """
    server = request.app[SERVER]
    ref = _dataset_ref(request)
    try:
        return server.datasets.resolve(server.workspace, ref)
    except DatasetNotFound:
        raise HttpError(404, "no such dataset") from None
    except (InvalidAlias, InvalidDid) as e:
        raise HttpError(400, str(e)) from None


def open_dataset(request: web.Request) -> Dataset:
    """The dataset the request's path names.

    Raises:
        HttpError: 404 if there is none, 400 for an invalid name.
    """
    ws = request.app[SERVER].workspace
    return open_entry(ws.root, resolve_dataset(request).entry, ops=ws.ops)


def _hash(request: web.Request) -> Multihash:
    try:
        return parse_hash(request.match_info["hash"], code=SHA3_256)
    except InvalidHash as e:
        raise HttpError(400, f"invalid hash: {e}") from None


def _query_hash(request: web.Request, name: str) -> Multihash | None:
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return parse_hash(text, code=SHA3_256)
    except InvalidHash as e:
        raise HttpError(400, f"invalid {name}: {e}") from None


def _object_kind(request: web.Request) -> ObjectKind:
    return "data" if request.path.split("/")[-2] == "data" else "checkpoint"


# -- reads: the simple transfer protocol ------------------------------------------------------


async def get_head(request: web.Request) -> web.StreamResponse:
    """``GET refs/head``."""
    ds = open_dataset(request)
    head = ds.head()
    if head is None:
        return error_response(404, "dataset has no head")
    return web.Response(body=head.to_multibase().encode("ascii"), content_type="text/plain")


async def get_other_ref(request: web.Request) -> web.StreamResponse:
    """``GET refs/{ref}``: only ``head`` exists."""
    open_dataset(request)
    return error_response(404, "no such ref")


def _signed_record(server: TransferServer, ds: Dataset) -> HeadRecord | None:
    state = ds.state()
    if state is None:
        return None
    held = server.head_store.get(state.dataset_id)
    if held is not None and held.head == state.head:
        return held
    try:
        key = server.signer(state.dataset_id)
    except (KeyStoreError, OSError):
        key = None
    if key is None or key.dataset_id != state.dataset_id:
        return None
    record = sign_head(key, state.head, state.sequence_number, state.system_time)
    with contextlib.suppress(StaleHead):  # a concurrent request stored the same head first
        server.head_store.accept(
            record,
            expected_dataset_id=state.dataset_id,
            is_descendant=lambda old, _new: any(h == old for h, _r, _b in ds.iter_blocks()),
        )
    return record


async def get_head_record(request: web.Request) -> web.StreamResponse:
    """``GET refs/head.sig``: the held record of the head, or one signed now by its owner."""
    ds = open_dataset(request)
    try:
        record = await asyncio.to_thread(_signed_record, request.app[SERVER], ds)
    except Equivocation as e:
        return error_response(409, f"refusing to sign: {e}")
    except P2PError as e:
        return error_response(500, f"head record unavailable: {e}")
    if record is None:
        return error_response(404, "no signed head record for this dataset")
    return web.Response(body=record.to_json(), content_type="application/json")


async def get_block(request: web.Request) -> web.StreamResponse:
    """``GET blocks/{hash}``: one raw block, verified against its name."""
    ds = open_dataset(request)
    h = _hash(request)
    try:
        raw = await asyncio.to_thread(ds.layout.blocks.get, h)  # verifies the hash
    except ObjectNotFound:
        return error_response(404, "no such block")
    except (CorruptObject, StorageError) as e:
        log.error("serving block %s: %s", h, e)
        return error_response(500, "stored block is damaged")
    return web.Response(body=raw, content_type="application/octet-stream")


def _servable(root: Path, kind: ObjectKind, h: Multihash) -> bytes | Path:
    """Object ``h`` of the store at ``root``, checked against its name: its bytes when it
    has at most `INLINE_OBJECT_BYTES` (hashed as read: what is served is what was
    checked), else its verified file (hashed once, remembered: `storage.verified`).

    Raises:
        ObjectNotFound: no regular file of that name (a symlink is never followed).
        DamagedObject: bytes that do not hash to the name.
    """
    path = root / h.to_multibase()
    try:
        f = open_for_read(path)
    except (FileNotFoundError, UnsafePath):
        raise ObjectNotFound(f"no {kind} object {h}") from None
    with f:
        if os.fstat(f.fileno()).st_size <= INLINE_OBJECT_BYTES:
            data = f.read(INLINE_OBJECT_BYTES + 1)
            if len(data) <= INLINE_OBJECT_BYTES:
                if hashlib.sha3_256(data).digest() != h.digest:
                    raise DamagedObject(kind, h, path, "its bytes hash to another name")
                return data
    return verified_object_path(root, kind, h, None)


async def get_object(request: web.Request) -> web.StreamResponse:
    """``GET data/{hash}`` / ``GET checkpoints/{hash}``: never bytes that differ from the
    object's name (`_servable`)."""
    kind = _object_kind(request)
    layout = resolve_dataset(request).layout
    h = _hash(request)
    root = object_store(layout, kind).root
    try:
        found = await asyncio.to_thread(_servable, root, kind, h)
    except ObjectNotFound:
        return error_response(404, f"no such {kind} object")
    except StorageError as e:
        log.error("serving %s object %s: %s", kind, h, e)
        return error_response(500, f"stored {kind} object is damaged")
    if isinstance(found, bytes):
        return web.Response(body=found, content_type="application/octet-stream")
    return web.FileResponse(found, headers={"Content-Type": "application/octet-stream"})


def _collect_blocks(
    ds: Dataset, head: Multihash, stop_at: Multihash | None, max_blocks: int, max_bytes: int
) -> list[bytes]:
    out: list[bytes] = []
    total = 0
    h: Multihash | None = head
    while h is not None and h != stop_at and len(out) < max_blocks:
        raw, block = ds.get_block(h)
        if out and total + len(raw) > max_bytes:
            break
        out.append(raw)
        total += len(raw)
        h = block.prev_block_hash
    return out


async def get_blocks_batch(request: web.Request) -> web.StreamResponse:
    """``GET blocks?head=H&stop_at=S[&limit=N]``: blocks newest first, as frames."""
    ds = open_dataset(request)
    head = _query_hash(request, "head") or ds.head()
    if head is None:
        return error_response(404, "dataset has no head")
    stop_at = _query_hash(request, "stop_at")
    cfg = request.app[SERVER].config
    limit = cfg.max_batch_blocks
    if "limit" in request.query:
        try:
            limit = max(1, min(limit, int(request.query["limit"])))
        except ValueError:
            return error_response(400, "invalid limit")
    try:
        raws = await asyncio.to_thread(
            _collect_blocks, ds, head, stop_at, limit, cfg.max_batch_bytes
        )
    except ObjectNotFound:
        return error_response(404, "no such block")
    except (StorageError, MalformedBlock) as e:
        log.error("serving blocks from %s: %s", head, e)
        return error_response(500, "stored chain is damaged")
    body = b"".join(FRAME_HEADER.pack(len(r)) + r for r in raws)
    return web.Response(body=body, content_type=BLOCK_FRAMES_MEDIA_TYPE)


# -- uploads ----------------------------------------------------------------------------------


async def _receive_upload(request: web.Request, fd: int, length: int) -> bytes:
    """Stream the body into ``fd``; its SHA3-256.

    Raises:
        HttpError: 400 for a body longer or shorter than ``length``.
    """
    hasher = hashlib.sha3_256()
    total = 0
    async for chunk in request.content.iter_chunked(UPLOAD_CHUNK_SIZE):
        total += len(chunk)
        if total > length:
            raise HttpError(400, "body longer than Content-Length")
        hasher.update(chunk)
        write_all(fd, chunk)
    if total != length:
        raise HttpError(400, "body shorter than Content-Length")
    return hasher.digest()


async def put_object(request: web.Request) -> web.StreamResponse:
    """``PUT data/{hash}`` / ``PUT checkpoints/{hash}``: an upload, received like a pull's
    object (quarantine, then `p2p.receive.accept_object`)."""
    cfg = request.app[SERVER].config
    if not cfg.allow_put:
        return error_response(403, "uploads are disabled on this node")
    kind = _object_kind(request)
    ds = open_dataset(request)
    h = _hash(request)
    length = request.content_length
    if length is None:
        return error_response(411, "Content-Length required")
    store = object_store(ds.layout, kind)
    limit = min(cfg.max_put_object_size, store.max_object_size)
    if length > limit:
        return error_response(413, f"object larger than {limit} bytes")
    quarantine = await asyncio.to_thread(store.quarantine_path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(quarantine, flags, 0o600)
        try:
            digest = await _receive_upload(request, fd, length)
        finally:
            os.close(fd)
        job = ObjectJob(kind, h, length)
        try:
            await asyncio.to_thread(accept_object, store, job, quarantine, digest)
        except PeerMisbehaved:
            return error_response(400, "content does not match the hash")
    finally:
        with contextlib.suppress(FileNotFoundError):
            quarantine.unlink()
    return web.json_response({"hash": h.to_multibase(), "size": length}, status=201)


# -- push -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PushBody:
    """A push body, parsed: the record and the new blocks (oldest first)."""

    record: HeadRecord
    raws: list[bytes]


async def _read_push(request: web.Request, max_bytes: int) -> PushBody:
    """The frames of a push body.

    Raises:
        HttpError: 413 above ``max_bytes``, 400 for bad frames, 403 for a record that
            does not verify.
    """
    frames: list[bytes] = []
    total = 0
    try:
        async for frame in iter_frames(request.content):
            total += len(frame) + FRAME_HEADER.size
            if total > max_bytes:
                raise HttpError(413, f"push body larger than {max_bytes} bytes")
            frames.append(frame)
    except (FrameTooLarge, PeerMisbehaved) as e:
        raise HttpError(400, f"bad push body: {e}") from None
    if len(frames) < 2:
        raise HttpError(400, "a push carries a head record and at least one block")
    try:
        record = HeadRecord.from_json(frames[0])
    except InvalidHeadRecord as e:
        raise HttpError(403, f"head record refused: {e}") from None
    return PushBody(record, frames[1:])


def _push_target(
    request: web.Request, ref: str | DatasetId, record: HeadRecord
) -> tuple[Dataset | None, str]:
    """The local dataset a push moves (``None``: it creates one) and a new one's alias.

    Raises:
        HttpError: 403/404/400/409 for a push this node refuses before reading blocks.
    """
    server = request.app[SERVER]
    ws = server.workspace
    if isinstance(ref, DatasetId) and ref != record.dataset_id:
        raise HttpError(403, "head record is for another dataset")
    with contextlib.suppress(DatasetNotFound):
        return ws.get(ws.resolve(ref).id), ""
    if not server.config.allow_push_create:
        raise HttpError(404, "no such dataset (creation by push is disabled)")
    alias = ref.as_multibase() if isinstance(ref, DatasetId) else ref
    alias = request.query.get("alias", alias)
    try:
        DatasetAlias.parse(alias)
    except InvalidName as e:
        raise HttpError(400, f"invalid alias: {e}") from None
    with contextlib.suppress(DatasetNotFound):
        ws.resolve(record.dataset_id)
        raise HttpError(409, "dataset exists under another alias")
    return None, alias


def _check_push(
    ds: Dataset | None, record: HeadRecord, raws: list[bytes]
) -> tuple[list[ReceivedBlock], ChainState]:
    """Verify pushed blocks on the local chain by the receive path (nothing written).

    Raises:
        HttpError: 400 for bad blocks, chain rules or missing objects, 403 for a record
            that does not match the chain, 409 when the blocks do not extend the head.
    """
    local = ds.state() if ds is not None else None
    if local is not None and local.dataset_id != record.dataset_id:
        raise HttpError(403, "head record is not signed by this dataset's key")
    try:
        blocks = [receive_block(raw) for raw in raws]
        state = validate_chain(blocks, local)
    except ChainRuleBroken as e:
        raise HttpError(409 if e.head_moved else 400, f"block {e.block}: {e.error}") from None
    except PeerMisbehaved as e:
        raise HttpError(400, str(e)) from None
    jobs = object_jobs(b.block for b in blocks)
    if ds is None and jobs:
        raise HttpError(400, "push the Seed alone first: a new dataset has no objects yet")
    for job in jobs:
        assert ds is not None
        size = stored_size(ds.layout, job)
        if size is None:
            raise HttpError(400, f"{job.kind} object {job.hash} must be uploaded first")
        if size != job.size:
            raise HttpError(400, f"{job.kind} object {job.hash} has the wrong size")
    try:
        check_record(record, state)
    except InvalidHeadRecord as e:
        raise HttpError(403, str(e)) from None
    return blocks, state


def apply_push(server: TransferServer, ds: Dataset | None, push: PushBody, alias: str) -> Multihash:
    """Verify and commit a push through the receive path; the new head.

    The pushed blocks' objects must have been uploaded (`put_object`); a new dataset
    is installed from ``staging/push-<did>``.

    Raises:
        HttpError: see `_check_push`.
        StaleHead / Equivocation / NotDescendant: the record is refused by the store.
        RefCASFailed / DatasetExists / InvalidAlias: see `p2p.receive.commit_received`.
    """
    blocks, state = _check_push(ds, push.record, push.raws)
    held = server.head_store.get(push.record.dataset_id)
    if held != push.record:  # the same record again: a retry after a failed append
        accept_head_record(server.head_store, push.record, state, ds, blocks)
    if ds is not None:
        commit_received(server.workspace, blocks, local=ds)
        return push.record.head
    ws, did = server.workspace, push.record.dataset_id
    name = f"{PUSH_STAGING_PREFIX}{did.as_multibase()}"
    with staging_lock(ws, name):
        staged = open_staging(ws, name)
        commit_received(ws, blocks, local=None, staged=staged, alias=alias, dataset_id=did)
    return push.record.head


async def push(request: web.Request) -> web.StreamResponse:
    """``POST push``: signed head record plus new blocks (see the module docstring)."""
    server = request.app[SERVER]
    if not server.config.allow_push:
        return error_response(403, "push is disabled on this node")
    ref = _dataset_ref(request)
    limit = server.config.max_push_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return error_response(413, f"push body larger than {limit} bytes")
    body = await _read_push(request, limit)
    ds, alias = _push_target(request, ref, body.record)
    async with server.push_lock:
        try:
            head = await asyncio.to_thread(apply_push, server, ds, body, alias)
        except (StaleHead, Equivocation, NotDescendant) as e:
            return error_response(409, str(e))
        except InvalidHeadRecord as e:
            return error_response(403, str(e))
        except RefCASFailed as e:
            return error_response(409, f"head moved: {e}")
        except (DatasetExists, InvalidAlias) as e:
            return error_response(409, str(e))
    return web.json_response(
        {"head": head.to_multibase(), "sequenceNumber": body.record.sequence_number}
    )


#: The transfer routes, relative to a dataset base path (``/{dataset}`` or
#: ``/{account}/{dataset}``); `node.http.api` mounts them under both.
TRANSFER_ROUTES: Final = (
    Route("GET", "/refs/head", get_head),
    Route("GET", "/refs/head.sig", get_head_record),
    Route("GET", "/refs/{ref}", get_other_ref),
    Route("GET", "/blocks", get_blocks_batch),
    Route("GET", "/blocks/{hash}", get_block),
    Route("GET", "/data/{hash}", get_object),
    Route("GET", "/checkpoints/{hash}", get_object),
    Route("PUT", "/data/{hash}", put_object),
    Route("PUT", "/checkpoints/{hash}", put_object),
    Route("POST", "/push", push),
)
