"""The object exchange protocol ``/odf/exchange/1.0.0``: server and client (trio side).

One request per libp2p stream. Every message is a frame (encoded and decoded without
I/O in `p2p.framing`; this module is the async adapter over libp2p streams)::

    u32 big-endian payload length | u8 frame type | payload

Frame types and payloads:

============  ======================================================================
REQUEST (1)   JSON object, client -> server (see below)
BLOCK (2)     the raw bytes of one metadata block
OBJECT (3)    JSON ``{"size": n}``: the object's byte count, then CHUNK frames
CHUNK (4)     a slice of the object's bytes
END (5)       empty: the response is complete
ERROR (6)     JSON ``{"code": "not_found"|"bad_request"|"busy"|"internal", "message": s}``
HEAD (7)      JSON ``{"head": multibase|null, "record": head-record JSON text|null}``
============  ======================================================================

Requests (all carry ``"dataset": "did:odf:..."``):

* ``{"op": "head"}`` -> HEAD.
* ``{"op": "blocks", "head": h, "stop_at": h|null, "max_blocks": n}`` -> BLOCK frames
  from ``head`` backwards (newest first), stopping *before* ``stop_at``, at the Seed, or
  at the batch limits (``max_blocks``, `ExchangeLimits.max_blocks_per_request`,
  `ExchangeLimits.max_block_bytes_per_request`), then END. The client continues with
  the parent of the last block it got.
* ``{"op": "object", "kind": "data"|"checkpoint", "hash": h}`` -> OBJECT, CHUNKs, END.

Limits are named in `ExchangeLimits`; a frame over its limit is refused from its
length prefix, before any of its payload is kept (`FrameTooLarge`), and the stream is
reset; JSON payloads are decoded within `ExchangeLimits.json_limits`
(`p2p.peer_json`: nesting, number and string sizes); a peer that sends nothing for
`stall_timeout_s` fails with `TransferTimeout`.

Verification on the client: every block is hashed before it is parsed, and must hash to
the expected link of the chain (the requested head, then each block's
``prev_block_hash``); object bytes are hashed while they are written to a quarantine
file (`storage.fsutil.PendingFile`, ``.pending-*``, in the destination directory) and
renamed to their name only once the size and SHA3-256 hash match. Every failure is
charged to the peer in `PeerScores` (`Offence`), every success rewards it.

The server serves only datasets of its workspace, by DID, and only objects present in
that dataset's own ``data/`` or ``checkpoints/`` store (hashes are parsed, never used as
paths). It does not re-hash what it serves: receivers verify.

Everything here runs in the host's trio thread (see `p2p.host`); blocking file work
(chain walks, fsync, file reads) is pushed to worker threads with ``trio.to_thread``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import trio
from libp2p.io.exceptions import IOException
from libp2p.network.stream.exceptions import StreamEOF

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetId
from fbs.errors import FbsError, MalformedBlock
from fbs.limits import DEFAULT_LIMITS
from fbs.multiformats import SHA3_256, Multihash
from p2p.errors import (
    FrameTooLarge,
    HostNotRunning,
    NotFoundOnPeer,
    P2PError,
    PeerMisbehaved,
    PeerUnavailable,
    RemoteError,
    TransferError,
    TransferTimeout,
)
from p2p.framing import (
    DEFAULT_MAX_CONTROL_FRAME_BYTES,
    DEFAULT_MAX_FRAME_BYTES,
    HEADER_SIZE,
    Event,
    Frame,
    FrameDecoder,
    FrameHeader,
    FrameLimits,
    FrameType,
    PayloadEnd,
    PayloadPiece,
    encode_frame,
)
from p2p.host import P2PHost
from p2p.peer_json import DEFAULT_JSON_LIMITS, JsonLimits, PeerJsonError, load_peer_object
from p2p.peers import Offence, PeerScores
from storage.errors import DatasetNotFound, ObjectNotFound, StorageError
from storage.fsutil import OBJECT_MODE, PendingFile, ensure_dir
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE, MAX_BLOCK_SIZE
from storage.verified import verified_object_path
from storage.workspace import Workspace

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "EXCHANGE_PROTOCOL",
    "STREAM_WRITE_BYTES",
    "ExchangeClient",
    "ExchangeLimits",
    "ExchangeServer",
    "FrameType",
    "HeadRecordProvider",
    "ObjectKind",
    "RemoteHead",
    "read_frame_header",
    "write_frame",
]

log = logging.getLogger(__name__)

#: The libp2p protocol id.
EXCHANGE_PROTOCOL: Final = "/odf/exchange/1.0.0"
#: Largest single write to a libp2p stream. A noise transport message carries at most
#: 65519 plaintext bytes and a yamux frame header takes 12, so a write of this size is
#: one yamux frame in one noise message. py-libp2p cuts bigger writes into 65536-byte
#: yamux frames, and each of those into two noise messages (65519 + 17 bytes): twice
#: the encryptions, reads and wake-ups per byte on both sides.
STREAM_WRITE_BYTES: Final = 65519 - 12
#: Default CHUNK payload: a CHUNK frame (header included) is exactly 16 stream writes.
DEFAULT_CHUNK_BYTES: Final = 16 * STREAM_WRITE_BYTES - HEADER_SIZE

ObjectKind = Literal["data", "checkpoint"]
_KINDS: Final = ("data", "checkpoint")

HeadRecordProvider = Callable[[DatasetId], bytes | None]
"""Returns the signed head record JSON the server hands out with a dataset's head."""


