"""Frames of the object exchange protocol, without I/O (bytes in, events out).

Every message of ``/odf/exchange/1.0.0`` is a frame::

    u32 big-endian payload length | u8 frame type | payload

`encode_frame` turns a frame into bytes. `FrameDecoder` is fed whatever bytes a
transport produced (any split: a byte at a time or many frames at once) and hands out
events: a whole `Frame`, or, for frame types chosen to be *streamed* (object bodies),
a `FrameHeader`, the payload as `PayloadPiece` s in arrival order, and `PayloadEnd`.
A streamed payload is never gathered by the decoder, so its consumer can refuse a
frame from its header and bound what it holds itself.

Limits are checked from the length prefix, the moment its five header bytes are fed:
a frame over its limit raises `FrameTooLarge` before any of its payload is kept,
and the decoder is dead afterwards (the stream must be reset: there is no way
to resynchronise a length-prefixed stream).

The async adapter over libp2p streams is in `p2p.libp2p.exchange`.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from p2p.errors import FrameTooLarge

__all__ = [
    "CONTROL_TYPES",
    "DEFAULT_MAX_CONTROL_FRAME_BYTES",
    "DEFAULT_MAX_FRAME_BYTES",
    "HEADER_SIZE",
    "MAX_PAYLOAD_BYTES",
    "Event",
    "Frame",
    "FrameDecoder",
    "FrameHeader",
    "FrameLimits",
    "FrameType",
    "PayloadEnd",
    "PayloadPiece",
    "encode_frame",
    "encode_header",
]

_HEADER: Final = struct.Struct(">IB")
#: Bytes of a frame header: payload length (u32, big-endian) and frame type (u8).
HEADER_SIZE: Final = _HEADER.size
#: Largest payload the length prefix can express.
MAX_PAYLOAD_BYTES: Final = 2**32 - 1
#: Default limit of a BLOCK or CHUNK payload (and of any type not in `CONTROL_TYPES`).
DEFAULT_MAX_FRAME_BYTES: Final = 4 * 2**20
#: Default limit of a REQUEST, OBJECT, END, ERROR or HEAD payload.
DEFAULT_MAX_CONTROL_FRAME_BYTES: Final = 64 * 2**10


class FrameType:
    """Frame type codes (u8)."""

    REQUEST: Final = 1
    BLOCK: Final = 2
    OBJECT: Final = 3
    CHUNK: Final = 4
    END: Final = 5
    ERROR: Final = 6
    HEAD: Final = 7


#: Frame types with small JSON (or empty) payloads: `FrameLimits.max_control_frame_bytes`.
CONTROL_TYPES: Final = frozenset(
    {FrameType.REQUEST, FrameType.OBJECT, FrameType.END, FrameType.ERROR, FrameType.HEAD}
)


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """Largest payload the decoder accepts, by frame type.

    Attributes:
        max_frame_bytes: payload limit of every type not in `CONTROL_TYPES`.
        max_control_frame_bytes: payload limit of the types in `CONTROL_TYPES`.
    """

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_control_frame_bytes: int = DEFAULT_MAX_CONTROL_FRAME_BYTES

    def limit(self, ftype: int) -> int:
        """The payload limit of frames of type ``ftype``."""
        return self.max_control_frame_bytes if ftype in CONTROL_TYPES else self.max_frame_bytes


def encode_header(ftype: int, length: int) -> bytes:
    """The 5-byte header of a frame of type ``ftype`` with a ``length``-byte payload.

    Raises:
        ValueError: ``ftype`` is not a u8 or ``length`` does not fit the prefix.
    """
    if not 0 <= ftype <= 255:
        raise ValueError(f"frame type {ftype} is not a u8")
    if not 0 <= length <= MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {length} bytes does not fit a frame")
    return _HEADER.pack(length, ftype)


def encode_frame(ftype: int, payload: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame: header and payload.

    Raises:
        ValueError: see `encode_header`.
    """
    return encode_header(ftype, len(payload)) + bytes(payload)


