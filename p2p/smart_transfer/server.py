"""Smart Transfer Protocol v1, server side: ``GET pull`` and ``GET push`` WebSockets.

Both routes live under a dataset base path next to the simple protocol's
(`p2p.http.server.TRANSFER_ROUTES`; `SMART_ROUTES` lists them) and answer 400 before
the upgrade to a request without ``x-odf-smtp-version: 1``. Pull is read-only and open
like the simple protocol; push changes state, so the node's access checks want its
bearer token before the upgrade (`node.http.auth`), as for ``PUT`` and ``POST push``.

Pull serves the requested interval of the chain as one gzip-tar batch and objects as
``HttpDownload`` URLs of this node's own ``data/`` and ``checkpoints/`` routes. The plan
and the batch message of an interval are kept for the next client that asks for it
(`p2p.smart_transfer.plan_cache`: blocks never change under their hash; answers for a
dataset's older heads are dropped when its head moves).

Push takes the new blocks as one batch and checks them at once by the receive path
(`p2p.receive`: each block hashed before it is parsed and compared with the name it came
under, then the chain rules on top of the node's head). Missing objects are answered
with ``HttpUpload`` URLs of the node's ``PUT`` route (which verifies each upload before it
gets its name); at ``DatasetPushComplete`` every object must be stored with its declared
size, and the blocks are appended with one compare-and-swap of the head. A push to a
dataset the node does not have creates it from its Seed (installed whole from
``staging/``) when the objects are first asked for, as kamu does; its alias is the
path's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiohttp import WSMsgType, web

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, InvalidName, MalformedBlock
from fbs.model import Seed
from fbs.multiformats import Multihash
from p2p.errors import PeerMisbehaved
from p2p.http.server import (
    SERVER,
    HttpError,
    Route,
    TransferServer,
    error_response,
    open_dataset,
)
from p2p.receive import (
    ChainRuleBroken,
    ObjectJob,
    ReceivedBlock,
    commit_received,
    object_jobs,
    receive_block,
    stored_size,
    validate_chain,
)
from p2p.smart_transfer.messages import (
    EMPTY,
    MAX_MESSAGE_BYTES,
    SMTP_VERSION,
    SMTP_VERSION_HEADER,
    ErrorReply,
    MalformedMessage,
    ObjectFile,
    PullObjectsRequest,
    PullObjectsResponse,
    PullRequest,
    PullStrategy,
    PushMetadataRequest,
    PushObjectsAccepted,
    PushObjectsRequest,
    PushRequest,
    PushStrategy,
    TransferPlan,
    TransferUrl,
    UploadProgress,
    dumps,
    internal_error,
    loads,
    metadata_response_text,
    ok,
    pack_blocks,
    unpack_blocks,
)
from p2p.smart_transfer.plan import transfer_plan
from p2p.smart_transfer.plan_cache import PLAN_CACHE, CachedPull, PullKey
from storage.chain import ChainState
from storage.dataset import Dataset
from storage.errors import (
    DatasetExists,
    DatasetNotFound,
    InvalidAlias,
    ObjectNotFound,
    RefCASFailed,
    StorageError,
)
from storage.staging import open_staging, staging_lock

__all__ = [
    "CLIENT_IDLE_TIMEOUT_S",
    "MAX_PULL_MESSAGE_BYTES",
    "SMART_PUSH_SUFFIX",
    "SMART_ROUTES",
    "UPLOAD_PROGRESS_PING_S",
    "smart_pull",
    "smart_push",
]

log = logging.getLogger(__name__)

#: Longest message a pull client may send (its requests are small, and pull is open to
#: anyone: a push, behind the token, may send `MAX_MESSAGE_BYTES`).
MAX_PULL_MESSAGE_BYTES: Final = 64 << 20
#: Seconds the server waits for the client's next message before it gives up.
CLIENT_IDLE_TIMEOUT_S: Final = 300.0
#: Seconds between the server's upload-progress pings while the client uploads.
UPLOAD_PROGRESS_PING_S: Final = 10.0
#: Most progress pings left unanswered before the server gives up on an upload.
MAX_UNANSWERED_PINGS: Final = 30
#: Longest close reason a WebSocket frame can carry (RFC 6455: 125 bytes less the code).
MAX_CLOSE_REASON: Final = 123
#: Seconds the server waits for the client to close after the last reply.
CLOSE_WAIT_S: Final = 5.0
#: Close code of a failed transfer (the Err JSON is the reason), as kamu sends it.
CLOSE_INTERNAL_ERROR: Final = 1011
#: Staging directory name prefix of a dataset created by a smart push.
SMART_PUSH_STAGING_PREFIX: Final = "smart-push-"


class _Abort(Exception):
    """End the exchange: close with ``reply`` as the reason (a failed transfer)."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(reply.describe())
        self.reply = reply