#: Frame types whose payloads the client receives piece by piece, judging each header
#: (type, batch and object budgets) before any of its payload is read.
_STREAMED: Final = frozenset({FrameType.BLOCK, FrameType.CHUNK})


@dataclass(frozen=True, slots=True)
class ExchangeLimits:
    """Named limits of the exchange protocol (both sides).

    Attributes:
        max_frame_bytes: largest BLOCK or CHUNK payload accepted.
        max_control_frame_bytes: largest REQUEST/OBJECT/END/ERROR/HEAD payload.
        chunk_bytes: CHUNK size the server sends (at most ``max_frame_bytes``).
        max_blocks_per_request: blocks per batch (the client asks for this many).
        max_block_bytes_per_request: byte budget of one blocks batch (at least one
            block is always sent).
        max_blocks_per_pull: blocks one `ExchangeClient.get_blocks` call accepts.
        max_block_bytes_per_pull: bytes one `ExchangeClient.get_blocks` call accepts.
        max_object_bytes: largest object the client accepts.
        stall_timeout_s: longest wait for any progress (read or write) on a stream.
        max_concurrent_requests: requests the server handles at once (more: ``busy``).
        json_limits: limits of the JSON in control frames (`p2p.peer_json`).
    """

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_control_frame_bytes: int = DEFAULT_MAX_CONTROL_FRAME_BYTES
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    max_blocks_per_request: int = 1024
    max_block_bytes_per_request: int = 64 * 2**20
    max_blocks_per_pull: int = 10_000_000
    max_block_bytes_per_pull: int = 8 * 2**30
    max_object_bytes: int = DEFAULT_MAX_OBJECT_SIZE
    stall_timeout_s: float = 30.0
    max_concurrent_requests: int = 64
    json_limits: JsonLimits = DEFAULT_JSON_LIMITS

    def frame_limits(self) -> FrameLimits:
        """The per-frame limits the decoder enforces from each length prefix."""
        return FrameLimits(self.max_frame_bytes, self.max_control_frame_bytes)


@dataclass(frozen=True, slots=True)
class RemoteHead:
    """A peer's answer to a head request.

    Attributes:
        head: the peer's head of the dataset (``None``: it holds no block).
        record: the signed head record JSON it gave (unverified), if any.
    """

    head: Multihash | None
    record: bytes | None


class _Misbehaved(PeerMisbehaved):
    """A `PeerMisbehaved` that names the offence to charge."""

    def __init__(self, message: str, offence: Offence = Offence.BAD_BYTES) -> None:
        super().__init__(message)
        self.offence = offence


class _LocalLimit(TransferError):
    """One of *our* totals was exceeded; not the peer's fault."""


class _EOF(TransferError):
    """The stream ended."""


# -- the async adapter over p2p.framing -----------------------------------------------


