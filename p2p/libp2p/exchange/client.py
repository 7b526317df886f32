"""`ExchangeClient`: heads, blocks and objects from peers over ``/odf/exchange/1.0.0``.

Verification on the client: every block is hashed before it is parsed, and must hash to
the expected link of the chain (the requested head, then each block's
``prev_block_hash``); object bytes are hashed while they are written to a quarantine
file (`storage.fsutil.PendingFile`, ``.pending-*``, in the destination directory) and
renamed to their name only once the size and SHA3-256 hash match. Every failure is
charged to the peer in `PeerScores` (`Offence`), every success rewards it.

Trio coroutines: use them from asyncio through `P2PHost.run_trio` (or
`p2p.libp2p.source.Libp2pSource`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetId
from fbs.errors import MalformedBlock
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
from p2p.libp2p.exchange.wire import (
    EXCHANGE_PROTOCOL,
    OBJECT_KINDS,
    STREAMED_TYPES,
    BadRequest,
    ExchangeLimits,
    FrameReader,
    Misbehaved,
    ObjectKind,
    StreamEnded,
    parse_hash,
    write_json,
)
from p2p.libp2p.framing import Frame, FrameHeader, FrameType
from p2p.libp2p.host import P2PHost
from p2p.peer_json import PeerJsonError
from p2p.peers import Offence, PeerScores
from storage.fsutil import OBJECT_MODE, PendingFile, ensure_dir, write_all
from storage.object_store import MAX_BLOCK_SIZE

__all__ = ["ExchangeClient", "RemoteHead"]


@dataclass(frozen=True, slots=True)
class RemoteHead:
    """A peer's answer to a head request.

    Attributes:
        head: the peer's head of the dataset (``None``: it holds no block).
        record: the signed head record JSON it gave (unverified), if any.
    """

    head: Multihash | None
    record: bytes | None


class _LocalLimit(TransferError):
    """One of *our* totals was exceeded; not the peer's fault."""


def _remote_error(obj: dict[str, Any]) -> RemoteError:
    code = obj.get("code")
    message = obj.get("message")
    code = code if isinstance(code, str) else "error"
    text = f"peer error {code}: {message if isinstance(message, str) else ''}"[:600]
    if code == "not_found":
        return NotFoundOnPeer(text, code)
    hint = obj.get("retry_after_ms")
    # Bounded: a peer's hint must not park us for long (`MAX_BUSY_WAIT_S` caps it too).
    retry = hint / 1000 if isinstance(hint, int) and 0 <= hint <= 600_000 else None
    return RemoteError(text, code, retry_after_s=retry)


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
    if isinstance(e, Misbehaved | PeerJsonError):
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
    """Requests blocks, heads and objects from peers (trio coroutines; see `p2p.libp2p.host`).

    Use from asyncio through `P2PHost.run_trio` (or `p2p.libp2p.source.Libp2pSource`).

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
        handle: Callable[[FrameReader], Awaitable[Any]],
    ) -> Any:
        """Open a stream, send ``request``, run ``handle``; charge/reward ``peer``."""
        stream = await self._open(peer)
        try:
            await write_json(stream, FrameType.REQUEST, request, self.limits)
            with contextlib.suppress(Exception):
                await stream.close_write()
            result = await handle(FrameReader(stream, self.limits, streamed=STREAMED_TYPES))
        except (P2PError, MalformedBlock) as e:
            err: Exception = e
            if isinstance(e, MalformedBlock):
                err = Misbehaved(f"block does not decode: {e}")
            elif isinstance(e, StreamEnded):
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

        async def handle(reader: FrameReader) -> RemoteHead:
            frame = await reader.frame()
            if frame.type == FrameType.ERROR:
                raise _remote_error(reader.json(frame))
            if frame.type != FrameType.HEAD:
                raise Misbehaved(f"expected HEAD, got frame {frame.type}", Offence.PROTOCOL_ERROR)
            obj = reader.json(frame)
            head, record = obj.get("head"), obj.get("record")
            if record is not None and not isinstance(record, str):
                raise Misbehaved("record must be a string", Offence.PROTOCOL_ERROR)
            try:
                parsed = None if head is None else parse_hash(head, "head")
            except BadRequest as e:
                raise Misbehaved(str(e), Offence.PROTOCOL_ERROR) from None
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

        async def handle(reader: FrameReader) -> list[bytes]:
            out: list[bytes] = []
            size = 0
            want: Multihash | None = head
            while True:
                event = await reader.next()
                if isinstance(event, Frame):
                    if event.type == FrameType.END:
                        if not out:
                            raise Misbehaved("empty blocks batch", Offence.PROTOCOL_ERROR)
                        return out
                    if event.type == FrameType.ERROR:
                        raise _remote_error(reader.json(event))
                if not isinstance(event, FrameHeader) or event.type != FrameType.BLOCK:
                    raise Misbehaved(f"unexpected frame {event.type}", Offence.PROTOCOL_ERROR)
                if want is None:
                    raise Misbehaved("blocks past the end of the requested chain")
                if len(out) >= limits.max_blocks_per_request:
                    raise Misbehaved("too many blocks in a batch", Offence.LIMIT_EXCEEDED)
                size += event.length
                if event.length > MAX_BLOCK_SIZE or size > limits.max_block_bytes_per_request:
                    raise FrameTooLarge(
                        f"blocks batch over {limits.max_block_bytes_per_request} bytes"
                    )
                raw = await reader.payload(event)
                if block_hash(raw) != want:  # hash before parse
                    raise Misbehaved(f"block does not hash to {want}")
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
        if kind not in OBJECT_KINDS:
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

        async def handle(reader: FrameReader) -> tuple[int, bytes]:
            frame = await reader.frame()
            if frame.type == FrameType.ERROR:
                raise _remote_error(reader.json(frame))
            if frame.type != FrameType.OBJECT:
                raise Misbehaved(f"expected OBJECT, got frame {frame.type}", Offence.PROTOCOL_ERROR)
            size = reader.json(frame).get("size")
            if type(size) is not int or size < 0:
                raise Misbehaved("invalid object size", Offence.PROTOCOL_ERROR)
            if size > limits.max_object_bytes:
                raise FrameTooLarge(f"object of {size} bytes exceeds {limits.max_object_bytes}")
            if expected_size is not None and size != expected_size:
                raise Misbehaved(f"object of {size} bytes, the block declares {expected_size}")
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
                            raise Misbehaved(
                                f"unexpected frame {event.type}", Offence.PROTOCOL_ERROR
                            )
                        if received + event.length > size:
                            raise Misbehaved(f"object longer than the declared {size} bytes")
                        await pieces.send(await reader.payload(event))
                        received += event.length

            received = await _pipelined(receive, sink)
            if received != size:
                raise Misbehaved(f"object of {received} bytes, {size} declared")
            digest = hasher.digest()
            if digest != h.digest:
                raise Misbehaved(f"object bytes do not hash to {h}")
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
                write_all(fd, piece)

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
