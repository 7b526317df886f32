"""The node's HTTP API (aiohttp): ODF Simple Transfer Protocol, signed heads, push, JSON.

Per dataset, under ``/{dataset}/`` (an alias ``name``, ``account/name`` as two path
segments, or the DID multibase ``fed01...``). The first four are exactly the dataset
base-relative paths of the ODF Simple Transfer Protocol (odf-format.md 4.2), so kamu,
curl or any HTTP client can pull from a node:

====================================  =====================================================
``GET refs/head``                     head block hash, text, no trailing newline (404: none)
``GET blocks/{hash}``                 raw block bytes
``GET data/{hash}``                   data slice file (streamed)
``GET checkpoints/{hash}``            checkpoint file (streamed)
``GET refs/head.sig``                 signed `HeadRecord` of the current head (JSON; 404 if
                                      the node neither owns the key nor holds a record)
``GET blocks?head=H&stop_at=S``       batched blocks, newest first from H, stopping before S
                                      or after the Seed; body = frames (`p2p.http_source`)
``PUT data/{hash}``                   upload an object (Content-Length required; hashed
``PUT checkpoints/{hash}``            while streamed into quarantine; mismatch: 400)
``POST push[?alias=A]``               frames: head record JSON, then new blocks oldest first;
                                      the head moves only for a record signed by the
                                      dataset key (403 otherwise), chain rules apply (400),
                                      by compare-and-swap (409 when the head moved)
``POST ingest[/{source}]``            push ingest through the dataset's push source (owner
                                      node only; ``?format=csv`` or the Content-Type names
                                      the input format)
====================================  =====================================================

Who may call what (`node.http_auth`): before routing, a request whose ``Host`` is a
foreign name (DNS rebinding) or whose ``Origin`` is not the node's own is refused (403)
on every route; every method other than GET/HEAD/OPTIONS (uploads, push, push ingest,
the daemon's follow/unfollow, attestation posts) needs ``Authorization: Bearer
<token>`` (401), the workspace's ``.odf/p2p/http-token`` by default. Reads stay open to
non-browser clients (kamu, curl): they send no ``Origin``.

Node-wide JSON: ``GET /api/status``, ``GET /api/datasets``, ``GET /api/peers`` (peers
from an injected provider, empty by default). More routes (validator attestations, the
daemon's endpoints) are added through `create_app`'s ``extra_routes`` hook.

Hostile input: any request path with an encoded separator (``%2f``, ``%5c``), a NUL, or
a ``.``/``..`` segment is refused with 400 before routing; hashes are parsed with
`fbs.multiformats.parse_hash` and files are only ever named by the store from the
parsed value, so no user text reaches a filesystem path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from aiohttp import web

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, InvalidDid, InvalidHash, InvalidName, MalformedBlock
from fbs.keys import KeyPair
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from fbs.rules import referenced_objects
from node.http_auth import AccessPolicy, load_or_create_token
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
from p2p.http_source import BLOCK_FRAMES_MEDIA_TYPE, FRAME_HEADER, iter_frames
from p2p.sync import install_dataset, open_staging
from storage.chain import ChainState, validate_append
from storage.dataset import Dataset
from storage.errors import (
    CorruptObject,
    DatasetExists,
    DatasetNotFound,
    InvalidAlias,
    InvalidAppend,
    KeyStoreError,
    ObjectNotFound,
    RefCASFailed,
    StorageError,
)
from storage.fsutil import OBJECT_MODE, ensure_dir, pending_name
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE, DiskObjectStore
from storage.verified import verified_object_path
from storage.workspace import Workspace

__all__ = [
    "MAX_BATCH_BLOCKS",
    "MAX_BATCH_BYTES",
    "MAX_PUSH_BODY_BYTES",
    "HttpApiConfig",
    "create_app",
]

log = logging.getLogger(__name__)

#: Most blocks one batched-blocks response carries (the client asks again).
MAX_BATCH_BLOCKS: Final = 10_000
#: Most bytes of blocks in one batched-blocks response.
MAX_BATCH_BYTES: Final = 64 << 20
#: Largest push body (head record plus blocks; objects go by PUT).
MAX_PUSH_BODY_BYTES: Final = 256 << 20
#: Largest push-ingest body.
MAX_INGEST_BODY_BYTES: Final = 1 << 30
#: Chunk size when streaming uploads into quarantine.
UPLOAD_CHUNK_SIZE: Final = 1 << 20
#: Longest request path accepted (anything longer is not one of ours).
MAX_PATH_LENGTH: Final = 2048

Signer = Callable[[DatasetId], KeyPair | None]
PeersProvider = Callable[[], Sequence[Mapping[str, Any]]]
StatusProvider = Callable[[], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class HttpApiConfig:
    """Limits and switches of the HTTP API.

    Attributes:
        max_put_object_size: largest object accepted by PUT (413 above).
        max_push_body_bytes: largest push body (413 above).
        max_batch_blocks / max_batch_bytes: batched-blocks response caps.
        allow_put: accept object uploads.
        allow_push: accept pushes.
        allow_push_create: a push may create a dataset this node does not have.
        allow_ingest: accept push ingest into datasets this node owns.
        max_ingest_body_bytes: largest push-ingest body (413 above).
        token: the bearer token every state-changing request needs (default: the
            workspace's, `node.http_auth.load_or_create_token`).
        allowed_hosts: host names accepted in ``Host`` besides IP literals and
            ``localhost`` (``"*"``: any; see `node.http_auth`).
    """

    max_put_object_size: int = DEFAULT_MAX_OBJECT_SIZE
    max_push_body_bytes: int = MAX_PUSH_BODY_BYTES
    max_batch_blocks: int = MAX_BATCH_BLOCKS
    max_batch_bytes: int = MAX_BATCH_BYTES
    allow_put: bool = True
    allow_push: bool = True
    allow_push_create: bool = True
    allow_ingest: bool = True
    max_ingest_body_bytes: int = MAX_INGEST_BODY_BYTES
    token: str | None = field(default=None, repr=False)
    allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Hooks:
    signer: Signer
    peers: PeersProvider
    status: StatusProvider


_WS: Final = web.AppKey("workspace", Workspace)
_CFG: Final = web.AppKey("config", HttpApiConfig)
_STORE: Final = web.AppKey("head_store", HeadStore)
_HOOKS: Final = web.AppKey("hooks", _Hooks)
_STARTED: Final = web.AppKey("started", float)
_PUSH_LOCK: Final = web.AppKey("push_lock", asyncio.Lock)
_POLICY: Final = web.AppKey("access_policy", AccessPolicy)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# -- path safety ----------------------------------------------------------------------------


def _hostile_path(raw_path: str) -> str | None:
    """Why ``raw_path`` (still percent-encoded) is refused, or ``None`` if it is clean."""
    if len(raw_path) > MAX_PATH_LENGTH:
        return "path too long"
    path = raw_path.split("?", 1)[0]
    lowered = path.lower()
    for bad in ("%2f", "%5c", "%00", "\\", "\x00"):
        if bad in lowered:
            return "encoded separator or NUL in path"
    segments = path.split("/")[1:]
    for i, seg in enumerate(segments):
        decoded = unquote(seg)
        if decoded in (".", ".."):
            return "dot segment in path"
        if seg == "" and i != len(segments) - 1:
            return "empty path segment"
    return None


def _refuse(request: web.Request, status: int, message: str) -> web.Response:
    log.warning(
        "refused %r %r (%s) from %s",
        request.method[:16],
        request.path[:200],
        message,
        request.remote,
    )
    resp = _error(status, message)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="odf-node"'
    return resp


@web.middleware
async def _guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    # Host and Origin, the path's syntax, then the token of a write: before anything
    # else (nothing is read from the body, no handler runs, nothing changes on disk).
    policy = request.app[_POLICY]
    refused = policy.browser_refusal(request.headers)
    if refused is None:
        reason = _hostile_path(request.raw_path)
        if reason is not None:
            return _error(400, reason)
        refused = policy.token_refusal(request.method, request.headers)
    if refused is not None:
        return _refuse(request, *refused)
    try:
        return await handler(request)
    except _HttpError as e:
        return _error(e.status, str(e))


# -- helpers --------------------------------------------------------------------------------


def _dataset_ref(request: web.Request) -> str | DatasetId:
    """The dataset named by the path: a DID (multibase) or an alias.

    Raises:
        _HttpError: 400 for text that is neither.
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
        raise _HttpError(400, f"invalid dataset reference: {e}") from None
    return text


def _open(request: web.Request) -> Dataset:
    ws = request.app[_WS]
    ref = _dataset_ref(request)
    try:
        entry = ws.resolve(ref)
        return ws.get(entry.id)
    except DatasetNotFound:
        raise _HttpError(404, "no such dataset") from None
    except (InvalidAlias, InvalidDid) as e:
        raise _HttpError(400, str(e)) from None


def _hash(request: web.Request) -> Multihash:
    try:
        return parse_hash(request.match_info["hash"], code=SHA3_256)
    except InvalidHash as e:
        raise _HttpError(400, f"invalid hash: {e}") from None


def _query_hash(request: web.Request, name: str) -> Multihash | None:
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return parse_hash(text, code=SHA3_256)
    except InvalidHash as e:
        raise _HttpError(400, f"invalid {name}: {e}") from None


def _object_store(ds: Dataset, kind: str) -> DiskObjectStore:
    return ds.layout.data if kind == "data" else ds.layout.checkpoints


# -- simple transfer protocol ------------------------------------------------------------------


async def get_head(request: web.Request) -> web.StreamResponse:
    ds = _open(request)
    head = ds.head()
    if head is None:
        return _error(404, "dataset has no head")
    return web.Response(body=head.to_multibase().encode("ascii"), content_type="text/plain")


async def get_other_ref(request: web.Request) -> web.StreamResponse:
    _open(request)
    return _error(404, "no such ref")


def _signed_record(request: web.Request, ds: Dataset) -> HeadRecord | None:
    state = ds.state()
    if state is None:
        return None
    store = request.app[_STORE]
    held = store.get(state.dataset_id)
    if held is not None and held.head == state.head:
        return held
    try:
        key = request.app[_HOOKS].signer(state.dataset_id)
    except (KeyStoreError, OSError):
        key = None
    if key is None or key.dataset_id != state.dataset_id:
        return None
    record = sign_head(key, state.head, state.sequence_number, state.system_time)
    with contextlib.suppress(StaleHead):  # a concurrent request stored the same head first
        store.accept(
            record,
            expected_dataset_id=state.dataset_id,
            is_descendant=lambda old, _new: any(h == old for h, _r, _b in ds.iter_blocks()),
        )
    return record


async def get_head_record(request: web.Request) -> web.StreamResponse:
    ds = _open(request)
    try:
        record = await asyncio.to_thread(_signed_record, request, ds)
    except Equivocation as e:
        return _error(409, f"refusing to sign: {e}")
    except P2PError as e:
        return _error(500, f"head record unavailable: {e}")
    if record is None:
        return _error(404, "no signed head record for this dataset")
    return web.Response(body=record.to_json(), content_type="application/json")


async def get_block(request: web.Request) -> web.StreamResponse:
    ds = _open(request)
    h = _hash(request)
    try:
        raw = await asyncio.to_thread(ds.layout.blocks.get, h)  # verifies the hash
    except ObjectNotFound:
        return _error(404, "no such block")
    except (CorruptObject, StorageError) as e:
        log.error("serving block %s: %s", h, e)
        return _error(500, "stored block is damaged")
    return web.Response(body=raw, content_type="application/octet-stream")


async def get_object(request: web.Request) -> web.StreamResponse:
    kind = "data" if request.path.split("/")[-2] == "data" else "checkpoint"
    ds = _open(request)
    h = _hash(request)
    store = _object_store(ds, kind)
    if not store.has(h):  # lstat: regular files only, never a symlink
        return _error(404, f"no such {kind} object")
    try:  # never serve bytes that differ from the object's name (hashed once, remembered)
        path = await asyncio.to_thread(verified_object_path, store.root, kind, h, None)
    except StorageError as e:
        log.error("serving %s object %s: %s", kind, h, e)
        return _error(500, f"stored {kind} object is damaged")
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


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
    ds = _open(request)
    head = _query_hash(request, "head") or ds.head()
    if head is None:
        return _error(404, "dataset has no head")
    stop_at = _query_hash(request, "stop_at")
    cfg = request.app[_CFG]
    limit = cfg.max_batch_blocks
    if "limit" in request.query:
        try:
            limit = max(1, min(limit, int(request.query["limit"])))
        except ValueError:
            return _error(400, "invalid limit")
    try:
        raws = await asyncio.to_thread(
            _collect_blocks, ds, head, stop_at, limit, cfg.max_batch_bytes
        )
    except ObjectNotFound:
        return _error(404, "no such block")
    except (StorageError, MalformedBlock) as e:
        log.error("serving blocks from %s: %s", head, e)
        return _error(500, "stored chain is damaged")
    body = b"".join(FRAME_HEADER.pack(len(r)) + r for r in raws)
    return web.Response(body=body, content_type=BLOCK_FRAMES_MEDIA_TYPE)


# -- uploads --------------------------------------------------------------------------------


def _publish(fd: int, quarantine: str, final: str, directory: str) -> None:
    os.fsync(fd)
    os.close(fd)
    os.chmod(quarantine, OBJECT_MODE)
    os.replace(quarantine, final)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


async def put_object(request: web.Request) -> web.StreamResponse:
    cfg = request.app[_CFG]
    if not cfg.allow_put:
        return _error(403, "uploads are disabled on this node")
    kind = "data" if request.path.split("/")[-2] == "data" else "checkpoint"
    ds = _open(request)
    h = _hash(request)
    length = request.content_length
    if length is None:
        return _error(411, "Content-Length required")
    limit = min(cfg.max_put_object_size, _object_store(ds, kind).max_object_size)
    if length > limit:
        return _error(413, f"object larger than {limit} bytes")
    store = _object_store(ds, kind)
    ensure_dir(store.root)
    final = store.path_of(h)
    quarantine = store.root / pending_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd: int | None = os.open(quarantine, flags, 0o600)
    hasher = hashlib.sha3_256()
    total = 0
    try:
        async for chunk in request.content.iter_chunked(UPLOAD_CHUNK_SIZE):
            total += len(chunk)
            if total > length:
                return _error(400, "body longer than Content-Length")
            hasher.update(chunk)
            assert fd is not None
            os.write(fd, chunk)
        if total != length:
            return _error(400, "body shorter than Content-Length")
        if hasher.digest() != h.digest:
            return _error(400, "content does not match the hash")
        assert fd is not None
        the_fd, fd = fd, None
        await asyncio.to_thread(_publish, the_fd, str(quarantine), str(final), str(store.root))
    finally:
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            quarantine.unlink()
    return web.json_response({"hash": h.to_multibase(), "size": total}, status=201)


# -- push -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PushPlan:
    record: HeadRecord
    raws: list[bytes]
    state: ChainState


def _plan_push(ds: Dataset | None, record: HeadRecord, raws: list[bytes]) -> _PushPlan:
    """Hash, decode and validate pushed blocks on the local chain (nothing written).

    Raises:
        _HttpError: 400 for bad blocks or chain rules, 403 for a record that does not
            match the chain, 409 when the blocks do not extend the current head.
    """
    state = ds.state() if ds is not None else None
    if state is not None and state.dataset_id != record.dataset_id:
        raise _HttpError(403, "head record is not signed by this dataset's key")
    last_h: Multihash | None = None
    last_seq = -1
    for raw in raws:
        h = block_hash(raw)
        try:
            block = decode_block(raw)
        except MalformedBlock as e:
            raise _HttpError(400, f"block {h} does not decode: {e}") from None
        try:
            state = validate_append(state, block, h)
        except InvalidAppend as e:
            # Rules 2 and 3 (sequence, parent): the head moved or the push is stale.
            status = 409 if getattr(e, "rule", None) in (2, 3) else 400
            raise _HttpError(status, f"block {h}: {e}") from None
        if ds is not None:
            for job_kind, obj, size in _objects(block):
                store = _object_store(ds, job_kind)
                try:
                    actual = store.size(obj)
                except ObjectNotFound:
                    raise _HttpError(
                        400, f"{job_kind} object {obj} must be uploaded first"
                    ) from None
                if actual != size:
                    raise _HttpError(400, f"{job_kind} object {obj} has the wrong size")
        elif _objects(block):
            raise _HttpError(400, "push the Seed alone first: a new dataset has no objects yet")
        last_h, last_seq = h, block.sequence_number
    assert state is not None
    if state.dataset_id != record.dataset_id:
        raise _HttpError(403, "head record is not signed by this dataset's key")
    if last_h != record.head or last_seq != record.sequence_number:
        raise _HttpError(403, "head record does not name the last pushed block")
    return _PushPlan(record, raws, state)


def _objects(block: Any) -> list[tuple[str, Multihash, int]]:
    return [(o.kind, o.physical_hash, o.size) for o in referenced_objects(block.event)]


def _apply_push(
    ws: Workspace, store: HeadStore, ds: Dataset | None, plan: _PushPlan, alias: str
) -> Multihash:
    record = plan.record
    new_hashes = {block_hash(r) for r in plan.raws}

    def is_descendant(old: Multihash, _new: Multihash) -> bool:
        if old in new_hashes:
            return True
        return ds is not None and any(h == old for h, _r, _b in ds.iter_blocks())

    held = store.get(record.dataset_id)
    if held != record:  # the same record again: a retry after a failed append
        store.accept(record, is_descendant=is_descendant, expected_dataset_id=record.dataset_id)
    if ds is not None:
        ds.append_blocks_bytes(plan.raws)
    else:
        staging = ws.root / "staging" / f"push-{record.dataset_id.as_multibase()}"
        install_dataset(ws, open_staging(staging), staging, plan.raws, alias, record.dataset_id)
    return record.head


async def push(request: web.Request) -> web.StreamResponse:
    cfg = request.app[_CFG]
    if not cfg.allow_push:
        return _error(403, "push is disabled on this node")
    ws = request.app[_WS]
    ref = _dataset_ref(request)
    length = request.content_length
    if length is not None and length > cfg.max_push_body_bytes:
        return _error(413, f"push body larger than {cfg.max_push_body_bytes} bytes")
    frames: list[bytes] = []
    total = 0
    try:
        async for frame in iter_frames(request.content):
            total += len(frame) + FRAME_HEADER.size
            if total > cfg.max_push_body_bytes:
                return _error(413, f"push body larger than {cfg.max_push_body_bytes} bytes")
            frames.append(frame)
    except (FrameTooLarge, PeerMisbehaved) as e:
        return _error(400, f"bad push body: {e}")
    if len(frames) < 2:
        return _error(400, "a push carries a head record and at least one block")
    try:
        record = HeadRecord.from_json(frames[0])
    except InvalidHeadRecord as e:
        return _error(403, f"head record refused: {e}")
    if isinstance(ref, DatasetId) and ref != record.dataset_id:
        return _error(403, "head record is for another dataset")
    try:
        entry = ws.resolve(ref)
        ds: Dataset | None = ws.get(entry.id)
    except DatasetNotFound:
        ds = None
    if ds is None:
        if not cfg.allow_push_create:
            return _error(404, "no such dataset (creation by push is disabled)")
        alias = ref.as_multibase() if isinstance(ref, DatasetId) else ref
        alias = request.query.get("alias", alias)
        try:
            DatasetAlias.parse(alias)
        except InvalidName as e:
            return _error(400, f"invalid alias: {e}")
        with contextlib.suppress(DatasetNotFound):
            ws.resolve(record.dataset_id)
            return _error(409, "dataset exists under another alias")
    else:
        alias = ""
    async with request.app[_PUSH_LOCK]:
        try:
            plan = await asyncio.to_thread(_plan_push, ds, record, frames[1:])
            head = await asyncio.to_thread(_apply_push, ws, request.app[_STORE], ds, plan, alias)
        except (StaleHead, Equivocation, NotDescendant) as e:
            return _error(409, str(e))
        except InvalidHeadRecord as e:
            return _error(403, str(e))
        except RefCASFailed as e:
            return _error(409, f"head moved: {e}")
        except (DatasetExists, InvalidAlias) as e:
            return _error(409, str(e))
    return web.json_response(
        {"head": head.to_multibase(), "sequenceNumber": record.sequence_number}
    )


async def ingest(request: web.Request) -> web.StreamResponse:
    cfg = request.app[_CFG]
    if not cfg.allow_ingest:
        return _error(403, "push ingest is disabled on this node")
    ds = _open(request)
    state = ds.state()
    if state is None or not request.app[_WS].keys.has(state.dataset_id):
        # A replica must not grow its own history: only the owner's node ingests.
        return _error(403, "this node does not own the dataset")
    try:
        from node.ingest.errors import IngestError, SourceNotFound
        from node.ingest.pipeline import ingest as run_ingest
    except ImportError:
        return _error(501, "push ingest is not available on this node")
    length = request.content_length
    if length is not None and length > cfg.max_ingest_body_bytes:
        return _error(413, f"ingest body larger than {cfg.max_ingest_body_bytes} bytes")
    source_name = request.match_info.get("source")
    media = request.content_type
    input_format = request.query.get("format") or (
        None if media in ("application/octet-stream", "") else media
    )
    with tempfile.TemporaryDirectory(prefix="odf-ingest-") as tmp:
        path = Path(tmp) / "input"
        total = 0
        with open(path, "wb") as f:
            async for chunk in request.content.iter_chunked(UPLOAD_CHUNK_SIZE):
                total += len(chunk)
                if total > cfg.max_ingest_body_bytes:
                    return _error(413, f"ingest body larger than {cfg.max_ingest_body_bytes}")
                f.write(chunk)
        try:
            result = await asyncio.to_thread(
                run_ingest,
                ds,
                [path],
                source_name=source_name,
                input_format=input_format,
                workdir=Path(tmp),
            )
        except SourceNotFound as e:
            return _error(404, str(e))
        except IngestError as e:
            return _error(400, str(e))
        except RefCASFailed as e:
            return _error(409, f"head moved: {e}")
    return web.json_response(
        {
            "oldHead": result.old_head.to_multibase() if result.old_head else None,
            "newHead": result.new_head.to_multibase() if result.new_head else None,
            "numRecords": result.num_records,
            "blocks": [h.to_multibase() for h in result.blocks],
        }
    )


# -- node JSON ------------------------------------------------------------------------------


async def api_status(request: web.Request) -> web.StreamResponse:
    ws = request.app[_WS]
    datasets = await asyncio.to_thread(ws.list)
    doc: dict[str, Any] = {
        "node": "odf-node",
        "workspace": str(ws.root),
        "datasets": len(datasets),
        "uptimeSeconds": round(time.monotonic() - request.app[_STARTED], 3),
    }
    doc.update(request.app[_HOOKS].status())
    return web.json_response(doc)


def _dataset_rows(ws: Workspace, store: HeadStore) -> list[dict[str, Any]]:
    rows = []
    for entry in ws.list():
        try:
            state = ws.get(entry.id).state()
        except (StorageError, FbsError):
            state = None
        try:
            held = store.get(entry.id)
        except P2PError:
            held = None
        rows.append(
            {
                "alias": entry.alias,
                "id": entry.id.to_did_odf(),
                "head": state.head.to_multibase() if state else None,
                "sequenceNumber": state.sequence_number if state else None,
                "kind": state.kind.name if state else None,
                "records": state.num_records if state else 0,
                "dataSize": state.data_size if state else 0,
                "signedHead": held.to_dict() if held is not None else None,
                "owned": ws.keys.has(entry.id),
            }
        )
    return rows


async def api_datasets(request: web.Request) -> web.StreamResponse:
    rows = await asyncio.to_thread(_dataset_rows, request.app[_WS], request.app[_STORE])
    return web.json_response(rows)


async def api_peers(request: web.Request) -> web.StreamResponse:
    peers = [dict(p) for p in request.app[_HOOKS].peers()]
    return web.json_response(peers)


async def not_found(request: web.Request) -> web.StreamResponse:
    return _error(404, "not found")


# -- application ----------------------------------------------------------------------------


def _keystore_signer(ws: Workspace) -> Signer:
    def signer(did: DatasetId) -> KeyPair | None:
        return ws.keys.load(did) if ws.keys.has(did) else None

    return signer


def create_app(
    workspace: Workspace,
    *,
    signer: Signer | None = None,
    config: HttpApiConfig | None = None,
    head_store: HeadStore | None = None,
    peers: PeersProvider | None = None,
    status: StatusProvider | None = None,
    extra_routes: Callable[[web.Application], None] | None = None,
) -> web.Application:
    """The HTTP API of a node serving ``workspace`` (see the module docstring).

    Args:
        workspace: the datasets served.
        signer: the key pair of a dataset this node owns, or ``None`` (default: the
            workspace key store). Pass ``lambda _did: None`` to never sign.
        config: limits and switches, the token and the accepted host names.
        head_store: the high-water marks (default: the workspace's).
        peers: provider of the ``/api/peers`` list (default: empty).
        status: provider of extra ``/api/status`` fields (peer id, listen addresses).
        extra_routes: called with the app after the built-in routes and before the
            final catch-all (which would shadow routes added later), e.g. to add
            `node.attest_api.add_attestation_routes` or the daemon's endpoints.

    Raises:
        TokenFileError: the workspace's token file is unsafe or malformed.
    """
    app = web.Application(middlewares=[_guard], client_max_size=1 << 20)
    app[_WS] = workspace
    app[_CFG] = config = config or HttpApiConfig()
    token = config.token if config.token is not None else load_or_create_token(workspace.root)
    app[_POLICY] = AccessPolicy.create(token, config.allowed_hosts)
    app[_STORE] = head_store or HeadStore.for_workspace(workspace.root)
    app[_HOOKS] = _Hooks(
        signer=signer or _keystore_signer(workspace),
        peers=peers or (lambda: []),
        status=status or (lambda: {}),
    )
    app[_STARTED] = time.monotonic()
    app[_PUSH_LOCK] = asyncio.Lock()
    r = app.router
    r.add_get("/api/status", api_status)
    r.add_get("/api/datasets", api_datasets)
    r.add_get("/api/peers", api_peers)
    # Any segment matches; `_dataset_ref` refuses invalid names with 400 (not 404).
    for prefix in ("/{dataset}", "/{account}/{dataset}"):
        r.add_get(prefix + "/refs/head", get_head)
        r.add_get(prefix + "/refs/head.sig", get_head_record)
        r.add_get(prefix + "/refs/{ref}", get_other_ref)
        r.add_get(prefix + "/blocks", get_blocks_batch)
        r.add_get(prefix + "/blocks/{hash}", get_block)
        r.add_get(prefix + "/data/{hash}", get_object)
        r.add_get(prefix + "/checkpoints/{hash}", get_object)
        r.add_put(prefix + "/data/{hash}", put_object)
        r.add_put(prefix + "/checkpoints/{hash}", put_object)
        r.add_post(prefix + "/push", push)
        r.add_post(prefix + "/ingest", ingest)
        r.add_post(prefix + "/ingest/{source}", ingest)
    if extra_routes is not None:
        extra_routes(app)
    r.add_route("*", "/{tail:.*}", not_found)
    return app