async def write_frame(
    stream: Any, ftype: int, payload: bytes | bytearray | memoryview, timeout_s: float
) -> None:
    """Write one frame: header and payload together, in writes of `STREAM_WRITE_BYTES`.

    ``timeout_s`` bounds each write (the peer must keep taking bytes).

    Raises:
        TransferTimeout: the peer did not take the bytes within ``timeout_s``.
        TransferError: the stream is closed or reset.
    """
    data = encode_frame(ftype, payload)
    try:
        if len(data) <= STREAM_WRITE_BYTES:
            with trio.fail_after(timeout_s):
                await stream.write(data)
        else:
            view = memoryview(data)
            for i in range(0, len(data), STREAM_WRITE_BYTES):
                with trio.fail_after(timeout_s):
                    await stream.write(bytes(view[i : i + STREAM_WRITE_BYTES]))
    except trio.TooSlowError:
        raise TransferTimeout(f"peer did not read for {timeout_s} s") from None
    except (IOException, OSError) as e:
        raise TransferError(f"stream write failed: {e!r}") from None


async def _write_json(stream: Any, ftype: int, obj: dict[str, Any], limits: ExchangeLimits) -> None:
    await write_frame(stream, ftype, _dump(obj), limits.stall_timeout_s)


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


#: Bytes asked of the stream per read at least (a read returns what the muxer holds).
_READ_BYTES: Final = 65536