@dataclass(frozen=True, slots=True)
class Frame:
    """A complete frame of a type that is not streamed."""

    type: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The header of a streamed frame: ``length`` payload bytes follow as pieces."""

    type: int
    length: int


@dataclass(frozen=True, slots=True)
class PayloadPiece:
    """The next non-empty piece of a streamed frame's payload."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PayloadEnd:
    """The streamed frame announced by the last `FrameHeader` is complete."""

    type: int


Event = Frame | FrameHeader | PayloadPiece | PayloadEnd


class FrameDecoder:
    """Incremental frame decoder (see the module docstring).

    Args:
        limits: payload limits, checked from each header.
        streamed: frame types whose payload is handed out in pieces (`FrameHeader`,
            `PayloadPiece` ..., `PayloadEnd`) instead of as one `Frame`.
    """

    def __init__(
        self, limits: FrameLimits | None = None, *, streamed: Collection[int] = ()
    ) -> None:
        self._limits = limits or FrameLimits()
        self._streamed = frozenset(streamed)
        self._buf = bytearray()  # bytes of the next header (never of a payload)
        self._events: deque[Event] = deque()
        # The frame whose payload is arriving (None: a header is expected next).
        self._type = 0
        self._remaining: int | None = None
        self._parts: list[bytes] | None = None  # a whole frame's payload so far
        self._broken: FrameTooLarge | None = None

    @property
    def at_boundary(self) -> bool:
        """Whether the bytes fed so far end exactly between frames (a clean end of stream)."""
        return self._remaining is None and not self._buf

    @property
    def bytes_wanted(self) -> int:
        """Bytes still needed to complete the current header or payload (at least 1)."""
        if self._remaining is None:
            return HEADER_SIZE - len(self._buf)
        return max(self._remaining, 1)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Take the next bytes of the stream; complete events become available.

        Raises:
            FrameTooLarge: a header in ``data`` announces a payload over its limit
                (raised again on every later call: the decoder cannot recover).
        """
        if self._broken is not None:
            raise self._broken
        view = memoryview(data).cast("B")
        whole = data if isinstance(data, bytes) else None
        pos = 0
        while pos < len(view) or self._remaining == 0:
            if self._remaining is None:
                pos = self._take_header(view, pos)
            else:
                pos = self._take_payload(view, pos, whole)

    def next_event(self) -> Event | None:
        """The next event, or ``None`` if more bytes must be fed first."""
        return self._events.popleft() if self._events else None

    def _take_header(self, view: memoryview, pos: int) -> int:
        need = HEADER_SIZE - len(self._buf)
        self._buf += view[pos : pos + need]
        pos += min(need, len(view) - pos)
        if len(self._buf) < HEADER_SIZE:
            return pos
        length, ftype = _HEADER.unpack(self._buf)
        self._buf.clear()
        limit = self._limits.limit(ftype)
        if length > limit:
            self._events.clear()
            self._broken = FrameTooLarge(
                f"frame of type {ftype} with {length} bytes exceeds {limit}"
            )
            raise self._broken
        self._type, self._remaining = ftype, length
        if ftype in self._streamed:
            self._events.append(FrameHeader(ftype, length))
        else:
            self._parts = []
        return pos

    def _take_payload(self, view: memoryview, pos: int, whole: bytes | None) -> int:
        assert self._remaining is not None
        if whole is not None and pos == 0 and len(whole) <= self._remaining:
            piece = whole  # the common case of a large payload: no copy
        else:
            piece = bytes(view[pos : pos + self._remaining])
        self._remaining -= len(piece)
        if piece:
            if self._parts is None:
                self._events.append(PayloadPiece(piece))
            else:
                self._parts.append(piece)
        if self._remaining == 0:
            if self._parts is None:
                self._events.append(PayloadEnd(self._type))
            else:
                parts = self._parts
                self._events.append(
                    Frame(self._type, parts[0] if len(parts) == 1 else b"".join(parts))
                )
                self._parts = None
            self._remaining = None
        return pos + len(piece)