# -- the socket -------------------------------------------------------------------------------


def _check_version(request: web.Request) -> None:
    if request.headers.get(SMTP_VERSION_HEADER, "").strip() != str(SMTP_VERSION):
        raise HttpError(400, f"{SMTP_VERSION_HEADER}: {SMTP_VERSION} required")


async def _open_socket(request: web.Request, max_msg_size: int) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=max_msg_size, autoping=True)
    if not ws.can_prepare(request).ok:
        raise HttpError(400, "a WebSocket upgrade is required")
    await ws.prepare(request)
    return ws


async def _receive(
    ws: web.WebSocketResponse, timeout: float = CLIENT_IDLE_TIMEOUT_S
) -> dict[str, Any] | None:
    """The client's next message, ``None`` if it closed the socket.

    Raises:
        MalformedMessage: not a JSON text message.
        TimeoutError: nothing within ``timeout`` seconds.
    """
    msg = await ws.receive(timeout=timeout)
    if msg.type == WSMsgType.TEXT:
        return loads(msg.data)
    if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
        return None
    raise MalformedMessage("a smart-protocol message must be a text frame")


async def _expect(
    ws: web.WebSocketResponse, direction: Literal["Pull", "Push"], phase: str
) -> dict[str, Any]:
    try:
        doc = await _receive(ws)
    except TimeoutError:
        raise _Abort(internal_error(direction, phase, "timed out waiting for the client")) from None
    if doc is None:
        raise _Abort(internal_error(direction, phase, "client closed the socket"))
    return doc


async def _send(ws: web.WebSocketResponse, doc: Any) -> None:
    await ws.send_str(dumps(doc))


def close_reason(reply: ErrorReply) -> str:
    """``reply`` as JSON short enough for a close frame (the message is cut to fit)."""
    fields = dict(reply.fields)
    text = dumps(reply.to_doc())
    message = str(fields.get("error_message", ""))
    while len(text.encode()) > MAX_CLOSE_REASON and message:
        message = message[: max(0, len(message) - max(1, len(text.encode()) - MAX_CLOSE_REASON))]
        fields["error_message"] = message
        text = dumps(ErrorReply(reply.variant, fields).to_doc())
    return text if len(text.encode()) <= MAX_CLOSE_REASON else dumps({"Err": reply.variant})


async def _wait_for_close(ws: web.WebSocketResponse) -> None:
    """Let the client close first (kamu's client closes after the last reply and fails if
    the server already did); give up after `CLOSE_WAIT_S`."""
    with contextlib.suppress(TimeoutError, MalformedMessage):
        async with asyncio.timeout(CLOSE_WAIT_S):
            while await _receive(ws, timeout=CLOSE_WAIT_S) is not None:
                pass


async def _run(
    ws: web.WebSocketResponse, flow: Awaitable[None], what: str
) -> web.WebSocketResponse:
    """Run a protocol flow; a failure closes the socket with its error as the reason."""
    direction: Literal["Pull", "Push"] = "Pull" if what == "pull" else "Push"
    reply: ErrorReply | None = None
    try:
        await flow
    except _Abort as e:
        log.info("smart %s refused: %s", what, e)
        reply = e.reply
    except MalformedMessage as e:
        log.info("smart %s: malformed message: %s", what, e)
        reply = internal_error(direction, "InitialRequest", f"malformed message: {e}")
    except TimeoutError:
        reply = internal_error(direction, "InitialRequest", "timed out waiting for the client")
    if reply is not None:
        await ws.close(code=CLOSE_INTERNAL_ERROR, message=close_reason(reply).encode())
    elif not ws.closed:
        await _wait_for_close(ws)
    if not ws.closed:
        await ws.close()
    return ws


def _base_url(request: web.Request) -> str:
    """The dataset base URL the client used (``…/<dataset>/``), for object URLs."""
    url = str(request.url.with_query(None))
    return url[: url.rfind("/") + 1]


def _object_url(base: str, f: ObjectFile, request: web.Request) -> TransferUrl:
    """The simple-protocol URL of ``f`` on this node, with the headers to send there."""
    rel = "data/" if f.object_type == "DataSlice" else "checkpoints/"
    headers = [(SMTP_VERSION_HEADER, str(SMTP_VERSION))]
    auth = request.headers.get("Authorization")
    if auth:
        headers.append(("Authorization", auth))
    return TransferUrl(base + rel + f.physical_hash.to_multibase(), tuple(headers), None)


