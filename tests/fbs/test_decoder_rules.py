"""Decoder checks that other tests leave unpinned: each could be deleted or shifted unnoticed.

Each test names the check of `fbs.codec.decoder` it pins and matches that check's own
message: the decoder's generic fallback also turns stray ``struct.error`` / ``IndexError``
into `MalformedBlock`, so asserting only the exception type cannot tell an explicit check
from a missing one. Limits are tested exactly at their boundary (accepted) and one past it.
"""

from __future__ import annotations

import struct
from typing import Any

import flatbuffers
import pytest

import fbs.model as m
from fbs.codec import decode_table, encode_table
from fbs.errors import BlockLimitExceeded, MalformedBlock
from fbs.limits import DecodeLimits
from fbs.model import schema_of
from fbs.timestamp import Timestamp

WATERMARK = Timestamp.parse_rfc3339("2024-02-29T12:34:56.123456789Z")


# -- reading and patching buffers ---------------------------------------------------------------


def u16(data: bytes | bytearray, pos: int) -> int:
    return int(struct.unpack_from("<H", data, pos)[0])


def u32(data: bytes | bytearray, pos: int) -> int:
    return int(struct.unpack_from("<I", data, pos)[0])


def vtable_of(data: bytes | bytearray, table: int) -> int:
    """Position of the vtable of the table at ``table``."""
    return table - int(struct.unpack_from("<i", data, table)[0])


def slot_entry(data: bytes | bytearray, table: int, cls: type, field: str) -> int:
    """Position of the vtable entry (a u16 field offset) of ``field`` of that table."""
    slot = next(f.slot for f in schema_of(cls).fields if f.name == field)
    return vtable_of(data, table) + 4 + 2 * slot


def deref(data: bytes | bytearray, pos: int) -> int:
    return pos + u32(data, pos)


def minimal_table(soffset: int = -4, vt_len: int = 4, obj_len: int = 4) -> bytearray:
    """12 bytes: root offset 4, a table with no fields at 4, its vtable at 8 (after it).

    The vtable ends exactly at the end of the buffer.
    """
    return bytearray(struct.pack("<IiHH", 4, soffset, vt_len, obj_len))


# -- strings ------------------------------------------------------------------------------------


def test_string_nul_terminator_required() -> None:
    data = bytearray(encode_table(m.SetVocab(offset_column="abcdef")))
    at = data.index(b"abcdef\x00")
    assert decode_table(m.SetVocab, bytes(data)) == m.SetVocab(offset_column="abcdef")
    data[at + 6] = ord("g")
    with pytest.raises(MalformedBlock, match="not NUL-terminated"):
        decode_table(m.SetVocab, bytes(data))


def test_string_nul_terminator_inside_the_buffer() -> None:
    """A string whose bytes end exactly at the buffer end has no room for its NUL."""
    data = encode_table(m.SetVocab(offset_column="abcdef"))
    end = data.index(b"abcdef\x00") + 6
    with pytest.raises(MalformedBlock, match="string/vector runs past the end"):
        decode_table(m.SetVocab, data[:end])
    assert decode_table(m.SetVocab, data[: end + 1]) == m.SetVocab(offset_column="abcdef")


def test_byte_vector_needs_no_terminator() -> None:
    """Byte vectors (hashes, DIDs) may end exactly at the buffer end."""
    cp = m.Checkpoint(physical_hash=m.Multihash.sha3_256(b"x"), size=3)
    data = encode_table(cp)
    digest = cp.physical_hash.to_bytes()
    end = data.index(digest) + len(digest)
    assert decode_table(m.Checkpoint, data[:end]) == cp
    with pytest.raises(MalformedBlock, match="string/vector runs past the end"):
        decode_table(m.Checkpoint, data[: end - 1])


def test_string_utf8_and_value_errors() -> None:
    data = bytearray(encode_table(m.SetVocab(offset_column="abcdef")))
    data[data.index(b"abcdef")] = 0xFF
    with pytest.raises(MalformedBlock, match="not valid UTF-8"):
        decode_table(m.SetVocab, bytes(data))


# -- tables -------------------------------------------------------------------------------------


def watermark_table() -> tuple[bytearray, int, int]:
    """AddData with only a watermark: (buffer, its table position, its field offset)."""
    data = bytearray(encode_table(m.AddData(new_watermark=WATERMARK)))
    table = u32(data, 0)
    entry = slot_entry(data, table, m.AddData, "new_watermark")
    return data, table, u16(data, entry)


