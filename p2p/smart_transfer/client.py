"""Smart Transfer Protocol v1, client side: `SmartSource` (pull) and `smart_push`.

`SmartSource` is an `ObjectSource` for `p2p.sync.pull_dataset`, so a smart pull is
verified and committed exactly like every other pull (`p2p.receive`): the head comes
from ``GET refs/head`` (and a signed record from ``refs/head.sig`` when the node has
one), the blocks from one ``pull`` exchange (one gzip-tar batch, every block hashed by
`pull_dataset` before it is parsed), the objects from the ``HttpDownload`` URLs the
server hands out, streamed into quarantine and hashed on the way.

`smart_push` reads the node's head over the simple protocol (as kamu does), sends the
new blocks as one batch, uploads the objects the node asks for to the ``HttpUpload``
URLs (answering its progress pings) and completes; the node commits by
compare-and-swap. With nothing new it never opens the socket.

URLs are dataset base URLs, ``http(s)://host/<dataset>/``; `smart_url` turns a kamu repo
URL ``odf+http(s)://…`` into one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import aiohttp

from fbs.multiformats import Multihash
from p2p.errors import (
    NameConflict,
    NotDescendant,
    PeerMisbehaved,
    PeerUnavailable,
    TransferError,
    TransferTimeout,
    first_error,
)
from p2p.http.source import DEFAULT_READ_TIMEOUT_S, HttpSource, Unauthorized
from p2p.receive import ObjectJob, ObjectKind
from p2p.smart_transfer.messages import (
    COMPLETE,
    EMPTY,
    MAX_MESSAGE_BYTES,
    SMTP_VERSION,
    SMTP_VERSION_HEADER,
    BlocksBatch,
    ErrorReply,
    MalformedMessage,
    ObjectFile,
    PullMetadataResponse,
    PullObjectsRequest,
    PullObjectsResponse,
    PullRequest,
    PushMetadataRequest,
    PushObjectsAccepted,
    PushObjectsRequest,
    PushRequest,
    TransferPlan,
    TransferUrl,
    UploadProgress,
    decode_result,
    dumps,
    loads,
    pack_blocks,
    unpack_blocks,
)
from p2p.smart_transfer.plan import transfer_plan
from storage.dataset import Dataset
from storage.fsutil import write_all
from storage.verified import verified_object_path
from storage.workspace import Workspace

__all__ = [
    "SMART_SCHEMES",
    "SmartPushResult",
    "SmartRefused",
    "SmartSource",
    "is_smart_url",
    "smart_push",
    "smart_url",
]

#: URL prefixes of kamu's ODF repositories, spoken to with the smart protocol.
SMART_SCHEMES: Final = ("odf+http://", "odf+https://")
#: Parallel object downloads a `SmartSource` asks `pull_dataset` for.
SMART_PARALLEL_OBJECTS: Final = 8
#: Parallel object uploads of `smart_push`.
SMART_UPLOAD_CONCURRENCY: Final = 8
#: Seconds to wait for any server message before the transfer counts as stalled.
SERVER_REPLY_TIMEOUT_S: Final = 300.0
#: Progress pings that may still arrive after our ``Complete`` (the server stops pinging
#: once it reads it; one can be in flight).
MAX_STALE_PINGS: Final = 3
#: Network chunk size of object downloads.
CHUNK_SIZE: Final = 1 << 20


class SmartRefused(TransferError):
    """The server answered with an error (``Err{...}`` or a close frame carrying one).

    Attributes:
        reply: the server's error.
    """

    def __init__(self, what: str, reply: ErrorReply) -> None:
        super().__init__(f"{what}: server refused: {reply.describe()}")
        self.reply = reply


def is_smart_url(url: str) -> bool:
    """Whether ``url`` is a kamu ODF repository URL (``odf+http(s)://``)."""
    return url.lower().startswith(SMART_SCHEMES)


def smart_url(url: str) -> str:
    """The ``http(s)://`` dataset base URL of an ``odf+http(s)://`` URL (ends in ``/``)."""
    plain = url[4:] if is_smart_url(url) else url
    return plain if plain.endswith("/") else plain + "/"


def _ws_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {**dict(headers or {}), SMTP_VERSION_HEADER: str(SMTP_VERSION)}


def _collision(reply: ErrorReply) -> str | None:
    """What a push refused for a name collision collided with (``None``: another error)."""
    fields = reply.fields if isinstance(reply.fields, dict) else {}
    if reply.variant == "RefCollision":
        did = fields.get("dataset_id", "this dataset")
        return f"the node holds this dataset ({did}) under another name: push to that name"
    if reply.variant == "NameCollision":
        alias = fields.get("dataset_alias", "this name")
        return f"the node has another dataset named {alias}: push under another name"
    return None


def _conflict(reply: ErrorReply) -> bool:
    return reply.variant == "InvalidHead" or "head moved" in str(
        reply.fields.get("error_message", "")
    )


class _Channel:
    """One smart-protocol WebSocket: a reader task queues the server's messages."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, what: str) -> None:
        self._ws = ws
        self._what = what
        self._queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, session: aiohttp.ClientSession, url: str, headers: Mapping[str, str] | None
    ) -> AsyncIterator[_Channel]:
        """Connect to ``url`` (``…/pull`` or ``…/push``).

        Raises:
            Unauthorized: HTTP 401 before the upgrade.
            PeerUnavailable: 404 (no such dataset).
            TransferError: other refusals, connection problems.
        """
        try:
            ws = await session.ws_connect(
                url, headers=_ws_headers(headers), max_msg_size=MAX_MESSAGE_BYTES, autoping=True
            )
        except aiohttp.WSServerHandshakeError as e:
            if e.status == 401:
                raise Unauthorized(f"{url}: HTTP 401: authentication required") from None
            if e.status == 404:
                raise PeerUnavailable(f"{url}: no such dataset") from None
            raise TransferError(f"{url}: HTTP {e.status}: {e.message}") from None
        except aiohttp.ClientError as e:
            raise TransferError(f"{url}: {type(e).__name__}: {e}") from None
        chan = cls(ws, url)
        try:
            yield chan
        finally:
            await chan.close()

    async def _read(self) -> None:
        while True:
            msg = await self._ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT:
                try:
                    self._queue.put_nowait(loads(msg.data))
                except MalformedMessage as e:
                    self._queue.put_nowait(e)
                continue
            if msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1011 and msg.extra:
                self._queue.put_nowait(self._close_error(str(msg.extra)))
            elif msg.type == aiohttp.WSMsgType.BINARY:
                self._queue.put_nowait(MalformedMessage("server sent a binary frame"))
                continue
            self._queue.put_nowait(TransferError(f"{self._what}: the server closed the socket"))
            return

    def _close_error(self, reason: str) -> BaseException:
        try:
            result = decode_result(loads(reason))
        except MalformedMessage:
            return TransferError(f"{self._what}: server failed: {reason[:200]}")
        if isinstance(result, ErrorReply):
            return SmartRefused(self._what, result)
        return TransferError(f"{self._what}: server closed the socket")

    async def recv(self, timeout: float = SERVER_REPLY_TIMEOUT_S) -> dict[str, Any]:
        """The server's next message.

        Raises:
            SmartRefused / TransferError / MalformedMessage: the server failed the
                transfer, closed the socket or sent garbage.
            TransferTimeout: nothing within ``timeout`` seconds.
        """
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            raise TransferTimeout(f"{self._what}: no answer in {timeout:.0f} s") from None
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)  # every later read fails the same way
            raise item
        return item

    async def result(self) -> Mapping[str, Any]:
        """The ``Ok`` body of the server's next message (a result).

        Raises:
            SmartRefused: an ``Err``.
        """
        res = decode_result(await self.recv())
        if isinstance(res, ErrorReply):
            raise SmartRefused(self._what, res)
        return res

    async def send(self, doc: Mapping[str, Any]) -> None:
        """Send one message."""
        try:
            await self._ws.send_str(dumps(doc))
        except (ConnectionError, aiohttp.ClientError) as e:
            raise TransferError(f"{self._what}: connection lost: {e}") from None

    async def close(self) -> None:
        """Close the socket (normal closure) and stop the reader."""
        with contextlib.suppress(Exception):
            await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


# -- downloads and uploads --------------------------------------------------------------------


_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_APPEND_FLAGS: Final = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)


def _write_piece(hasher: Any, dest: Path, chunk: bytes, first: bool) -> None:
    """Hash ``chunk`` and write it to ``dest``: a new file for the first piece, appended
    after that. The file is opened and closed here, so no descriptor outlives the call
    (a cancelled download leaves none open)."""
    hasher.update(chunk)
    fd = os.open(dest, _CREATE_FLAGS if first else _APPEND_FLAGS, 0o600)
    try:
        write_all(fd, chunk)
    finally:
        os.close(fd)


async def _off_loop(hasher: Any, dest: Path, chunk: bytes, first: bool) -> None:
    """`_write_piece` on a worker thread: creating a file costs milliseconds on a busy
    disk, and on the event loop it would hold up every other download. A cancelled
    caller still waits for the thread (it cannot be interrupted), so the caller's
    cleanup of ``dest`` comes after it."""
    job = asyncio.ensure_future(asyncio.to_thread(_write_piece, hasher, dest, chunk, first))
    try:
        await asyncio.shield(job)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await job
        raise


async def _download(
    session: aiohttp.ClientSession, url: TransferUrl, dest: Path, expected_size: int | None
) -> bytes:
    """Stream ``url`` into the new file ``dest``; the SHA3-256 of what was written.

    Raises:
        PeerUnavailable: 404.
        PeerMisbehaved: more bytes than ``expected_size``.
        TransferError / TransferTimeout: other statuses, connection problems, stalls.
    """
    hasher = hashlib.sha3_256()
    timeout = aiohttp.ClientTimeout(total=None, sock_read=DEFAULT_READ_TIMEOUT_S)
    try:
        async with session.get(url.url, headers=list(url.headers), timeout=timeout) as r:
            if r.status == 404:
                raise PeerUnavailable(f"{url.url}: not found")
            if r.status != 200:
                raise TransferError(f"GET {url.url}: HTTP {r.status}")
            total = 0
            async for chunk in r.content.iter_chunked(CHUNK_SIZE):
                total += len(chunk)
                if expected_size is not None and total > expected_size:
                    raise PeerMisbehaved(f"{url.url}: more than {expected_size} bytes")
                await _off_loop(hasher, dest, chunk, first=total == len(chunk))
            if total == 0:
                await _off_loop(hasher, dest, b"", first=True)
    except TimeoutError:
        raise TransferTimeout(f"GET {url.url}: timed out") from None
    except aiohttp.ClientError as e:
        raise TransferError(f"GET {url.url}: {type(e).__name__}: {e}") from None
    return hasher.digest()


async def _upload(session: aiohttp.ClientSession, url: TransferUrl, path: Path, size: int) -> None:
    """PUT the file ``path`` to ``url`` with the strategy's headers.

    Raises:
        Unauthorized: 401.
        TransferError: any other failure.
    """
    headers = [
        *url.headers,
        ("Content-Type", "application/octet-stream"),
        ("Content-Length", str(size)),
    ]
    try:
        with open(path, "rb") as f:
            async with session.put(url.url, data=f, headers=headers) as r:
                if r.status == 401:
                    raise Unauthorized(f"PUT {url.url}: HTTP 401")
                if r.status >= 400:
                    body = (await r.content.read(300)).decode("utf-8", "replace")
                    raise TransferError(f"PUT {url.url}: HTTP {r.status}: {body}")
    except aiohttp.ClientError as e:
        raise TransferError(f"PUT {url.url}: {type(e).__name__}: {e}") from None


# -- pull -------------------------------------------------------------------------------------


class SmartSource(HttpSource):
    """An `ObjectSource` speaking the smart protocol to one dataset base URL.

    ``get_head`` and ``get_head_record`` are the simple protocol's (`HttpSource`);
    ``get_blocks`` runs the pull exchange and keeps the socket for ``get_object``'s
    download URLs. Use it as an async context manager (or call `aclose`).
    """

    parallel_objects: int = SMART_PARALLEL_OBJECTS

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession,
        *,
        headers: dict[str, str] | None = None,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        super().__init__(
            smart_url(base_url), session, headers=headers, read_timeout_s=read_timeout_s
        )
        self._chan_cm: contextlib.AbstractAsyncContextManager[_Channel] | None = None
        self._chan: _Channel | None = None
        self._objects: list[ObjectFile] = []
        self._urls: dict[tuple[str, Multihash], TransferUrl] = {}
        self._urls_lock = asyncio.Lock()
        self._prefetch: asyncio.Future[TransferUrl] | None = None
        self.plan: TransferPlan | None = None

    def __repr__(self) -> str:
        return f"SmartSource({self.base_url!r})"

    async def __aenter__(self) -> SmartSource:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pull socket, if open (and drop a URL request still under way)."""
        if self._prefetch is not None:
            prefetch, self._prefetch = self._prefetch, None
            prefetch.cancel()
            with contextlib.suppress(BaseException):
                await prefetch
        if self._chan_cm is not None:
            cm, self._chan_cm, self._chan = self._chan_cm, None, None
            await cm.__aexit__(None, None, None)

    async def _channel(self) -> _Channel:
        await self.aclose()  # one exchange per chain walk
        cm = _Channel.open(self._session, self.base_url + "pull", self._headers)
        self._chan = await cm.__aenter__()
        self._chan_cm = cm
        return self._chan

    async def _exchange(self, req: PullRequest) -> list[tuple[Multihash, bytes]] | None:
        """Run the pull request and metadata steps; the claimed blocks, oldest first
        (``None``: ``begin_after`` is not in the server's chain)."""
        chan = await self._channel()
        await chan.send(req.to_doc())
        reply = decode_result(await chan.recv())
        if isinstance(reply, ErrorReply):
            if reply.variant == "InvalidInterval":
                return None
            raise SmartRefused(self.base_url + "pull", reply)
        self.plan = TransferPlan.from_doc(reply.get("transfer_plan"))
        if self.plan.num_blocks == 0:
            return []
        await chan.send(EMPTY)
        meta = PullMetadataResponse.from_doc(await chan.recv())
        return await asyncio.to_thread(_claimed_blocks, meta.blocks)

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        """Blocks newest first from ``head`` back to ``stop_at`` (exclusive) or the Seed,
        in one exchange; when ``stop_at`` is not in the server's chain, the whole chain
        (`pull_dataset` then refuses it as not descending from the local head)."""
        entries = await self._exchange(PullRequest(begin_after=stop_at, stop_at=head))
        if entries is None:
            entries = await self._exchange(PullRequest(begin_after=None, stop_at=head))
            if entries is None:
                raise PeerUnavailable(f"{self.base_url}: block {head} not found")
        raws = [raw for _h, raw in entries]
        self._objects = []  # named by `expect_objects` once the blocks are checked
        self._urls.clear()
        raws.reverse()
        return raws

    def expect_objects(self, jobs: Sequence[ObjectJob]) -> None:
        """The objects `get_object` will be asked for: one URL request for all of them,
        started now (a task), so that its round trip overlaps what the pull does before
        its first download (`get_object` waits for it; a failure shows there)."""
        new = [j for j in jobs if (j.kind, j.hash) not in self._urls]
        wanted = [ObjectFile.of(j.kind, j.hash, j.size) for j in new]
        if not wanted:
            return
        self._objects = wanted
        if self._prefetch is None or self._prefetch.done():
            first = wanted[0]
            self._prefetch = asyncio.ensure_future(
                self._download_url(first.kind, first.physical_hash, first.size)
            )
            self._prefetch.add_done_callback(_retrieved)

    async def _download_url(self, kind: ObjectKind, h: Multihash, size: int | None) -> TransferUrl:
        async with self._urls_lock:
            if (kind, h) not in self._urls:
                wanted = self._objects or [ObjectFile.of(kind, h, size or 0)]
                if (kind, h) not in {(f.kind, f.physical_hash) for f in wanted}:
                    wanted = [ObjectFile.of(kind, h, size or 0)]
                chan = self._chan or await self._channel()
                await chan.send(PullObjectsRequest(tuple(wanted)).to_doc())
                for s in PullObjectsResponse.from_doc(await chan.recv()).strategies:
                    f = s.object_file
                    self._urls[(f.kind, f.physical_hash)] = s.download_from
                self._objects = []
            url = self._urls.get((kind, h))
        if url is None:
            raise PeerUnavailable(f"{self.base_url}: no download URL for {kind} object {h}")
        return url

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        """Download object ``h`` from its ``HttpDownload`` URL into ``dest_path``."""
        url = await self._download_url(kind, h, expected_size)
        return await _download(self._session, url, dest_path, expected_size)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a prefetch's outcome as seen: its failure is reported by the `get_object`
    that asks again, not as an unretrieved task exception."""
    if not task.cancelled():
        task.exception()


def _claimed_blocks(batch: BlocksBatch) -> list[tuple[Multihash, bytes]]:
    return unpack_blocks(batch)


# -- push -------------------------------------------------------------------------------------


@dataclass(slots=True)
class SmartPushResult:
    """Outcome of `smart_push`: the node's head before and after, and counts."""

    remote_url: str
    old_head: Multihash | None
    new_head: Multihash
    blocks_pushed: int = 0
    objects_uploaded: int = 0
    objects_skipped: int = 0
    bytes_uploaded: int = 0


def _blocks_after(ds: Dataset, remote_head: Multihash | None) -> list[tuple[Multihash, bytes, Any]]:
    """Local blocks after ``remote_head``, oldest first.

    Raises:
        NotDescendant: ``remote_head`` is not in the local chain.
    """
    out = []
    for h, raw, block in ds.iter_blocks():
        if h == remote_head:
            break
        out.append((h, raw, block))
    else:
        if remote_head is not None:
            raise NotDescendant(f"the node's head {remote_head} is not in the local chain")
    out.reverse()
    return out


def _plan(new: list[tuple[Multihash, bytes, Any]]) -> tuple[TransferPlan, list[ObjectFile]]:
    plan, jobs = transfer_plan(new)
    return plan, [ObjectFile.of(j.kind, j.hash, j.size) for j in jobs]


async def _upload_all(
    session: aiohttp.ClientSession,
    ds: Dataset,
    accepted: PushObjectsAccepted,
    result: SmartPushResult,
) -> None:
    limit = asyncio.Semaphore(SMART_UPLOAD_CONCURRENCY)

    async def one(f: ObjectFile, url: TransferUrl) -> None:
        store = ds.layout.data if f.kind == "data" else ds.layout.checkpoints
        async with limit:
            path = await asyncio.to_thread(
                verified_object_path, store.root, f.kind, f.physical_hash, f.size
            )
            await _upload(session, url, path, f.size)
        result.objects_uploaded += 1
        result.bytes_uploaded += f.size

    async with asyncio.TaskGroup() as tg:
        for s in accepted.strategies:
            if s.upload_to is None:
                result.objects_skipped += 1
            else:
                tg.create_task(one(s.object_file, s.upload_to))


async def _uploads_with_progress(
    chan: _Channel, uploads: asyncio.Task[None], result: SmartPushResult
) -> None:
    """Answer the server's progress pings until ``uploads`` ends; then report completion."""
    while not uploads.done():
        ping = asyncio.ensure_future(chan.recv())
        done, _ = await asyncio.wait({uploads, ping}, return_when=asyncio.FIRST_COMPLETED)
        if ping in done:
            ping.result()  # a ping ({}); raises if the server failed the push
            await chan.send(UploadProgress(result.objects_uploaded).to_doc())
        else:
            ping.cancel()
            with contextlib.suppress(BaseException):
                await ping
    try:
        uploads.result()
    except BaseExceptionGroup as group:
        raise first_error(group) from None
    await chan.send(COMPLETE.to_doc())


async def _confirmed(chan: _Channel, node: HttpSource, new_head: Multihash) -> None:
    """Wait for ``DatasetPushCompleteConfirmed`` (``{}``).

    A progress ping (also ``{}``) the server sent just before it read our ``Complete``
    arrives first and looks the same, so a ``{}`` counts as the confirmation once the
    node's head is ours (the node confirms only after its commit).

    Raises:
        SmartRefused / TransferError: the server failed the commit or went away.
    """
    for _ in range(MAX_STALE_PINGS + 1):
        await chan.recv()
        if await node.get_head() == new_head:
            return
    raise TransferError(f"{node.base_url}: push not confirmed")


async def smart_push(
    ws: Workspace,
    ref: str,
    url: str,
    *,
    session: aiohttp.ClientSession,
    headers: dict[str, str] | None = None,
) -> SmartPushResult:
    """Push dataset ``ref`` of ``ws`` to the dataset base URL ``url`` (``odf+`` allowed).

    The node creates the dataset from its Seed if it has none under that name.

    Raises:
        NotDescendant: the node's head is not in the local chain, or it moved meanwhile.
        Unauthorized: the node wants a (valid) bearer token in ``headers``.
        SmartRefused: any other refusal (the server's error is in ``reply``).
        TransferError: connection problems.
    """
    ds = ws.get(ws.resolve(ref).id)
    base = smart_url(url)
    remote_head = await HttpSource(base, session, headers=headers).get_head()
    new = await asyncio.to_thread(_blocks_after, ds, remote_head)
    result = SmartPushResult(base, remote_head, new[-1][0] if new else remote_head)  # type: ignore[arg-type]
    if not new:
        return result
    plan, files = await asyncio.to_thread(_plan, new)
    batch = await asyncio.to_thread(pack_blocks, [(h, raw) for h, raw, _b in new])
    async with _Channel.open(session, base + "push", headers) as chan:
        try:
            await chan.send(PushRequest(remote_head, plan).to_doc())
            await chan.result()
            await chan.send(PushMetadataRequest(batch).to_doc())
            await chan.result()
            await chan.send(PushObjectsRequest(tuple(files), is_truncated=False).to_doc())
            accepted = PushObjectsAccepted.from_doc(await chan.result())
            uploads = asyncio.create_task(_upload_all(session, ds, accepted, result))
            try:
                await _uploads_with_progress(chan, uploads, result)
            finally:
                uploads.cancel()
                with contextlib.suppress(BaseException):
                    await uploads
            await chan.send(EMPTY)
            await _confirmed(chan, HttpSource(base, session, headers=headers), result.new_head)
        except SmartRefused as e:
            if _conflict(e.reply):
                raise NotDescendant(f"push to {base}: the node's head moved: {e}") from None
            collision = _collision(e.reply)
            if collision is not None:
                raise NameConflict(f"push to {base}: {collision}") from None
            raise
    result.blocks_pushed = len(new)
    return result