# -- pull -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Interval:
    """The blocks of a pull, oldest first, and its transfer plan."""

    blocks: list[tuple[Multihash, bytes]]
    plan: TransferPlan


class _InvalidInterval(Exception):
    def __init__(self, head: Multihash, tail: Multihash) -> None:
        super().__init__(f"{tail} is not an ancestor of {head}")
        self.head, self.tail = head, tail


def _interval(ds: Dataset, req: PullRequest) -> _Interval | None:
    """The blocks after ``begin_after`` up to ``stop_at`` (or the head); ``None``: no head.

    With ``force_update_if_diverged`` a ``begin_after`` that is not in the chain gives the
    whole chain (kamu's ``pull --force``: the client replaces its diverged copy; serving
    it changes nothing here).

    Raises:
        _InvalidInterval: ``begin_after`` is not in that chain (without force), or
            ``stop_at`` is unknown.
    """
    head = req.stop_at or ds.head()
    if head is None:
        return None
    found: list[tuple[Multihash, bytes, Any]] = []
    h: Multihash | None = head
    try:
        while h is not None and h != req.begin_after:
            raw, block = ds.get_block(h)
            found.append((h, raw, block))
            h = block.prev_block_hash
    except ObjectNotFound:
        raise _InvalidInterval(head, req.begin_after or head) from None
    if h != req.begin_after and not req.force_update_if_diverged:
        assert req.begin_after is not None
        raise _InvalidInterval(head, req.begin_after)
    found.reverse()
    plan, _jobs = transfer_plan(found)
    return _Interval([(hh, r) for hh, r, _b in found], plan)


def _read_interval(ds: Dataset, req: PullRequest) -> _Interval | None:
    """`_interval`, its failures as the pull's refusals.

    Raises:
        _InvalidInterval: see `_interval`.
        _Abort: the stored chain cannot be read.
    """
    try:
        return _interval(ds, req)
    except (StorageError, MalformedBlock) as e:
        log.error("smart pull: reading the chain: %s", e)
        raise _Abort(internal_error("Pull", "InitialRequest", "stored chain is damaged")) from None


def _message(interval: _Interval) -> str:
    """The ``DatasetMetadataPullResponse`` text of ``interval``."""
    return metadata_response_text(pack_blocks(interval.blocks))


def _pull_key(ds: Dataset, req: PullRequest) -> PullKey | None:
    """The cache key of ``req`` (``None``: the dataset has no head); answers of the
    dataset's older heads are dropped."""
    head = ds.head()
    if head is None:
        return None
    PLAN_CACHE.forget_other_heads(str(ds.layout.root), head)
    return PullKey(
        str(ds.layout.root), req.stop_at or head, req.begin_after, req.force_update_if_diverged
    )


async def _reread_interval(ds: Dataset, req: PullRequest) -> _Interval:
    """The blocks of an interval whose plan was kept (read for the first batch asked).

    Raises:
        _Abort: the chain is no longer there as it was.
    """
    try:
        interval = await asyncio.to_thread(_read_interval, ds, req)
    except _InvalidInterval:
        interval = None
    if interval is None:
        raise _Abort(internal_error("Pull", "MetadataRequest", "the chain changed meanwhile"))
    return interval


async def _pull_flow(request: web.Request, ws: web.WebSocketResponse, ds: Dataset) -> None:
    req = PullRequest.from_doc(await _expect(ws, "Pull", "InitialRequest"))
    key = await asyncio.to_thread(_pull_key, ds, req)
    cached = PLAN_CACHE.get(key) if key is not None else None
    interval: _Interval | None = None
    if cached is None:
        try:
            interval = await asyncio.to_thread(_read_interval, ds, req)
        except _InvalidInterval as e:
            fields = {"head": e.head.to_multibase(), "tail": e.tail.to_multibase()}
            await _send(ws, ErrorReply("InvalidInterval", fields).to_doc())
            return
        if interval is None or key is None:
            raise _Abort(internal_error("Pull", "InitialRequest", "dataset has no head"))
        cached = CachedPull(interval.plan)
        PLAN_CACHE.put(key, cached)
    await _send(ws, ok({"transfer_plan": cached.plan.to_doc()}))
    if await _receive(ws) is None:
        return  # nothing to transfer: the client closes after the plan
    text = cached.message
    if text is None:
        if interval is None:  # the plan was kept, not the blocks: read them again
            interval = await _reread_interval(ds, req)
        text = await asyncio.to_thread(_message, interval)
        if key is not None:
            PLAN_CACHE.put(key, CachedPull(cached.plan, text))
    await ws.send_str(text)
    base = _base_url(request)
    while (doc := await _receive(ws)) is not None:
        files = PullObjectsRequest.from_doc(doc).object_files
        strategies = tuple(PullStrategy(f, _object_url(base, f, request)) for f in files)
        await _send(ws, PullObjectsResponse(strategies).to_doc())