class _Reader:
    """Frames from a libp2p stream: reads fed to a `FrameDecoder`, with the stall timeout.

    Payloads of the ``streamed`` frame types arrive as a `FrameHeader` (to be judged
    before any payload byte is read) and are collected with `payload`.
    """

    def __init__(
        self, stream: Any, limits: ExchangeLimits, *, streamed: Collection[int] = ()
    ) -> None:
        self._stream = stream
        self._limits = limits
        self._decoder = FrameDecoder(limits.frame_limits(), streamed=streamed)

    async def _read_some(self, n: int) -> bytes:
        timeout = self._limits.stall_timeout_s
        try:
            with trio.fail_after(timeout):
                data = await self._stream.read(n)
        except trio.TooSlowError:
            raise TransferTimeout(f"peer sent nothing for {timeout} s") from None
        except StreamEOF:
            raise _EOF("stream ended") from None
        except (IOException, OSError) as e:
            raise TransferError(f"stream read failed: {e!r}") from None
        if not data:
            raise _EOF("stream ended")
        return bytes(data)

    async def _event(self) -> Event:
        decoder = self._decoder
        while (event := decoder.next_event()) is None:
            # FrameTooLarge is raised here, from a header, before its payload is kept.
            decoder.feed(await self._read_some(max(decoder.bytes_wanted, _READ_BYTES)))
        return event

    async def next(self) -> Frame | FrameHeader:
        """The next whole frame, or the header of the next streamed frame."""
        event = await self._event()
        if not isinstance(event, Frame | FrameHeader):  # a payload left unread: our bug
            raise AssertionError(f"payload event {event!r} where a frame starts")
        return event

    async def frame(self) -> Frame:
        """The next frame, which must not be of a streamed type."""
        event = await self.next()
        if isinstance(event, FrameHeader):
            raise _Misbehaved(f"unexpected frame {event.type}", Offence.PROTOCOL_ERROR)
        return event

    async def payload(self, header: FrameHeader) -> bytes:
        """The whole payload of the streamed frame ``header`` announced (joined once)."""
        parts: list[bytes] = []
        while not isinstance(event := await self._event(), PayloadEnd):
            assert isinstance(event, PayloadPiece)
            parts.append(event.data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def json(self, frame: Frame) -> dict[str, Any]:
        """The JSON object in ``frame`` (bounded by `ExchangeLimits.json_limits`)."""
        return load_peer_object(
            frame.payload, self._limits.json_limits, what=f"frame {frame.type} JSON"
        )


async def read_frame_header(stream: Any, limits: ExchangeLimits) -> tuple[int, int]:
    """Read one frame header from ``stream``: ``(type, length)`` (for tools and tests).

    Raises:
        FrameTooLarge / TransferTimeout / TransferError: see `ExchangeLimits`.
    """
    header = await _Reader(stream, limits, streamed=range(256)).next()
    assert isinstance(header, FrameHeader)
    return header.type, header.length


def _remote_error(obj: dict[str, Any]) -> RemoteError:
    code = obj.get("code")
    message = obj.get("message")
    code = code if isinstance(code, str) else "error"
    text = f"peer error {code}: {message if isinstance(message, str) else ''}"[:600]
    if code == "not_found":
        return NotFoundOnPeer(text, code)
    return RemoteError(text, code)


def _parse_hash(value: object, what: str) -> Multihash:
    if not isinstance(value, str):
        raise _BadRequest(f"{what} must be a multibase string")
    try:
        h = Multihash.from_multibase(value)
    except FbsError:
        raise _BadRequest(f"invalid {what}") from None
    if h.code != SHA3_256:
        raise _BadRequest(f"{what} must be a SHA3-256 multihash")
    return h


class _BadRequest(P2PError):
    """A request the server refuses (answered with ERROR bad_request)."""


# -- server ------------------------------------------------------------------------------


class ExchangeServer:
    """Serves the exchange protocol from a workspace.

    Args:
        workspace: where datasets are looked up by DID.
        limits: protocol limits.
        head_records: optional provider of signed head records sent with HEAD.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        limits: ExchangeLimits | None = None,
        head_records: HeadRecordProvider | None = None,
    ) -> None:
        self.workspace = workspace
        self.limits = limits or ExchangeLimits()
        self._head_records = head_records
        self._active = 0
        self.served_requests = 0

    def register(self, host: P2PHost) -> None:
        """Serve `EXCHANGE_PROTOCOL` on ``host``."""
        host.set_stream_handler(EXCHANGE_PROTOCOL, self.handle)

    async def handle(self, stream: Any) -> None:
        """Answer one request on ``stream`` (trio; errors become ERROR frames)."""
        limits = self.limits
        if self._active >= limits.max_concurrent_requests:
            with contextlib.suppress(TransferError):
                await _write_json(
                    stream, FrameType.ERROR, {"code": "busy", "message": "try later"}, limits
                )
            return
        self._active += 1
        try:
            await self._handle(stream)
        except (TransferError, PeerMisbehaved) as e:
            # A malformed or oversized frame, a stall: the stream is reset (not closed
            # as if the answer were complete); unread bytes of the peer are dropped.
            log.debug("exchange request aborted: %s", e)
            with contextlib.suppress(Exception):
                await stream.reset()
        finally:
            self._active -= 1

    async def _handle(self, stream: Any) -> None:
        limits = self.limits
        reader = _Reader(stream, limits)
        frame = await reader.frame()
        if frame.type != FrameType.REQUEST:
            raise _Misbehaved("expected a REQUEST frame", Offence.PROTOCOL_ERROR)
        request = reader.json(frame)
        try:
            await self._dispatch(stream, request)
        except _BadRequest as e:
            await self._error(stream, "bad_request", str(e))
        except (DatasetNotFound, ObjectNotFound, NotFoundOnPeer) as e:
            await self._error(stream, "not_found", str(e))
        except (StorageError, FbsError) as e:
            log.warning("exchange: cannot serve %s: %s", request.get("op"), e)
            await self._error(stream, "internal", "stored data unavailable")
        else:
            self.served_requests += 1

    async def _error(self, stream: Any, code: str, message: str) -> None:
        await _write_json(
            stream, FrameType.ERROR, {"code": code, "message": message[:500]}, self.limits
        )

    async def _dispatch(self, stream: Any, request: dict[str, Any]) -> None:
        op = request.get("op")
        did_text = request.get("dataset")
        if not isinstance(did_text, str) or not did_text.startswith("did:"):
            raise _BadRequest("dataset must be a did:odf string")
        try:
            did = DatasetId.from_did(did_text)
        except FbsError:
            raise _BadRequest("invalid dataset id") from None
        if op == "head":
            await self._serve_head(stream, did)
        elif op == "blocks":
            head = _parse_hash(request.get("head"), "head")
            stop = request.get("stop_at")
            stop_at = None if stop is None else _parse_hash(stop, "stop_at")
            max_blocks = request.get("max_blocks", self.limits.max_blocks_per_request)
            if type(max_blocks) is not int or max_blocks < 1:
                raise _BadRequest("max_blocks must be a positive integer")
            await self._serve_blocks(stream, did, head, stop_at, max_blocks)
        elif op == "object":
            kind = request.get("kind")
            if kind not in _KINDS:
                raise _BadRequest("kind must be 'data' or 'checkpoint'")
            h = _parse_hash(request.get("hash"), "hash")
            await self._serve_object(stream, did, kind, h)
        else:
            raise _BadRequest("unknown op")

    async def _serve_head(self, stream: Any, did: DatasetId) -> None:
        def read() -> tuple[Multihash | None, bytes | None]:
            ds = self.workspace.get(did)
            record = self._head_records(did) if self._head_records is not None else None
            return ds.head(), record

        head, record = await trio.to_thread.run_sync(read)
        obj = {
            "head": None if head is None else head.to_multibase(),
            "record": None if record is None else record.decode("utf-8", "replace"),
        }
        await _write_json(stream, FrameType.HEAD, obj, self.limits)

    async def _serve_blocks(
        self,
        stream: Any,
        did: DatasetId,
        head: Multihash,
        stop_at: Multihash | None,
        max_blocks: int,
    ) -> None:
        limits = self.limits
        count = min(max_blocks, limits.max_blocks_per_request)
        budget = min(limits.max_block_bytes_per_request, limits.max_frame_bytes * count)

        def collect() -> list[bytes]:
            ds = self.workspace.get(did)
            out: list[bytes] = []
            size = 0
            for h, raw, _block in ds.iter_blocks(head):
                if h == stop_at or len(out) >= count:
                    break
                if out and size + len(raw) > budget:
                    break
                if len(raw) > limits.max_frame_bytes:
                    raise StorageError(f"block {h} is larger than a frame")
                out.append(raw)
                size += len(raw)
            return out

        for raw in await trio.to_thread.run_sync(collect):
            await write_frame(stream, FrameType.BLOCK, raw, limits.stall_timeout_s)
        await write_frame(stream, FrameType.END, b"", limits.stall_timeout_s)

    async def _serve_object(
        self, stream: Any, did: DatasetId, kind: ObjectKind, h: Multihash
    ) -> None:
        limits = self.limits

        def open_object() -> tuple[Any, int]:
            layout = self.workspace.get(did).layout
            store = layout.data if kind == "data" else layout.checkpoints
            verified_object_path(store.root, kind, h, None)  # never serve damaged bytes
            f = store.open(h)
            return f, os.fstat(f.fileno()).st_size

        f, size = await trio.to_thread.run_sync(open_object)
        with f:
            await _write_json(stream, FrameType.OBJECT, {"size": size}, limits)
            chunk = min(limits.chunk_bytes, limits.max_frame_bytes)
            sent = 0
            data = await trio.to_thread.run_sync(f.read, min(chunk, size))
            # The next chunk is read from the file (worker thread) while this one is
            # written to the stream.
            while data:
                sent += len(data)
                ahead: list[bytes] = []
                async with trio.open_nursery() as nursery:
                    if sent < size:
                        nursery.start_soon(_read_into, f, min(chunk, size - sent), ahead)
                    await write_frame(stream, FrameType.CHUNK, data, limits.stall_timeout_s)
                data = ahead[0] if ahead else b""
                # An empty read: the file shrank under us; the client sees a short object.
        await write_frame(stream, FrameType.END, b"", limits.stall_timeout_s)


async def _read_into(f: Any, n: int, out: list[bytes]) -> None:
    out.append(await trio.to_thread.run_sync(f.read, n))


# -- client ------------------------------------------------------------------------------

#: Received chunks waiting for the hashing/writing thread (bounds memory per transfer).
_PIPELINE_DEPTH: Final = 4


async def _pipelined(
    produce: Callable[[trio.MemorySendChannel[bytes]], Awaitable[int]],
    consume: Callable[[bytes], None],
) -> int:
    """Run ``produce`` (reads the stream) while a worker thread ``consume`` s its pieces.

    Hashing and file writes run in a thread, in order, overlapping with the next
    reads in the trio thread. The first exception of either side is re-raised as is
    (not wrapped in an exception group) after both sides stopped.
    """
    errors: list[Exception] = []
    result = 0
    send, recv = trio.open_memory_channel[bytes](_PIPELINE_DEPTH)
    async with trio.open_nursery() as nursery:

        async def drain() -> None:
            try:
                async with recv:
                    async for piece in recv:
                        await trio.to_thread.run_sync(consume, piece)
            except Exception as e:
                errors.append(e)
                nursery.cancel_scope.cancel()

        nursery.start_soon(drain)
        try:
            result = await produce(send)
        except Exception as e:
            errors.append(e)
            nursery.cancel_scope.cancel()
    if errors:
        raise errors[0]
    return result


def _offence_of(e: BaseException) -> Offence | None:
    """The offence to charge for a failed request (``None``: not the peer's fault)."""
    if isinstance(e, _Misbehaved | PeerJsonError):
        return e.offence
    if isinstance(e, PeerMisbehaved):
        return Offence.BAD_BYTES
    if isinstance(e, FrameTooLarge):
        return Offence.LIMIT_EXCEEDED
    if isinstance(e, TransferTimeout):
        return Offence.TIMEOUT
    if isinstance(e, RemoteError | _LocalLimit | HostNotRunning):
        return None
    if isinstance(e, TransferError | PeerUnavailable):
        return Offence.UNAVAILABLE
    return None


class ExchangeClient:
    """Requests blocks, heads and objects from peers (trio coroutines; see `p2p.host`).

    Use from asyncio through `P2PHost.run_trio` (or `p2p.libp2p_source.Libp2pSource`).

    Args:
        host: the started host whose streams are used.
        limits: protocol limits.
        scores: where offences and successes are recorded (default: ``host.scores``).
    """

    def __init__(
        self,
        host: P2PHost,
        *,
        limits: ExchangeLimits | None = None,
        scores: PeerScores | None = None,
    ) -> None:
        self.host = host
        self.limits = limits or ExchangeLimits()
        self.scores = scores or host.scores

    async def _request(
        self,
        peer: str,
        request: dict[str, Any],
        handle: Callable[[_Reader], Awaitable[Any]],
    ) -> Any:
        """Open a stream, send ``request``, run ``handle``; charge/reward ``peer``."""
        stream = await self._open(peer)
        try:
            await _write_json(stream, FrameType.REQUEST, request, self.limits)
            with contextlib.suppress(Exception):
                await stream.close_write()
            result = await handle(_Reader(stream, self.limits, streamed=_STREAMED))
        except (P2PError, MalformedBlock) as e:
            err: Exception = e
            if isinstance(e, MalformedBlock):
                err = _Misbehaved(f"block does not decode: {e}")
            elif isinstance(e, _EOF):
                err = TransferError(f"peer {peer} closed the stream mid-response")
            offence = _offence_of(err)
            if offence is not None:
                self.scores.penalise(peer, offence, str(err))
            with contextlib.suppress(Exception):
                await stream.reset()
            if err is e:
                raise
            raise err from None
        else:
            self.scores.reward(peer)
            return result
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    async def _open(self, peer: str) -> Any:
        try:
            return await self.host.new_stream_trio(peer, EXCHANGE_PROTOCOL)
        except PeerUnavailable as e:
            if not self.scores.is_banned(peer):
                self.scores.penalise(peer, Offence.UNAVAILABLE, str(e))
            raise

    async def get_head(self, peer: str, dataset_id: DatasetId) -> RemoteHead:
        """Ask ``peer`` for its head of ``dataset_id`` (trio).

        Raises:
            NotFoundOnPeer: the peer does not have the dataset.
            PeerMisbehaved / FrameTooLarge / TransferTimeout / TransferError /
                PeerUnavailable: see the module docstring.
        """
        request = {"op": "head", "dataset": dataset_id.to_did_odf()}

        async def handle(reader: _Reader) -> RemoteHead:
            frame = await reader.frame()
            if frame.type == FrameType.ERROR:
                raise _remote_error(reader.json(frame))
            if frame.type != FrameType.HEAD:
                raise _Misbehaved(f"expected HEAD, got frame {frame.type}", Offence.PROTOCOL_ERROR)
            obj = reader.json(frame)
            head, record = obj.get("head"), obj.get("record")
            if record is not None and not isinstance(record, str):
                raise _Misbehaved("record must be a string", Offence.PROTOCOL_ERROR)
            try:
                parsed = None if head is None else _parse_hash(head, "head")
            except _BadRequest as e:
                raise _Misbehaved(str(e), Offence.PROTOCOL_ERROR) from None
            return RemoteHead(parsed, None if record is None else record.encode())

        result: RemoteHead = await self._request(peer, request, handle)
        return result

    async def get_blocks_batch(
        self,
        peer: str,
        dataset_id: DatasetId,
        head: Multihash,
        stop_at: Multihash | None = None,
    ) -> list[bytes]:
        """One batch of raw blocks from ``head`` backwards, newest first (trio).

        Returns a non-empty prefix of the walk ``head -> ... -> (stop_at or Seed)``,
        ``stop_at`` excluded. Each block is hashed before it is parsed and must be the
        next link of the chain.

        Raises:
            NotFoundOnPeer: the peer lacks the dataset or the block ``head``.
            PeerMisbehaved: a block that does not hash to the expected link, an empty
                batch, or blocks past the Seed / ``stop_at``.
            FrameTooLarge / TransferTimeout / TransferError / PeerUnavailable: see
                `get_head`.
        """
        limits = self.limits
        request = {
            "op": "blocks",
            "dataset": dataset_id.to_did_odf(),
            "head": head.to_multibase(),
            "stop_at": None if stop_at is None else stop_at.to_multibase(),
            "max_blocks": limits.max_blocks_per_request,
        }

        async def handle(reader: _Reader) -> list[bytes]:
            out: list[bytes] = []
            size = 0
            want: Multihash | None = head
            while True:
                event = await reader.next()
                if isinstance(event, Frame):
                    if event.type == FrameType.END:
                        if not out:
                            raise _Misbehaved("empty blocks batch", Offence.PROTOCOL_ERROR)
                        return out
                    if event.type == FrameType.ERROR:
                        raise _remote_error(reader.json(event))
                if not isinstance(event, FrameHeader) or event.type != FrameType.BLOCK:
                    raise _Misbehaved(f"unexpected frame {event.type}", Offence.PROTOCOL_ERROR)
                if want is None:
                    raise _Misbehaved("blocks past the end of the requested chain")
                if len(out) >= limits.max_blocks_per_request:
                    raise _Misbehaved("too many blocks in a batch", Offence.LIMIT_EXCEEDED)
                size += event.length
                if event.length > MAX_BLOCK_SIZE or size > limits.max_block_bytes_per_request:
                    raise FrameTooLarge(
                        f"blocks batch over {limits.max_block_bytes_per_request} bytes"
                    )
                raw = await reader.payload(event)
                if block_hash(raw) != want:  # hash before parse
                    raise _Misbehaved(f"block does not hash to {want}")
                block = decode_block(raw, DEFAULT_LIMITS)
                out.append(raw)
                prev = block.prev_block_hash
                want = None if prev is None or prev == stop_at else prev

        result: list[bytes] = await self._request(peer, request, handle)
        return result

    async def get_blocks(
        self,
        peer: str,
        dataset_id: DatasetId,
        head: Multihash,
        stop_at: Multihash | None = None,
    ) -> list[bytes]:
        """All raw blocks from ``head`` back to (excluding) ``stop_at`` or the Seed, newest first.

        Batches of `get_blocks_batch`. If ``stop_at`` is not on the peer's chain, the walk
        ends at the Seed (the caller's chain validation rejects such a history).

        Raises:
            TransferError: more than `ExchangeLimits.max_blocks_per_pull` blocks or
                ``max_block_bytes_per_pull`` bytes; see also `get_blocks_batch`.
        """
        limits = self.limits
        out: list[bytes] = []
        total = 0
        expected: Multihash | None = head
        while expected is not None:
            batch = await self.get_blocks_batch(peer, dataset_id, expected, stop_at)
            out.extend(batch)
            total += sum(len(raw) for raw in batch)
            if len(out) > limits.max_blocks_per_pull or total > limits.max_block_bytes_per_pull:
                raise _LocalLimit(
                    f"chain longer than {limits.max_blocks_per_pull} blocks"
                    f" or {limits.max_block_bytes_per_pull} bytes"
                )
            prev = decode_block(batch[-1], DEFAULT_LIMITS).prev_block_hash
            expected = None if prev is None or prev == stop_at else prev
        return out

    async def _receive_object(
        self,
        peer: str,
        dataset_id: DatasetId,
        kind: ObjectKind,
        h: Multihash,
        expected_size: int | None,
        open_sink: Callable[[int], Callable[[bytes], None]],
        finish: Callable[[], Awaitable[None]],
    ) -> tuple[int, bytes]:
        """Request object ``h``; verify size and hash; returns ``(size, sha3 digest)``.

        ``open_sink(size)`` is called once the declared size is accepted and returns
        the function that stores each piece; ``finish()`` runs after the hash matched.
        """
        if kind not in _KINDS:
            raise ValueError(f"kind must be 'data' or 'checkpoint', not {kind!r}")
        if h.code != SHA3_256:
            raise _LocalLimit("objects are addressed by SHA3-256 hashes")
        limits = self.limits
        request = {
            "op": "object",
            "dataset": dataset_id.to_did_odf(),
            "kind": kind,
            "hash": h.to_multibase(),
        }

        async def handle(reader: _Reader) -> tuple[int, bytes]:
            frame = await reader.frame()
            if frame.type == FrameType.ERROR:
                raise _remote_error(reader.json(frame))
            if frame.type != FrameType.OBJECT:
                raise _Misbehaved(
                    f"expected OBJECT, got frame {frame.type}", Offence.PROTOCOL_ERROR
                )
            size = reader.json(frame).get("size")
            if type(size) is not int or size < 0:
                raise _Misbehaved("invalid object size", Offence.PROTOCOL_ERROR)
            if size > limits.max_object_bytes:
                raise FrameTooLarge(f"object of {size} bytes exceeds {limits.max_object_bytes}")
            if expected_size is not None and size != expected_size:
                raise _Misbehaved(f"object of {size} bytes, the block declares {expected_size}")
            store = open_sink(size)
            hasher = hashlib.sha3_256()

            def sink(piece: bytes) -> None:
                hasher.update(piece)  # releases the GIL: overlaps with the muxer's work
                store(piece)

            async def receive(pieces: trio.MemorySendChannel[bytes]) -> int:
                received = 0
                async with pieces:
                    while True:
                        event = await reader.next()
                        if isinstance(event, Frame):
                            if event.type == FrameType.END:
                                return received
                            if event.type == FrameType.ERROR:
                                raise _remote_error(reader.json(event))
                        if not isinstance(event, FrameHeader) or event.type != FrameType.CHUNK:
                            raise _Misbehaved(
                                f"unexpected frame {event.type}", Offence.PROTOCOL_ERROR
                            )
                        if received + event.length > size:
                            raise _Misbehaved(f"object longer than the declared {size} bytes")
                        await pieces.send(await reader.payload(event))
                        received += event.length

            received = await _pipelined(receive, sink)
            if received != size:
                raise _Misbehaved(f"object of {received} bytes, {size} declared")
            digest = hasher.digest()
            if digest != h.digest:
                raise _Misbehaved(f"object bytes do not hash to {h}")
            await finish()
            return size, digest

        result: tuple[int, bytes] = await self._request(peer, request, handle)
        return result

    async def fetch_object(
        self,
        peer: str,
        dataset_id: DatasetId,
        kind: ObjectKind,
        h: Multihash,
        quarantine_path: Path,
        *,
        expected_size: int | None = None,
    ) -> bytes:
        """Stream object ``h`` into the new file ``quarantine_path``; returns its SHA3-256 digest.

        For callers that publish the file themselves (`p2p.sync`): the file is created
        exclusively (mode 0600), written, fsynced by the caller; it is removed again if
        the transfer fails or the bytes do not hash to ``h``, so a returned digest always
        equals ``h.digest``.

        Raises:
            FileExistsError: ``quarantine_path`` exists.
            PeerMisbehaved: size other than ``expected_size``/declared, wrong bytes.
            See also `get_head`.
        """
        path = Path(quarantine_path)
        fd = -1

        def open_sink(_size: int) -> Callable[[bytes], None]:
            nonlocal fd
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)

            def write(piece: bytes) -> None:
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view) :]

            return write

        async def finish() -> None:
            pass

        ok = False
        try:
            _, digest = await self._receive_object(
                peer, dataset_id, kind, h, expected_size, open_sink, finish
            )
            ok = True
            return digest
        finally:
            if fd >= 0:
                os.close(fd)
                if not ok:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()

    async def get_object(
        self,
        peer: str,
        dataset_id: DatasetId,
        kind: ObjectKind,
        h: Multihash,
        dest_path: Path,
        *,
        expected_size: int | None = None,
    ) -> int:
        """Download object ``h`` to ``dest_path`` through a verified quarantine file.

        The bytes go to a ``.pending-*`` file in ``dest_path``'s directory (created if
        needed), hashed on the way; only when the size and SHA3-256 match ``h`` is the
        file fsynced and renamed to ``dest_path`` (mode 0444). On any failure the
        pending file is removed and nothing appears under ``dest_path``.

        Returns:
            The object size in bytes.

        Raises:
            PeerMisbehaved: wrong bytes, more or fewer bytes than declared.
            FrameTooLarge: a frame or declared size over the limits.
            NotFoundOnPeer / TransferTimeout / TransferError / PeerUnavailable: see
                `get_head`.
        """
        dest_path = Path(dest_path)
        await trio.to_thread.run_sync(ensure_dir, dest_path.parent)
        with PendingFile(dest_path.parent, mode=OBJECT_MODE) as pending:

            async def finish() -> None:
                await trio.to_thread.run_sync(pending.commit, dest_path)

            size, _ = await self._receive_object(
                peer, dataset_id, kind, h, expected_size, lambda _size: pending.write, finish
            )
        return size
