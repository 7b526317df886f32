"""HTTP transport: an `ObjectSource` over the ODF Simple Transfer Protocol, and push.

`HttpSource` pulls from a *dataset base URL* (``http://host:port/<dataset>/``, the
form kamu servers use too):

- ``GET refs/head``: the head hash (text, no newline);
- ``GET refs/head.sig``: our signed `HeadRecord` (JSON; absent on kamu servers);
- ``GET blocks?head=H&stop_at=S``: our batched block endpoint, a stream of frames
  (below), newest first; if the server does not have it (kamu), one
  ``GET blocks/{hash}`` per block, following ``prev_block_hash``;
- ``GET data/{hash}`` / ``GET checkpoints/{hash}``: objects, streamed to disk and
  hashed while they arrive.

Frames (batched blocks, push bodies): ``u32 big-endian length || payload``, repeated
until the end of the body; each payload at most `MAX_FRAME_SIZE` bytes.

`push_dataset` sends a dataset the local workspace owns (has the key of) to a node:
objects first (``PUT data/{hash}``), then ``POST push`` with the signed head record
and the new blocks; the receiving node moves its head only for a record signed by the
dataset key. Both are writes: the node wants its bearer token in ``headers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import aiohttp

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetId
from fbs.errors import FbsError, MalformedBlock
from fbs.keys import KeyPair
from fbs.model import MetadataBlock
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from p2p.errors import (
    FrameTooLarge,
    InvalidHeadRecord,
    NotDescendant,
    PeerMisbehaved,
    PeerUnavailable,
    SourceUnreachable,
    TransferError,
    TransferTimeout,
    first_error,
)
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord, sign_head
from p2p.peer_json import PeerJsonError, load_peer_json
from p2p.receive import ObjectJob, ObjectKind, object_jobs, object_store
from storage.dataset import Dataset
from storage.object_store import MAX_BLOCK_SIZE
from storage.verified import verified_object_path
from storage.workspace import Workspace

__all__ = [
    "BLOCK_FRAMES_MEDIA_TYPE",
    "FRAME_HEADER",
    "MAX_FRAME_SIZE",
    "HttpSource",
    "PushResult",
    "Unauthorized",
    "dataset_base_url",
    "encode_frame",
    "iter_frames",
    "push_dataset",
]

#: Media type of a body made of frames (batched blocks, push).
BLOCK_FRAMES_MEDIA_TYPE: Final = "application/vnd.odf-node.frames"
#: Frame header: payload length, u32 big-endian.
FRAME_HEADER: Final = struct.Struct(">I")
#: Largest frame payload (a block is at most `MAX_BLOCK_SIZE`).
MAX_FRAME_SIZE: Final = MAX_BLOCK_SIZE
#: Longest ``refs/head`` body accepted (a multibase hash is 69 characters).
MAX_REF_BYTES: Final = 256
#: Most blocks fetched one by one (simple protocol) per `HttpSource.get_blocks` call.
SIMPLE_BLOCKS_PER_CALL: Final = 256
#: Most frames accepted from one batched-blocks response.
MAX_BATCH_FRAMES: Final = 100_000
#: Network chunk size for object downloads.
DOWNLOAD_CHUNK_SIZE: Final = 1 << 20
#: aiohttp read buffer (bigger than its 64 KiB default: fewer, larger chunks to hash).
READ_BUFFER_SIZE: Final = 4 << 20
#: Seconds without any byte from a server before a transfer counts as stalled.
DEFAULT_READ_TIMEOUT_S: Final = 30.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 10.0
#: Parallel object uploads of `push_dataset`.
PUSH_UPLOAD_CONCURRENCY: Final = 4


def encode_frame(payload: bytes) -> bytes:
    """One frame: length header plus payload.

    Raises:
        FrameTooLarge: ``payload`` exceeds `MAX_FRAME_SIZE`.
    """
    if len(payload) > MAX_FRAME_SIZE:
        raise FrameTooLarge(f"frame of {len(payload)} bytes exceeds {MAX_FRAME_SIZE}")
    return FRAME_HEADER.pack(len(payload)) + payload


async def iter_frames(
    stream: aiohttp.StreamReader, *, max_frames: int = MAX_BATCH_FRAMES
) -> AsyncIterator[bytes]:
    """Frames from a body until its end.

    Raises:
        FrameTooLarge: a frame above `MAX_FRAME_SIZE`, or more than ``max_frames``.
        PeerMisbehaved: the body ends inside a frame.
    """
    count = 0
    while True:
        try:
            header = await stream.readexactly(FRAME_HEADER.size)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise PeerMisbehaved("body ends inside a frame header") from None
            return
        (length,) = FRAME_HEADER.unpack(header)
        if length > MAX_FRAME_SIZE:
            raise FrameTooLarge(f"frame of {length} bytes exceeds {MAX_FRAME_SIZE}")
        count += 1
        if count > max_frames:
            raise FrameTooLarge(f"more than {max_frames} frames")
        try:
            yield await stream.readexactly(length)
        except asyncio.IncompleteReadError:
            raise PeerMisbehaved("body ends inside a frame") from None


def dataset_base_url(node_url: str, dataset: str) -> str:
    """The base URL of ``dataset`` (alias or DID multibase) on the node at ``node_url``."""
    return node_url.rstrip("/") + "/" + quote(dataset, safe="/") + "/"


def _timeout(read_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        total=None, sock_connect=DEFAULT_CONNECT_TIMEOUT_S, sock_read=read_s
    )


@contextlib.asynccontextmanager
async def _transfer_errors(what: str) -> AsyncIterator[None]:
    """Map aiohttp / timeout errors to our `TransferError` tree."""
    try:
        yield
    except TimeoutError:
        raise TransferTimeout(f"{what}: timed out") from None
    except aiohttp.ClientConnectorError as e:
        if isinstance(e.os_error, ConnectionRefusedError):
            reason = "connection refused"
        else:
            reason = e.os_error.strerror or str(e.os_error) or type(e.os_error).__name__
        raise SourceUnreachable(f"{what}: cannot connect to {e.host}:{e.port}: {reason}") from None
    except aiohttp.ClientError as e:
        raise TransferError(f"{what}: {type(e).__name__}: {e}") from None


class HttpSource:
    """An `ObjectSource` for one dataset base URL (see the module docstring).

    Args:
        base_url: ``http://host:port/<dataset>/`` (a trailing ``/`` is added).
        session: the aiohttp session to use (the caller owns and closes it).
        read_timeout_s: stall timeout per read.
        headers: extra headers (e.g. ``Authorization``).
    """

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession,
        *,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self._session = session
        self._timeout = _timeout(read_timeout_s)
        self._headers = dict(headers or {})
        self.batch_supported: bool | None = None

    @property
    def name(self) -> str:
        return self.base_url

    def __repr__(self) -> str:
        return f"HttpSource({self.base_url!r})"

    def _url(self, rel: str) -> str:
        return self.base_url + rel

    async def _get_small(self, rel: str, limit: int) -> tuple[int, bytes]:
        async with (
            _transfer_errors(f"GET {self._url(rel)}"),
            self._session.get(self._url(rel), timeout=self._timeout, headers=self._headers) as r,
        ):
            if r.status != 200:
                return r.status, b""
            if r.content_length is not None and r.content_length > limit:
                raise FrameTooLarge(f"{rel}: {r.content_length} bytes exceeds {limit}")
            body = await r.content.read(limit + 1)
            if len(body) > limit:
                raise FrameTooLarge(f"{rel}: body exceeds {limit} bytes")
            # Drain nothing more: the connection is released by the context manager.
            return 200, body

    async def get_head(self) -> Multihash | None:
        """``GET refs/head`` (``None`` on 404).

        Raises:
            PeerMisbehaved: a body that is not a canonical hash.
            TransferError: other statuses, connection problems.
        """
        status, body = await self._get_small("refs/head", MAX_REF_BYTES)
        if status == 404:
            return None
        if status != 200:
            raise TransferError(f"GET refs/head: HTTP {status}")
        try:
            text = body.decode("ascii")
            h = parse_hash(text, code=SHA3_256)
        except (UnicodeDecodeError, FbsError):
            raise PeerMisbehaved(f"refs/head is not a block hash: {body[:80]!r}") from None
        return h

    async def get_head_record(self) -> HeadRecord | None:
        """``GET refs/head.sig``: the signed head record (``None`` if the server has none).

        Raises:
            InvalidHeadRecord: a record that is malformed or does not verify.
            TransferError: connection problems, unexpected statuses.
        """
        status, body = await self._get_small("refs/head.sig", MAX_HEAD_RECORD_BYTES)
        if status in (404, 400):
            return None  # kamu servers: no such ref (or not a valid ref name)
        if status != 200:
            raise TransferError(f"GET refs/head.sig: HTTP {status}")
        return HeadRecord.from_json(body)

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        """Raw blocks newest first from ``head`` (see `ObjectSource.get_blocks`).

        Uses the batched endpoint when the server has it, else the simple protocol.
        Blocks fetched one by one are hashed before they are parsed (to find the
        parent); the caller verifies everything again.
        """
        if self.batch_supported is not False:
            batch = await self._get_blocks_batched(head, stop_at)
            if batch is not None:
                self.batch_supported = True
                return batch
            self.batch_supported = False
        return await self._get_blocks_simple(head, stop_at)

    async def _get_blocks_batched(
        self, head: Multihash, stop_at: Multihash | None
    ) -> list[bytes] | None:
        params = {"head": head.to_multibase()}
        if stop_at is not None:
            params["stop_at"] = stop_at.to_multibase()
        url = self._url("blocks")
        async with (
            _transfer_errors(f"GET {url}"),
            self._session.get(
                url, params=params, timeout=self._timeout, headers=self._headers
            ) as r,
        ):
            media = r.headers.get("Content-Type", "").split(";")[0].strip()
            if r.status in (404, 405, 400) and media != "application/json":
                return None  # not our server (kamu has no batched endpoint)
            if r.status == 404:
                raise PeerUnavailable(f"{self.base_url}: block {head} not found")
            if r.status != 200:
                raise TransferError(f"GET blocks: HTTP {r.status}")
            if media != BLOCK_FRAMES_MEDIA_TYPE:
                return None
            return [frame async for frame in iter_frames(r.content)]

    async def _get_blocks_simple(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        out: list[bytes] = []
        h: Multihash | None = head
        while h is not None and h != stop_at and len(out) < SIMPLE_BLOCKS_PER_CALL:
            status, raw = await self._get_small(f"blocks/{h.to_multibase()}", MAX_BLOCK_SIZE)
            if status == 404:
                if out:
                    break
                raise PeerUnavailable(f"{self.base_url}: block {h} not found")
            if status != 200:
                raise TransferError(f"GET blocks/{h}: HTTP {status}")
            if block_hash(raw) != h:  # hash before parse
                raise PeerMisbehaved(f"served wrong bytes for block {h}")
            try:
                block = decode_block(raw)
            except MalformedBlock as e:
                raise PeerMisbehaved(f"block {h} does not decode: {e}") from None
            out.append(raw)
            h = block.prev_block_hash
        return out

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        """Stream ``data/{h}`` or ``checkpoints/{h}`` into the new file ``dest_path``.

        Returns:
            SHA3-256 digest of the bytes written.

        Raises:
            PeerUnavailable: 404.
            PeerMisbehaved: more bytes than ``expected_size`` (or a Content-Length that
                says so).
            TransferError / TransferTimeout: other statuses, connection problems, stalls.
        """
        rel = f"{'data' if kind == 'data' else 'checkpoints'}/{h.to_multibase()}"
        url = self._url(rel)
        hasher = hashlib.sha3_256()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        async with (
            _transfer_errors(f"GET {url}"),
            self._session.get(
                url, timeout=self._timeout, headers=self._headers, read_bufsize=READ_BUFFER_SIZE
            ) as r,
        ):
            if r.status == 404:
                raise PeerUnavailable(f"{self.base_url}: {kind} object {h} not found")
            if r.status != 200:
                raise TransferError(f"GET {rel}: HTTP {r.status}")
            length = r.content_length
            if expected_size is not None and length is not None and length != expected_size:
                raise PeerMisbehaved(
                    f"{kind} object {h}: server announces {length} bytes, "
                    f"the block says {expected_size}"
                )
            fd = os.open(dest_path, flags, 0o600)
            total = 0
            # One chunk is hashed and written in a worker thread (hashlib and os.write
            # release the GIL) while the event loop receives the next one; at most one
            # job is outstanding, so the pieces reach the hasher and the file in order.
            job: asyncio.Future[None] | None = None
            try:
                async for chunk in r.content.iter_chunked(DOWNLOAD_CHUNK_SIZE):
                    total += len(chunk)
                    if expected_size is not None and total > expected_size:
                        raise PeerMisbehaved(f"{kind} object {h}: more than {expected_size} bytes")
                    if job is not None:
                        await job
                    job = asyncio.ensure_future(
                        asyncio.to_thread(_hash_and_write, hasher, fd, chunk)
                    )
                if job is not None:
                    await job
            finally:
                if job is not None and not job.done():
                    # The thread cannot be interrupted: let it finish before the fd closes.
                    with contextlib.suppress(BaseException):
                        await asyncio.shield(job)
                os.close(fd)
        return hasher.digest()


def _hash_and_write(hasher: Any, fd: int, chunk: bytes) -> None:
    hasher.update(chunk)
    view = memoryview(chunk)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# -- push ----------------------------------------------------------------------------------


@dataclass(slots=True)
class PushResult:
    """Outcome of `push_dataset`.

    Attributes:
        dataset_id: the dataset.
        remote_url: dataset base URL on the node.
        old_head / new_head: the node's head before and after.
        blocks_pushed / objects_uploaded / objects_skipped / bytes_uploaded: counts.
    """

    dataset_id: DatasetId
    remote_url: str
    old_head: Multihash | None
    new_head: Multihash
    blocks_pushed: int = 0
    objects_uploaded: int = 0
    objects_skipped: int = 0
    bytes_uploaded: int = 0
    records: list[HeadRecord] = field(default_factory=list)


def _blocks_since(
    ds: Dataset, remote_head: Multihash | None
) -> list[tuple[Multihash, bytes, MetadataBlock]]:
    """Local blocks after ``remote_head``, oldest first.

    Raises:
        NotDescendant: ``remote_head`` is not in the local chain.
    """
    out: list[tuple[Multihash, bytes, MetadataBlock]] = []
    for h, raw, block in ds.iter_blocks():
        if h == remote_head:
            break
        out.append((h, raw, block))
    else:
        if remote_head is not None:
            raise NotDescendant(
                f"the node's head {remote_head} is not in the local chain (diverged or ahead)"
            )
    out.reverse()
    return out


class Unauthorized(TransferError):
    """The node refused the request for a missing or wrong bearer token (HTTP 401)."""


async def _check_response(r: aiohttp.ClientResponse, what: str) -> dict[str, Any]:
    body = await r.content.read(64 * 1024)
    try:
        doc = load_peer_json(body, what=f"{what} answer") if body else {}
    except PeerJsonError:  # bounded like every peer JSON (`p2p.peer_json`)
        doc = {"error": body[:200].decode("utf-8", "replace")}
    if not isinstance(doc, dict):
        doc = {"error": str(doc)[:200]}
    if r.status >= 400:
        msg = f"{what}: HTTP {r.status}: {doc.get('error', '')}"
        if r.status == 401:
            raise Unauthorized(msg)
        if r.status == 409:
            raise NotDescendant(msg)
        if r.status == 403:
            raise InvalidHeadRecord(msg)
        raise TransferError(msg)
    return doc


@dataclass(slots=True)
class _Pusher:
    """The requests of one `push_dataset` to one dataset base URL."""

    session: aiohttp.ClientSession
    base: str
    headers: dict[str, str]
    key: KeyPair
    ds: Dataset
    alias: str
    result: PushResult

    async def post(self, blocks: list[tuple[Multihash, bytes, MetadataBlock]]) -> None:
        """``POST push``: a record signed for the last of ``blocks``, then the blocks."""
        last_h, _raw, last = blocks[-1]
        record = sign_head(self.key, last_h, last.sequence_number, last.system_time)
        body = encode_frame(record.to_json()) + b"".join(
            encode_frame(raw) for _h, raw, _b in blocks
        )
        async with (
            _transfer_errors(f"POST {self.base}push"),
            self.session.post(
                self.base + "push",
                data=body,
                params={"alias": self.alias},
                headers={**self.headers, "Content-Type": BLOCK_FRAMES_MEDIA_TYPE},
            ) as r,
        ):
            await _check_response(r, "push")
        self.result.records.append(record)
        self.result.blocks_pushed += len(blocks)

    async def upload_all(self, jobs: list[ObjectJob]) -> None:
        """Upload every object the node lacks, `PUSH_UPLOAD_CONCURRENCY` at a time."""
        limit = asyncio.Semaphore(PUSH_UPLOAD_CONCURRENCY)

        async def one(job: ObjectJob) -> None:
            async with limit:
                await self.upload(job)

        try:
            async with asyncio.TaskGroup() as tg:
                for job in jobs:
                    tg.create_task(one(job))
        except BaseExceptionGroup as group:
            raise first_error(group) from None

    async def upload(self, job: ObjectJob) -> None:
        """``PUT`` one object (streamed from its verified file) unless the node has it."""
        rel = f"{'data' if job.kind == 'data' else 'checkpoints'}/{job.hash.to_multibase()}"
        url = self.base + rel
        async with _transfer_errors(f"HEAD {url}"), self.session.head(url) as r:
            if r.status == 200 and r.content_length == job.size:
                self.result.objects_skipped += 1
                return
        store = object_store(self.ds.layout, job.kind)
        with open(verified_object_path(store.root, job.kind, job.hash, job.size), "rb") as f:
            async with (
                _transfer_errors(f"PUT {url}"),
                self.session.put(
                    url,
                    data=f,
                    headers={
                        **self.headers,
                        "Content-Type": "application/octet-stream",
                        "Content-Length": str(job.size),
                    },
                ) as r,
            ):
                await _check_response(r, f"PUT {rel}")
        self.result.objects_uploaded += 1
        self.result.bytes_uploaded += job.size


async def push_dataset(
    ws: Workspace,
    ref: str,
    node_url: str,
    *,
    session: aiohttp.ClientSession,
    remote_alias: str | None = None,
    headers: dict[str, str] | None = None,
) -> PushResult:
    """Push a dataset this workspace owns (holds the key of) to the node at ``node_url``.

    The dataset is addressed on the node by its DID; a new dataset is created there
    under ``remote_alias`` (default: the local alias) by pushing its Seed first.

    Raises:
        KeyStoreError: no private key for the dataset here (only owners can push).
        NotDescendant: the node's head is not in the local chain, or it moved meanwhile.
        InvalidHeadRecord: the node refused the signature.
        Unauthorized: the node wants a (valid) bearer token in ``headers``
            (``Authorization: Bearer <token>``, `node.http.auth`).
        TransferError: connection problems, other refusals.
    """
    entry = ws.resolve(ref)
    ds = ws.get(entry.id)
    key = ws.keys.load(entry.id)
    base = dataset_base_url(node_url, entry.id.as_multibase())
    remote_head = await HttpSource(base, session, headers=headers).get_head()
    new = await asyncio.to_thread(_blocks_since, ds, remote_head)
    local_head = new[-1][0] if new else remote_head
    assert local_head is not None  # a dataset always has its Seed
    result = PushResult(entry.id, base, remote_head, local_head)
    if not new:
        return result
    alias = remote_alias or entry.alias
    pusher = _Pusher(session, base, dict(headers or {}), key, ds, alias, result)
    if remote_head is None:
        # A new dataset on the node: the Seed alone first (it has no objects to upload).
        await pusher.post(new[:1])
        new = new[1:]
    if new:
        await pusher.upload_all(object_jobs(b for _h, _raw, b in new))
        await pusher.post(new)
    return result