async def smart_pull(request: web.Request) -> web.StreamResponse:
    """``GET pull`` (WebSocket): the pull sequence of the module docstring."""
    _check_version(request)
    ds = open_dataset(request)
    ws = await _open_socket(request, MAX_PULL_MESSAGE_BYTES)
    return await _run(ws, _pull_flow(request, ws, ds), "pull")


# -- push -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Push:
    """A push in progress: the target, the received blocks, the objects offered."""

    server: TransferServer
    ds: Dataset | None
    alias: str
    expected_id: DatasetId | None = None
    blocks: list[ReceivedBlock] = field(default_factory=list)
    state: ChainState | None = None


def _target(request: web.Request) -> tuple[Dataset | None, str]:
    """The dataset a push moves (``None``: it will be created) and a new one's alias.

    Raises:
        HttpError: 400 for an invalid name, 404 when creation by push is disabled.
    """
    server = request.app[SERVER]
    try:
        return open_dataset(request), ""
    except HttpError as e:
        if e.status != 404:
            raise
    name = request.match_info["dataset"]
    account = request.match_info.get("account")
    alias = name if account is None else f"{account}/{name}"
    try:
        DatasetAlias.parse(alias)
    except InvalidName as e:
        raise HttpError(400, f"invalid dataset reference: {e}") from None
    if not server.config.allow_push_create:
        raise HttpError(404, "no such dataset (creation by push is disabled)")
    return None, alias


def _receive_batch(push: _Push, req: PushMetadataRequest) -> None:
    """Hash, decode and chain-check the pushed blocks (the receive path; nothing written).

    Raises:
        _Abort: a block that is not what its name says, does not decode, or breaks a
            chain rule; a Seed sent to an existing dataset.
    """
    try:
        entries = unpack_blocks(req.new_blocks)
        blocks = [receive_block(raw, expected=h) for h, raw in entries]
    except PeerMisbehaved as e:
        raise _Abort(internal_error("Push", "MetadataRequest", str(e))) from None
    if not blocks:
        raise _Abort(internal_error("Push", "MetadataRequest", "no blocks"))
    local = push.ds.state() if push.ds is not None else None
    if local is not None and isinstance(blocks[0].block.event, Seed):
        raise _Abort(ErrorReply("SeedBlockOverwriteRestricted", {}))
    try:
        push.state = validate_chain(blocks, local)
    except ChainRuleBroken as e:
        what = "head moved (conflict)" if e.head_moved else "chain rule broken"
        raise _Abort(
            internal_error("Push", "MetadataRequest", f"{what} at {e.block}: {e.error}")
        ) from None
    push.blocks = blocks


def _create_from_seed(push: _Push) -> ErrorReply | None:
    """Install the dataset from the pushed Seed alone; the refusal, if any."""
    ws, seed = push.server.workspace, push.blocks[0]
    assert push.state is not None
    did = push.state.dataset_id
    if push.expected_id is not None and push.expected_id != did:
        return ErrorReply("RefCollision", {"dataset_id": push.expected_id.to_did_odf()})
    with contextlib.suppress(DatasetNotFound):
        ws.resolve(did)
        return ErrorReply("RefCollision", {"dataset_id": did.to_did_odf()})
    name = f"{SMART_PUSH_STAGING_PREFIX}{did.as_multibase()}"
    try:
        with staging_lock(ws, name):
            staged = open_staging(ws, name)
            commit_received(ws, [seed], local=None, staged=staged, alias=push.alias, dataset_id=did)
    except (DatasetExists, InvalidAlias):
        return ErrorReply("NameCollision", {"dataset_alias": push.alias})
    push.ds = ws.get(did)
    push.blocks = push.blocks[1:]
    return None


def _strategies(
    push: _Push, files: Sequence[ObjectFile], request: web.Request
) -> PushObjectsAccepted:
    assert push.ds is not None
    base = _base_url(request)
    out = []
    for f in files:
        have = stored_size(push.ds.layout, ObjectJob(f.kind, f.physical_hash, f.size))
        out.append(PushStrategy(f, None if have == f.size else _object_url(base, f, request)))
    return PushObjectsAccepted(tuple(out))