def test_field_offset_inside_its_table_timestamp_size() -> None:
    """A timestamp field takes 16 bytes: its table must hold all of them."""
    data, table, off = watermark_table()
    obj_len_at = vtable_of(data, table) + 2
    struct.pack_into("<H", data, obj_len_at, off + 16)
    assert decode_table(m.AddData, bytes(data)) == m.AddData(new_watermark=WATERMARK)
    struct.pack_into("<H", data, obj_len_at, off + 15)
    with pytest.raises(MalformedBlock, match=f"field offset {off} outside its table"):
        decode_table(m.AddData, bytes(data))


@pytest.mark.parametrize("bad", [1, 2, 3])
def test_field_offset_not_inside_the_vtable_offset(bad: int) -> None:
    """Offsets 1-3 point into the table's own soffset word."""
    data, table, _ = watermark_table()
    struct.pack_into("<H", data, slot_entry(data, table, m.AddData, "new_watermark"), bad)
    with pytest.raises(MalformedBlock, match=f"field offset {bad} outside its table"):
        decode_table(m.AddData, bytes(data))


def test_scalar_field_offset_inside_its_table() -> None:
    """An 8-byte scalar at the end of its table: 8 bytes fit, 7 do not."""
    data = bytearray(encode_table(m.OffsetInterval(start=5, end=9)))
    table = u32(data, 0)
    off = max(u16(data, slot_entry(data, table, m.OffsetInterval, f)) for f in ("start", "end"))
    obj_len_at = vtable_of(data, table) + 2
    struct.pack_into("<H", data, obj_len_at, off + 8)
    assert decode_table(m.OffsetInterval, bytes(data)) == m.OffsetInterval(start=5, end=9)
    struct.pack_into("<H", data, obj_len_at, off + 7)
    with pytest.raises(MalformedBlock, match="outside its table"):
        decode_table(m.OffsetInterval, bytes(data))


def test_table_sizes_are_unsigned_16_bit() -> None:
    """Tables up to 64 KiB are valid: a field 40,000 bytes into its table is read."""
    table, field = 12, 40_000
    data = bytearray(struct.pack("<IHHH", table, 6, field + 4, field).ljust(table, b"\0"))
    data += struct.pack("<i", table - 4).ljust(field, b"\0")
    data += struct.pack("<I", 4) + struct.pack("<I", 2) + b"ab\0"
    assert decode_table(m.SetVocab, bytes(data)) == m.SetVocab(offset_column="ab")


def test_offset_field_inside_its_table() -> None:
    """A string's 4-byte offset at the end of its table: 4 bytes fit, 3 do not."""
    data = bytearray(encode_table(m.SetVocab(offset_column="ab")))
    table = u32(data, 0)
    off = u16(data, slot_entry(data, table, m.SetVocab, "offset_column"))
    obj_len_at = vtable_of(data, table) + 2
    struct.pack_into("<H", data, obj_len_at, off + 4)
    assert decode_table(m.SetVocab, bytes(data)) == m.SetVocab(offset_column="ab")
    struct.pack_into("<H", data, obj_len_at, off + 3)
    with pytest.raises(MalformedBlock, match=f"field offset {off} outside its table"):
        decode_table(m.SetVocab, bytes(data))


def test_string_length_word_inside_the_buffer() -> None:
    """An offset to the last 2 bytes: the length word itself lies past the end."""
    data = bytearray(encode_table(m.SetVocab(offset_column="ab")))
    table = u32(data, 0)
    field = table + u16(data, slot_entry(data, table, m.SetVocab, "offset_column"))
    struct.pack_into("<I", data, field, len(data) - 2 - field)
    with pytest.raises(
        MalformedBlock, match=f"offset {len(data) - 2} outside the {len(data)}-byte"
    ):
        decode_table(m.SetVocab, bytes(data))


def test_root_table_at_position_0_is_its_own_offset() -> None:
    """A root offset of 0 makes the offset word the table: its vtable length is 0."""
    with pytest.raises(MalformedBlock, match="invalid vtable length 0"):
        decode_table(m.SetVocab, bytes(8) + bytes(minimal_table())[8:])


def test_shared_strings_vector() -> None:
    """Ten offsets to one empty string: the vector holds 4 bytes per element, no more."""
    b = flatbuffers.Builder(64)
    empty = b.CreateString("")
    b.StartVector(4, 10, 4)
    for _ in range(10):
        b.PrependUOffsetTRelative(empty)
    vector = b.EndVector()
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(1, vector, 0)
    b.Finish(b.EndObject())
    assert decode_table(m.SetInfo, bytes(b.Output())) == m.SetInfo(keywords=("",) * 10)


