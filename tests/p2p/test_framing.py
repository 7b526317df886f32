"""The exchange protocol's sans-I/O framing: any split of a byte stream, same frames."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.errors import FrameTooLarge
from p2p.libp2p.framing import (
    CONTROL_TYPES,
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
    encode_header,
)

LIMITS = FrameLimits(max_frame_bytes=64, max_control_frame_bytes=16)
STREAMED = frozenset({FrameType.BLOCK, FrameType.CHUNK})

FRAMES = [
    (FrameType.REQUEST, b'{"op":"head"}'),
    (FrameType.HEAD, b""),
    (FrameType.BLOCK, bytes(range(64))),
    (FrameType.CHUNK, b""),
    (FrameType.CHUNK, b"x"),
    (FrameType.OBJECT, b'{"size":3}'),
    (99, b"unknown type"),
    (FrameType.END, b""),
]
STREAM = b"".join(encode_frame(t, p) for t, p in FRAMES)


def drain(dec: FrameDecoder) -> list[Event]:
    out = []
    while (ev := dec.next_event()) is not None:
        out.append(ev)
    return out


def decode(chunks: list[bytes], streamed: frozenset[int] = STREAMED) -> list[Event]:
    """Feed ``chunks`` one by one, draining events after each."""
    dec = FrameDecoder(LIMITS, streamed=streamed)
    events: list[Event] = []
    for c in chunks:
        dec.feed(c)
        events += drain(dec)
    assert dec.at_boundary
    return events


def frames_of(events: list[Event]) -> list[tuple[int, bytes]]:
    """Reassemble streamed frames, checking the event grammar on the way."""
    out: list[tuple[int, bytes]] = []
    open_: FrameHeader | None = None
    parts: list[bytes] = []
    for ev in events:
        if isinstance(ev, Frame):
            assert open_ is None
            out.append((ev.type, ev.payload))
        elif isinstance(ev, FrameHeader):
            assert open_ is None
            open_, parts = ev, []
        elif isinstance(ev, PayloadPiece):
            assert open_ is not None and ev.data
            parts.append(ev.data)
        else:
            assert isinstance(ev, PayloadEnd) and open_ is not None and ev.type == open_.type
            payload = b"".join(parts)
            assert len(payload) == open_.length
            out.append((open_.type, payload))
            open_ = None
    assert open_ is None
    return out


def test_whole_stream_at_once() -> None:
    events = decode([STREAM])
    assert frames_of(events) == FRAMES
    # Streamed types come as header/pieces/end, the others as whole frames.
    assert events[0] == Frame(FrameType.REQUEST, b'{"op":"head"}')
    assert events[2] == FrameHeader(FrameType.BLOCK, 64)
    assert events[3] == PayloadPiece(bytes(range(64)))
    assert events[4] == PayloadEnd(FrameType.BLOCK)
    assert events[5:7] == [FrameHeader(FrameType.CHUNK, 0), PayloadEnd(FrameType.CHUNK)]


@pytest.mark.parametrize("streamed", [STREAMED, frozenset()])
def test_every_split_point_gives_the_same_frames(streamed: frozenset[int]) -> None:
    expected = frames_of(decode([STREAM], streamed))
    for i in range(len(STREAM) + 1):
        assert frames_of(decode([STREAM[:i], STREAM[i:]], streamed)) == expected
    for i in range(len(STREAM)):
        for j in range(i, len(STREAM) + 1):
            assert frames_of(decode([STREAM[:i], STREAM[i:j], STREAM[j:]], streamed)) == expected


def test_a_byte_at_a_time() -> None:
    events = decode([STREAM[i : i + 1] for i in range(len(STREAM))])
    assert frames_of(events) == FRAMES
    assert all(len(ev.data) == 1 for ev in events if isinstance(ev, PayloadPiece))


frame_st = st.tuples(
    st.sampled_from([*CONTROL_TYPES, FrameType.BLOCK, FrameType.CHUNK, 0, 200]),
    st.binary(max_size=16),
)


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(frame_st, max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20),
    streamed=st.sets(st.sampled_from([FrameType.BLOCK, FrameType.CHUNK, 0, 200])),
)
def test_any_split_of_any_frames(
    frames: list[tuple[int, bytes]], cuts: list[int], streamed: set[int]
) -> None:
    stream = b"".join(encode_frame(t, p) for t, p in frames)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert frames_of(decode(chunks, frozenset(streamed))) == frames


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(frame_st, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=12),
    limit_of=st.sampled_from([FrameType.CHUNK, FrameType.HEAD, 200]),
)
def test_an_oversized_header_is_refused_when_its_last_byte_arrives(
    frames: list[tuple[int, bytes]], cuts: list[int], limit_of: int
) -> None:
    good = b"".join(encode_frame(t, p) for t, p in frames)
    bad = encode_header(limit_of, LIMITS.limit(limit_of) + 1)
    stream = good + bad + b"payload that must never be held" * 4
    completes = len(good) + len(bad)  # bytes fed when the refusal is due
    points = sorted({min(c, len(stream)) for c in cuts} | {len(stream)})
    dec = FrameDecoder(LIMITS, streamed=STREAMED)
    events: list[Event] = []
    fed = 0
    for end in points:
        chunk = stream[fed:end]
        if end >= completes:
            with pytest.raises(FrameTooLarge):
                dec.feed(chunk)
            break
        dec.feed(chunk)
        fed = end
        events += drain(dec)
    assert dec.next_event() is None
    # Before the refusal, the events were those of the valid frames, in order.
    got, want = bytewise(events), bytewise(decode([good]))
    assert got == want[: len(got)]


def bytewise(events: list[Event]) -> list[object]:
    """``events`` with each payload piece cut into single bytes (split-independent)."""
    out: list[object] = []
    for ev in events:
        if isinstance(ev, PayloadPiece):
            out += [ev.data[i : i + 1] for i in range(len(ev.data))]
        else:
            out.append(ev)
    return out


def test_oversize_refused_from_the_prefix_alone() -> None:
    for ftype, limit in [(FrameType.CHUNK, 64), (FrameType.ERROR, 16), (77, 64)]:
        dec = FrameDecoder(LIMITS, streamed=STREAMED)
        dec.feed(encode_frame(FrameType.END))
        header = encode_header(ftype, limit + 1)
        dec.feed(header[:-1])  # an incomplete header is not judged yet
        with pytest.raises(FrameTooLarge, match=f"exceeds {limit}"):
            dec.feed(header[-1:])  # not one payload byte was sent
        # Dead for good, and nothing of the refused frame (or before it) is held.
        assert dec.next_event() is None
        with pytest.raises(FrameTooLarge):
            dec.feed(b"\x00" * 10)
    # A limit-sized frame is fine.
    assert decode([encode_frame(FrameType.ERROR, b"e" * 16)]) == [Frame(FrameType.ERROR, b"e" * 16)]


def test_oversize_header_among_buffered_frames_raises_at_feed() -> None:
    dec = FrameDecoder(LIMITS)
    # A 4 GiB announcement after a valid frame, in one read: refused at feed, before
    # the caller could even pull the first frame.
    with pytest.raises(FrameTooLarge):
        dec.feed(encode_frame(FrameType.END) + encode_header(FrameType.CHUNK, 2**32 - 1) + b"x")
    assert dec.next_event() is None


def test_bytes_wanted_and_boundary() -> None:
    dec = FrameDecoder(LIMITS)

    def state() -> tuple[bool, int]:  # a call: mypy does not narrow it between feeds
        return dec.at_boundary, dec.bytes_wanted

    assert state() == (True, HEADER_SIZE)
    frame = encode_frame(FrameType.BLOCK, b"abcdef")
    dec.feed(frame[:2])
    assert state() == (False, HEADER_SIZE - 2)
    dec.feed(frame[2:7])
    assert state() == (False, 4)
    assert dec.next_event() is None
    dec.feed(frame[7:])
    assert dec.next_event() == Frame(FrameType.BLOCK, b"abcdef")
    assert state() == (True, HEADER_SIZE)


def test_large_payload_is_one_frame_from_many_pieces() -> None:
    limits = FrameLimits(max_frame_bytes=2**20)
    payload = bytes(range(256)) * 4096
    data = encode_frame(FrameType.CHUNK, payload)
    dec = FrameDecoder(limits)
    for i in range(0, len(data), 65536):
        dec.feed(memoryview(data)[i : i + 65536])
    assert drain(dec) == [Frame(FrameType.CHUNK, payload)]


def test_encoder_refuses_what_the_prefix_cannot_say() -> None:
    assert encode_frame(FrameType.HEAD, b"ab") == b"\x00\x00\x00\x02\x07ab"
    with pytest.raises(ValueError):
        encode_header(256, 0)
    with pytest.raises(ValueError):
        encode_header(FrameType.CHUNK, 2**32)