async def _await_uploads(ws: web.WebSocketResponse) -> None:
    """Ping for progress until the client reports its uploads complete."""
    unanswered = 0
    while True:
        try:
            doc = await _receive(ws, timeout=UPLOAD_PROGRESS_PING_S)
        except TimeoutError:
            unanswered += 1
            if unanswered > MAX_UNANSWERED_PINGS:
                raise _Abort(
                    internal_error("Push", "ObjectsUploadProgress", "upload stalled")
                ) from None
            await _send(ws, EMPTY)
            continue
        if doc is None:
            raise _Abort(internal_error("Push", "ObjectsUploadProgress", "client went away"))
        unanswered = 0
        if UploadProgress.from_doc(doc).complete:
            return


def _commit(push: _Push) -> None:
    """Append the remaining blocks by compare-and-swap, their objects checked first.

    Raises:
        _Abort: an object missing or of another size, or the head moved meanwhile.
    """
    assert push.ds is not None
    if not push.blocks:
        return
    for job in object_jobs(b.block for b in push.blocks):
        if stored_size(push.ds.layout, job) != job.size:
            msg = f"not uploaded: {job.kind} object {job.hash}"
            raise _Abort(internal_error("Push", "CompleteRequest", msg))
    try:
        commit_received(push.server.workspace, push.blocks, local=push.ds)
    except (RefCASFailed, StorageError) as e:
        # Sequence or parent refused (rules 2, 3) means another writer moved the head
        # between the metadata check and now: the same conflict as a failed swap.
        moved = isinstance(e, RefCASFailed) or getattr(e, "rule", None) in (2, 3)
        msg = f"head moved (conflict): {e}" if moved else f"refused: {e}"
        raise _Abort(internal_error("Push", "CompleteRequest", msg)) from None


async def _push_flow(request: web.Request, ws: web.WebSocketResponse, push: _Push) -> None:
    req = PushRequest.from_doc(await _expect(ws, "Push", "InitialRequest"))
    actual = push.ds.head() if push.ds is not None else None
    if req.current_head != actual:
        fields = {
            "actual_head": actual and actual.to_multibase(),
            "expected_head": req.current_head and req.current_head.to_multibase(),
        }
        await _send(ws, ErrorReply("InvalidHead", fields).to_doc())
        return
    await _send(ws, ok(EMPTY))
    meta = PushMetadataRequest.from_doc(await _expect(ws, "Push", "MetadataRequest"))
    await asyncio.to_thread(_receive_batch, push, meta)
    await _send(ws, ok(EMPTY))
    while "object_files" in (doc := await _expect(ws, "Push", "ObjectsRequest")):
        objects = PushObjectsRequest.from_doc(doc)
        if push.ds is None:
            refused = await asyncio.to_thread(_create_from_seed, push)
            if refused is not None:
                await _send(ws, refused.to_doc())
                return
        accepted = await asyncio.to_thread(_strategies, push, objects.object_files, request)
        await _send(ws, ok(accepted.to_doc()))
        await _await_uploads(ws)
    # `doc` is DatasetPushComplete {}
    if push.ds is None:
        refused = await asyncio.to_thread(_create_from_seed, push)
        if refused is not None:
            raise _Abort(refused)
    async with push.server.push_lock:
        await asyncio.to_thread(_commit, push)
    await _send(ws, EMPTY)


async def smart_push(request: web.Request) -> web.StreamResponse:
    """``GET push`` (WebSocket, bearer token): the push sequence of the module docstring."""
    server = request.app[SERVER]
    if not server.config.allow_push:
        return error_response(403, "push is disabled on this node")
    _check_version(request)
    ds, alias = _target(request)
    expected: DatasetId | None = None
    with contextlib.suppress(FbsError):
        expected = DatasetId.from_multibase(request.match_info["dataset"])
    ws = await _open_socket(request, MAX_MESSAGE_BYTES)
    push = _Push(server, ds, alias, expected)
    return await _run(ws, _push_flow(request, ws, push), "push")


#: Path suffix of the push route: a GET that changes state (the node wants its token).
SMART_PUSH_SUFFIX: Final = "/push"

#: The smart-protocol routes, relative to a dataset base path (as `TRANSFER_ROUTES`).
SMART_ROUTES: Final = (
    Route("GET", "/pull", smart_pull),
    Route("GET", SMART_PUSH_SUFFIX, smart_push),
)