def test_buffer_types_and_size_limit_boundary() -> None:
    data = encode_table(VOCAB)
    for same in (bytearray(data), memoryview(data)):
        assert decode_table(m.SetVocab, same) == VOCAB
    assert decode_table(m.SetVocab, data, DecodeLimits(max_block_bytes=len(data))) == VOCAB
    with pytest.raises(BlockLimitExceeded, match=f"{len(data)}-byte buffer exceeds"):
        decode_table(m.SetVocab, data, DecodeLimits(max_block_bytes=len(data) - 1))


def test_vtable_may_end_at_the_buffer_end() -> None:
    assert decode_table(m.SetVocab, bytes(minimal_table())) == m.SetVocab()


def test_vtable_outside_the_buffer() -> None:
    with pytest.raises(MalformedBlock, match="vtable of table at 4 outside the buffer"):
        decode_table(m.SetVocab, bytes(minimal_table(soffset=-5)))
    with pytest.raises(MalformedBlock, match="vtable of table at 4 outside the buffer"):
        decode_table(m.SetVocab, bytes(minimal_table(soffset=8)))


@pytest.mark.parametrize("vt_len", [0, 2, 5, 6])
def test_vtable_length(vt_len: int) -> None:
    """Too short, odd, or running past the buffer end."""
    with pytest.raises(MalformedBlock, match=f"invalid vtable length {vt_len}"):
        decode_table(m.SetVocab, bytes(minimal_table(vt_len=vt_len)))


def test_table_size_inside_the_buffer() -> None:
    assert decode_table(m.SetVocab, bytes(minimal_table(obj_len=8))) == m.SetVocab()
    for obj_len in (0, 3, 9):
        with pytest.raises(MalformedBlock, match=f"invalid table size {obj_len}"):
            decode_table(m.SetVocab, bytes(minimal_table(obj_len=obj_len)))


def test_table_position_inside_the_buffer() -> None:
    data = minimal_table()
    struct.pack_into("<I", data, 0, 10)
    with pytest.raises(MalformedBlock, match="table at 10 outside the buffer"):
        decode_table(m.SetVocab, bytes(data))


def test_root_offset_inside_the_buffer() -> None:
    data = minimal_table()
    struct.pack_into("<I", data, 0, 12)
    with pytest.raises(MalformedBlock, match="offset at 0 points past the end"):
        decode_table(m.SetVocab, bytes(data))


def test_buffer_shorter_than_8_bytes() -> None:
    data = bytes(minimal_table())
    for n in range(8):
        with pytest.raises(MalformedBlock, match="buffer too short"):
            decode_table(m.SetVocab, data[:n])
    # From 8 bytes on the buffer is parsed: what is wrong is then named.
    with pytest.raises(MalformedBlock, match="vtable of table at 4 outside"):
        decode_table(m.SetVocab, data[:8])


# -- unions -------------------------------------------------------------------------------------


def snapshot_wrapper(data: bytes | bytearray) -> int:
    """Position of the first MetadataEventWrapper table of an encoded DatasetSnapshot."""
    root = u32(data, 0)
    entry = slot_entry(data, root, m.DatasetSnapshot, "metadata")
    vector = deref(data, root + u16(data, entry))
    return deref(data, vector + 4)


def test_vector_union_element_needs_its_type() -> None:
    snap = m.DatasetSnapshot(name="n", kind=m.DatasetKind.Root, metadata=(m.SetVocab(),))
    data = bytearray(encode_table(snap))
    assert decode_table(m.DatasetSnapshot, bytes(data)) == snap
    wrapper = snapshot_wrapper(data)
    struct.pack_into("<H", data, vtable_of(data, wrapper) + 4, 0)  # drop the type slot
    with pytest.raises(MalformedBlock, match="empty MetadataEvent wrapper"):
        decode_table(m.DatasetSnapshot, bytes(data))


def test_union_type_without_value() -> None:
    block = m.MetadataBlock(
        system_time=WATERMARK, prev_block_hash=None, sequence_number=0, event=m.SetVocab()
    )
    data = bytearray(encode_table(block))
    root = u32(data, 0)
    struct.pack_into("<H", data, slot_entry(data, root, m.MetadataBlock, "event"), 0)
    with pytest.raises(MalformedBlock, match="union type without value"):
        decode_table(m.MetadataBlock, bytes(data))


