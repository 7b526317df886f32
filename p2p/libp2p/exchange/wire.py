"""What the exchange server and client share: protocol id, limits, and the frame adapter.

The wire format and the requests are described in `p2p.libp2p.exchange`. Frames are encoded
and decoded without I/O by `p2p.libp2p.framing`; this module is the thin async layer that
moves them over a libp2p stream (trio): writes cut to `STREAM_WRITE_BYTES`, reads fed
to a `p2p.libp2p.framing.FrameDecoder`, every wait bounded by the stall timeout.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

import trio
from libp2p.io.exceptions import IOException
from libp2p.network.stream.exceptions import StreamEOF

from fbs.errors import FbsError
from fbs.multiformats import SHA3_256, Multihash
from p2p.errors import P2PError, PeerMisbehaved, TransferError, TransferTimeout
from p2p.libp2p.framing import (
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
from p2p.peer_json import DEFAULT_JSON_LIMITS, JsonLimits, load_peer_object
from p2p.peers import Offence
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "EXCHANGE_PROTOCOL",
    "OBJECT_KINDS",
    "STREAMED_TYPES",
    "STREAM_WRITE_BYTES",
    "BadRequest",
    "ExchangeLimits",
    "FrameReader",
    "Misbehaved",
    "ObjectKind",
    "StreamEnded",
    "parse_hash",
    "read_frame_header",
    "write_frame",
    "write_json",
]

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
OBJECT_KINDS: Final = ("data", "checkpoint")

#: Frame types whose payloads the client receives piece by piece, judging each header
#: (type, batch and object budgets) before any of its payload is read.
STREAMED_TYPES: Final = frozenset({FrameType.BLOCK, FrameType.CHUNK})


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


class Misbehaved(PeerMisbehaved):
    """A `PeerMisbehaved` that names the offence to charge."""

    def __init__(self, message: str, offence: Offence = Offence.BAD_BYTES) -> None:
        super().__init__(message)
        self.offence = offence


class StreamEnded(TransferError):
    """The stream ended."""


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


async def write_json(stream: Any, ftype: int, obj: dict[str, Any], limits: ExchangeLimits) -> None:
    """Write a frame whose payload is ``obj`` as compact JSON (see `write_frame`)."""
    await write_frame(stream, ftype, _dump(obj), limits.stall_timeout_s)


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


#: Bytes asked of the stream per read at least (a read returns what the muxer holds).
_READ_BYTES: Final = 65536


class FrameReader:
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
            raise StreamEnded("stream ended") from None
        except (IOException, OSError) as e:
            raise TransferError(f"stream read failed: {e!r}") from None
        if not data:
            raise StreamEnded("stream ended")
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
            raise Misbehaved(f"unexpected frame {event.type}", Offence.PROTOCOL_ERROR)
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
    header = await FrameReader(stream, limits, streamed=range(256)).next()
    assert isinstance(header, FrameHeader)
    return header.type, header.length


def parse_hash(value: object, what: str) -> Multihash:
    """``value`` (a field named ``what`` of a peer's JSON) as a SHA3-256 multihash.

    Raises:
        BadRequest: not a multibase string of a SHA3-256 multihash.
    """
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a multibase string")
    try:
        h = Multihash.from_multibase(value)
    except FbsError:
        raise BadRequest(f"invalid {what}") from None
    if h.code != SHA3_256:
        raise BadRequest(f"{what} must be a SHA3-256 multihash")
    return h


class BadRequest(P2PError):
    """A request the server refuses (answered with ERROR bad_request)."""
