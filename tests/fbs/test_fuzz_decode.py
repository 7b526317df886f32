"""Hostile input: decoding only ever returns a value or raises MalformedBlock."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import flatbuffers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fbs.model as m
from fbs.codec import decode_block, decode_table, encode_block, encode_manifest, encode_table
from fbs.errors import BlockLimitExceeded, MalformedBlock, UnsupportedVersion
from fbs.limits import DecodeLimits
from fbs.model import schema_of
from fbs.timestamp import Timestamp
from tests.fbs.test_codec_vectors import EVENT_VECTORS, wrap

VALID_BLOCKS = [encode_block(wrap(ev), v) for _, ev, _, _ in EVENT_VECTORS for v in (2, 3)]
ROOTS = [m.MetadataBlock, m.Manifest, m.DatasetSnapshot, m.TransformRequest, m.RawQueryResponseRoot]


def _decode_all_ways(data: bytes) -> None:
    with contextlib.suppress(MalformedBlock):
        decode_block(data)
    for cls in ROOTS:
        with contextlib.suppress(MalformedBlock):
            decode_table(cls, data)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _decode_all_ways(data)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(VALID_BLOCKS),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1, max_size=8),
)
def test_bit_flips(block: bytes, flips: list[tuple[int, int]]) -> None:
    data = bytearray(block)
    for pos, bit in flips:
        data[pos % len(data)] ^= 1 << bit
    _decode_all_ways(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(VALID_BLOCKS), st.integers(0, 10**6), st.binary(max_size=64))
def test_truncated_and_extended(block: bytes, cut: int, tail: bytes) -> None:
    _decode_all_ways(block[: cut % len(block)])
    extended = block + tail
    # Trailing bytes after a finished buffer are ignored by flatbuffers readers.
    assert decode_block(extended) == decode_block(block)


def test_exhaustive_single_byte_mutations_setinfo() -> None:
    block = m.MetadataBlock(
        system_time=Timestamp.parse_rfc3339("2050-01-01T12:00:00Z"),
        sequence_number=0,
        event=m.SetInfo(description="foo", keywords=("a",)),
    )
    data = encode_block(block)
    decoded_ok = 0
    for pos in range(len(data)):
        for value in range(256):
            if value == data[pos]:
                continue
            mutated = data[:pos] + bytes([value]) + data[pos + 1 :]
            try:
                decode_block(mutated)
                decoded_ok += 1
            except MalformedBlock:
                pass
    # Padding / string-content mutations still decode; offsets and vtables must not.
    assert 0 < decoded_ok < 255 * len(data)


def test_single_byte_mutations_large_block() -> None:
    data = VALID_BLOCKS[10]  # SetPollingSource with a DataSchema (many tables), v2
    outcomes = {"decoded": 0, "rejected": 0}
    for pos in range(len(data)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF, data[pos] ^ 0x04):
            mutated = data[:pos] + bytes([value]) + data[pos + 1 :]
            try:
                decode_block(mutated)
                outcomes["decoded"] += 1
            except MalformedBlock:
                outcomes["rejected"] += 1
    assert outcomes["decoded"] > 0 and outcomes["rejected"] > 0


def _manifest_with(kind: int, version: int) -> bytes:
    return encode_manifest(kind, version, encode_table(wrap(m.SetInfo())))


def test_manifest_kind_and_version_checked() -> None:
    assert decode_block(_manifest_with(0x400000, 2)) == wrap(m.SetInfo())
    assert decode_block(_manifest_with(0x400000, 3)) == wrap(m.SetInfo())
    for kind, version in ((0x400000, 1), (0x400000, 4), (0x400001, 2), (0, 0)):
        with pytest.raises(UnsupportedVersion):
            decode_block(_manifest_with(kind, version))


def _raw_table(fields: list[tuple[int, int]], num_slots: int, method: str = "Uint8") -> bytes:
    """A hand-built root table with arbitrary scalar (slot, value) contents."""
    b = flatbuffers.Builder(64)
    b.StartObject(num_slots)
    for slot, value in fields:
        getattr(b, f"Prepend{method}Slot")(slot, value, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_semantic_errors_are_malformed() -> None:
    good = encode_table(wrap(m.SetInfo(description="é")))
    # Invalid UTF-8: patch the 2-byte 'é' into 0xff 0xfe.
    bad_utf8 = good.replace("é".encode(), b"\xff\xfe")
    with pytest.raises(MalformedBlock, match="UTF-8"):
        decode_table(m.MetadataBlock, bad_utf8)
    # Unknown union type code (event_type = 99).
    evt = encode_table(wrap(m.SetInfo()))
    pos = evt.index(bytes([8]), 20)  # event_type byte of SetInfo (first 0x08 after vtable)
    with pytest.raises(MalformedBlock):
        decode_table(m.MetadataBlock, evt[:pos] + bytes([99]) + evt[pos + 1 :])
    # Required field absent: a MetadataBlock without system_time or event.
    with pytest.raises(MalformedBlock, match="required"):
        decode_table(m.MetadataBlock, _raw_table([], 5))
    # Invalid bool byte / enum value.
    with pytest.raises(MalformedBlock, match="bool"):
        decode_table(m.ReadStepCsv, _raw_table([(5, 2)], 11))
    with pytest.raises(MalformedBlock, match="enum"):
        decode_table(m.DataTypeTime, _raw_table([(0, 9)], 1, "Int16"))
    # Impossible timestamp (ordinal 400).
    ts_block = encode_table(wrap(m.SetInfo()))
    ts_pos = ts_block.index(struct.pack("<iH", 2020, 1))
    broken = ts_block[:ts_pos] + struct.pack("<iH", 2020, 400) + ts_block[ts_pos + 6 :]
    with pytest.raises(MalformedBlock):
        decode_table(m.MetadataBlock, broken)
    # Invalid multihash bytes (unknown code) inside prev_block_hash.
    mh_pos = ts_block.index(b"\x16\x20")
    with pytest.raises(MalformedBlock):
        decode_table(m.MetadataBlock, ts_block[:mh_pos] + b"\x17" + ts_block[mh_pos + 1 :])


def test_extra_attributes_must_be_json_object() -> None:
    good = encode_table(m.ExtraAttributes({"a": 1}))
    assert decode_table(m.ExtraAttributes, good) == m.ExtraAttributes({"a": 1})
    as_list = good.replace(b'{"a":1}', b'["a",1]')
    with pytest.raises(MalformedBlock):
        decode_table(m.ExtraAttributes, as_list)
    not_json = good.replace(b'{"a":1}', b'{"a":1,')
    with pytest.raises(MalformedBlock):
        decode_table(m.ExtraAttributes, not_json)


def _nested_schema(depth: int) -> m.DataSchema:
    t: Any = m.DataTypeString()
    for _ in range(depth):
        t = m.DataTypeOption(inner=t)
    return m.DataSchema(fields=(m.DataField(name="x", type=t),))


def test_limits() -> None:
    data = encode_table(_nested_schema(30))
    assert decode_table(m.DataSchema, data) == _nested_schema(30)
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.DataSchema, data, DecodeLimits(max_nesting_depth=10))
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.DataSchema, data, DecodeLimits(max_total_objects=10))
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.DataSchema, data, DecodeLimits(max_block_bytes=len(data) - 1))
    info = encode_table(m.SetInfo(description="x" * 100, keywords=("a",) * 50))
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.SetInfo, info, DecodeLimits(max_string_len=99))
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.SetInfo, info, DecodeLimits(max_vector_len=49))
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.SetInfo, info, DecodeLimits(max_decoded_bytes=120))


def test_shared_string_fan_out_is_bounded() -> None:
    # One 64 KiB string referenced by 10k vector slots: 640 MB if materialized naively.
    b = flatbuffers.Builder(1 << 17)
    s = b.CreateString("x" * 65536)
    b.StartVector(4, 10_000, 4)
    for _ in range(10_000):
        b.PrependUOffsetTRelative(s)
    vec = b.EndVector()
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(1, vec, 0)
    b.Finish(b.EndObject())
    with pytest.raises(BlockLimitExceeded):
        decode_table(m.SetInfo, bytes(b.Output()))


def test_self_referencing_table_is_bounded() -> None:
    # The inner Option's `inner` offset is patched to 0, i.e. to the offset field itself.
    data = bytearray(encode_table(m.DataTypeOption(inner=m.DataTypeOption(inner=m.DataTypeNull()))))
    root = struct.unpack_from("<I", data, 0)[0]
    vt = root - struct.unpack_from("<i", data, root)[0]
    inner_field = root + struct.unpack_from("<H", data, vt + 6)[0]
    target = inner_field + struct.unpack_from("<I", data, inner_field)[0]
    vt2 = target - struct.unpack_from("<i", data, target)[0]
    f2 = target + struct.unpack_from("<H", data, vt2 + 6)[0]
    struct.pack_into("<I", data, f2, 0)  # offset 0 -> points at the field itself
    with pytest.raises(MalformedBlock):
        decode_table(m.DataTypeOption, bytes(data))


@pytest.mark.parametrize("cls", [t.cls for t in m.all_tables()], ids=lambda c: c.__name__)
def test_empty_and_tiny_buffers(cls: type) -> None:
    required = [f for f in schema_of(cls).fields if not f.optional and f.default is None]
    for data in (b"", b"\x00" * 4, b"\x00" * 8, b"\xff" * 16, b"\x04\x00\x00\x00" * 4):
        try:
            decode_table(cls, data)
        except MalformedBlock:
            continue
        assert not required, (cls, data)  # only tables without required fields may decode