def test_union_value_without_type_is_absent() -> None:
    """No type slot means no value, whatever the value slot holds: a required union is absent."""
    block = m.MetadataBlock(
        system_time=WATERMARK, prev_block_hash=None, sequence_number=0, event=m.SetVocab()
    )
    data = bytearray(encode_table(block))
    root = u32(data, 0)
    type_entry = slot_entry(data, root, m.MetadataBlock, "event") - 2
    struct.pack_into("<H", data, type_entry, 0)
    with pytest.raises(MalformedBlock, match=r"MetadataBlock\.event is required but absent"):
        decode_table(m.MetadataBlock, bytes(data))


# -- limits, exactly at the boundary ------------------------------------------------------------


def decodes_within(cls: type, value: Any, **limits: int) -> bool:
    """Whether ``value`` decodes (to itself) under ``limits``; False on BlockLimitExceeded."""
    try:
        assert decode_table(cls, encode_table(value), DecodeLimits(**limits)) == value
    except BlockLimitExceeded:
        return False
    return True


VOCAB = m.SetVocab(offset_column="ab", event_time_column="xyz")
INFO = m.SetInfo(keywords=("a", "bc"))


def test_object_count_limit_boundary() -> None:
    """SetVocab with 2 strings is 3 objects; SetInfo with 2 keywords is 1 + 1 + 2."""
    assert decodes_within(m.SetVocab, VOCAB, max_total_objects=3)
    assert not decodes_within(m.SetVocab, VOCAB, max_total_objects=2)
    assert decodes_within(m.SetInfo, INFO, max_total_objects=4)
    assert not decodes_within(m.SetInfo, INFO, max_total_objects=3)


def test_decoded_bytes_limit_boundary() -> None:
    """The string bytes are counted, without length prefixes or terminators: 2 + 3."""
    assert decodes_within(m.SetVocab, VOCAB, max_decoded_bytes=5)
    assert not decodes_within(m.SetVocab, VOCAB, max_decoded_bytes=4)


def test_string_and_vector_length_limit_boundary() -> None:
    assert decodes_within(m.SetVocab, VOCAB, max_string_len=3)
    assert not decodes_within(m.SetVocab, VOCAB, max_string_len=2)
    assert decodes_within(m.SetInfo, INFO, max_vector_len=2)
    assert not decodes_within(m.SetInfo, INFO, max_vector_len=1)


def nested_schema(options: int) -> m.DataSchema:
    t: Any = m.DataTypeString()
    for _ in range(options):
        t = m.DataTypeOption(inner=t)
    return m.DataSchema(fields=(m.DataField(name="x", type=t),))


@pytest.mark.parametrize("options", [0, 1, 5])
def test_nesting_depth_counts_from_root_1(options: int) -> None:
    """DataSchema (1) > DataField in a vector (2) > type union (3) > each Option inner (+1)."""
    depth = 3 + options
    value = nested_schema(options)
    assert decodes_within(m.DataSchema, value, max_nesting_depth=depth)
    assert not decodes_within(m.DataSchema, value, max_nesting_depth=depth - 1)


def test_nesting_depth_of_sub_tables() -> None:
    """AddData (1) > DataSlice table field (2) > OffsetInterval table field (3)."""
    value = m.AddData(
        new_data=m.DataSlice(
            logical_hash=m.Multihash.sha3_256(b"l"),
            physical_hash=m.Multihash.sha3_256(b"p"),
            offset_interval=m.OffsetInterval(start=0, end=1),
            size=1,
        )
    )
    assert decodes_within(m.AddData, value, max_nesting_depth=3)
    assert not decodes_within(m.AddData, value, max_nesting_depth=2)


def test_nesting_depth_of_vector_unions() -> None:
    """DatasetSnapshot (1) > wrapper (2) > SetInfo (3)."""
    value = m.DatasetSnapshot(name="n", kind=m.DatasetKind.Root, metadata=(m.SetInfo(),))
    assert decodes_within(m.DatasetSnapshot, value, max_nesting_depth=3)
    assert not decodes_within(m.DatasetSnapshot, value, max_nesting_depth=2)


def test_vector_runs_past_the_end() -> None:
    data = bytearray(encode_table(INFO))
    root = u32(data, 0)
    vector = deref(data, root + u16(data, slot_entry(data, root, m.SetInfo, "keywords")))
    struct.pack_into("<I", data, vector, (len(data) - vector) // 4)
    with pytest.raises(MalformedBlock, match="vector runs past the end"):
        decode_table(m.SetInfo, bytes(data))
