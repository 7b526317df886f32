"""Logical-hash machinery that differential tests leave unpinned.

The chunking, splitting and threading code never changes the digest when it is right,
so differential tests alone cannot notice when it goes wrong in a way that only shows on
some inputs (a second worker racing, a split that recurses forever, a memory bound that
no longer applies). Each test here names the rule it pins; the digests are compared with
the naive reference of `tests.fbs.test_logical_hash`, never with the code under test.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

import fbs.logical_hash as lh
from fbs.errors import UnsupportedDataType
from fbs.logical_hash import array_digest, type_descriptor
from tests.fbs.test_logical_hash import ref_array_digest

MIB = 1 << 20


def nested_lists(levels: int) -> pa.DataType:
    """``List<…List<Int8>…>`` with ``levels`` list levels."""
    t: pa.DataType = pa.int8()
    for _ in range(levels):
        t = pa.list_(t)
    return t


def nested_value(levels: int) -> Any:
    """One value of `nested_lists`: ``[[…[1, 2]…]]``."""
    v: Any = [1, 2]
    for _ in range(levels - 1):
        v = [v]
    return v


# -- the 32-level depth limit -------------------------------------------------------------------


def test_max_type_depth_is_32_levels_of_lists() -> None:
    assert lh.MAX_TYPE_DEPTH == 32
    ok = pa.array([nested_value(32), None], nested_lists(32))
    assert array_digest(ok) == ref_array_digest(ok)
    assert type_descriptor(nested_lists(32)).count(b"\x0b\x00") == 32
    with pytest.raises(UnsupportedDataType, match="deeper than 32 levels"):
        type_descriptor(nested_lists(33))
    too_deep = pa.array([nested_value(33)], nested_lists(33))
    with pytest.raises(UnsupportedDataType, match="deeper than 32 levels"):
        array_digest(too_deep)


# -- List<Bool> and other list items ------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype",
    [pa.list_(pa.bool_()), pa.large_list(pa.bool_()), pa.list_(pa.bool_(), 2)],
    ids=["list", "large_list", "fixed_size_list"],
)
def test_list_of_bool(dtype: pa.DataType) -> None:
    values = [[True, False], None, [None, True], [False, False]]
    arr = pa.array(values, dtype)
    assert array_digest(arr) == ref_array_digest(arr)
    assert array_digest(arr.slice(1)) == ref_array_digest(arr.slice(1))
    flipped = pa.array([[True, True], None, [None, True], [False, False]], dtype)
    assert array_digest(flipped) != array_digest(arr)


def test_list_of_all_null_items_of_null_type() -> None:
    """Null lists of the Null type hash (as upstream); a valid one cannot."""
    only_nulls = pa.array([None, None], pa.list_(pa.null()))
    assert array_digest(only_nulls) == ref_array_digest(only_nulls)
    assert array_digest(only_nulls.slice(1)) == ref_array_digest(only_nulls.slice(1))
    nested = pa.array([[], None, []], pa.list_(pa.list_(pa.null())))  # no inner list at all
    assert array_digest(nested) == ref_array_digest(nested)
    valid_lists: list[list[Any]] = [[[None], None], [[None], []], [[]]]
    for valid in valid_lists:
        with pytest.raises(UnsupportedDataType, match="Null type"):
            array_digest(pa.array(valid, pa.list_(pa.null())))


# -- splitting chunks by payload size -----------------------------------------------------------


def pieces(monkeypatch: pytest.MonkeyPatch, array: pa.Array) -> list[int]:
    """Row counts of the pieces the hash stream of ``array`` is prepared in."""
    seen: list[int] = []
    real = lh._stream_bytes

    def spy(part: pa.Array, mask: Any) -> Any:
        seen.append(len(part))
        return real(part, mask)

    monkeypatch.setattr(lh, "_stream_bytes", spy)
    digest = array_digest(array)
    monkeypatch.undo()
    assert digest == ref_array_digest(array)
    return seen


def row_counter(counted: list[int]) -> Any:
    """A stand-in for ``_stream_bytes`` that only records each piece's row count."""

    def count(part: pa.Array, mask: Any) -> bytes:
        counted.append(len(part))
        return b""

    return count


@pytest.mark.parametrize(
    "dtype", [pa.string(), pa.large_binary(), pa.string_view(), pa.binary_view()]
)
def test_no_null_binary_chunks_split_by_payload(
    monkeypatch: pytest.MonkeyPatch, dtype: pa.DataType
) -> None:
    """Null-free chunks above MAX_CHUNK_BYTES are split in halves, down to one row."""
    arr = pa.array([f"v{i:04d}" for i in range(40)], dtype)  # 5 bytes each
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 50)
    assert pieces(monkeypatch, arr) == [10, 10, 10, 10]
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 50)
    with_nulls = pa.array([None if i % 3 == 0 else f"v{i:04d}" for i in range(40)], dtype)
    sizes = pieces(monkeypatch, with_nulls)
    assert sum(sizes) == 40 and len(sizes) > 1


def test_no_null_list_chunks_split_by_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    arr = pa.array([[i, i + 1] for i in range(16)], pa.list_(pa.int64()))  # 2 items each
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 8)
    assert pieces(monkeypatch, arr) == [4, 4, 4, 4]


def test_two_oversized_rows_split_into_single_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows that are each bigger than the limit end as one-row pieces, not a recursion."""
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 4)
    assert pieces(monkeypatch, pa.array(["hello", "world"])) == [1, 1]
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 4)
    assert pieces(monkeypatch, pa.array(["hello", None, "world"])) == [1, 1, 1]


def test_payload_exactly_at_the_limit_is_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 10)
    assert pieces(monkeypatch, pa.array(["hello", "world"])) == [2]
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 9)
    assert pieces(monkeypatch, pa.array(["hello", "world"])) == [1, 1]


def test_max_chunk_bytes_is_32_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default limit itself: 32 MiB of payload stays whole, one byte more is split."""
    assert lh.MAX_CHUNK_BYTES == 32 * MIB
    half = 16 * MIB
    kept = pa.array([b"a" * half, b"b" * half], pa.large_binary())
    split = pa.array([b"a" * half, b"b" * (half + 1)], pa.large_binary())
    counted: list[int] = []
    monkeypatch.setattr(lh, "_stream_bytes", row_counter(counted))
    array_digest(kept)
    assert counted == [2]
    counted.clear()
    array_digest(split)
    assert counted == [1, 1]


def test_default_chunk_rows_is_65536(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lh.DEFAULT_CHUNK_ROWS == 1 << 16
    arr = pa.array(["x"] * ((1 << 16) + 1))
    counted: list[int] = []
    monkeypatch.setattr(lh, "_stream_bytes", row_counter(counted))
    array_digest(arr)
    assert counted == [1 << 16, 1]


# -- the hashing thread -------------------------------------------------------------------------


class GatedHasher:
    """A hasher whose ``update`` waits until the test opens the gate of that chunk.

    It records which chunks were hashed, in which order and on which thread.
    """

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.order: list[int] = []
        self.threads: list[str] = []

    def chunk(self, tag: int, size: int = MIB) -> bytes:
        """A chunk big enough for the worker thread, tagged by its first byte."""
        self.gates[tag] = threading.Event()
        return bytes([tag]) * size

    def update(self, data: bytes) -> None:
        self.gates[data[0]].wait(10)
        self.order.append(data[0])
        self.threads.append(threading.current_thread().name)


def feed_in_thread(feeder: Any, hasher: GatedHasher, data: bytes) -> threading.Thread:
    t = threading.Thread(target=feeder.feed, args=(hasher, data), daemon=True)
    t.start()
    return t


def test_feeder_one_worker_keeps_chunk_order() -> None:
    """The second chunk is ready first: one worker still hashes it second."""
    feeder = lh._Feeder()
    hasher = GatedHasher()
    first, second = hasher.chunk(1), hasher.chunk(2)
    feeder.feed(hasher, first)
    feeder.feed(hasher, second)
    hasher.gates[2].set()
    threading.Event().wait(0.2)  # a second worker would hash chunk 2 now
    hasher.gates[1].set()
    feeder.drain()
    assert hasher.order == [1, 2]
    assert set(hasher.threads) == {hasher.threads[0]}
    assert hasher.threads[0].startswith("logical-hash")


def test_feeder_queues_at_most_two_chunks() -> None:
    """A third pending chunk makes the producer wait for the first (bounded memory)."""
    feeder = lh._Feeder()
    hasher = GatedHasher()
    chunks = [hasher.chunk(i) for i in (1, 2, 3)]
    for data in chunks[:2]:
        t = feed_in_thread(feeder, hasher, data)
        t.join(5)
        assert not t.is_alive(), "two chunks may be queued without waiting"
    third = feed_in_thread(feeder, hasher, chunks[2])
    third.join(0.3)
    assert third.is_alive(), "the third chunk must wait for the first"
    hasher.gates[1].set()
    third.join(5)
    assert not third.is_alive()
    for tag in (2, 3):
        hasher.gates[tag].set()
    feeder.drain()
    assert hasher.order == [1, 2, 3]


def test_feeder_small_chunks_inline_from_1_mib() -> None:
    """Below 1 MiB, with nothing queued, a chunk is hashed on the caller's thread."""
    feeder = lh._Feeder()
    hasher = GatedHasher()
    small = hasher.chunk(1, MIB - 1)
    hasher.gates[1].set()
    feeder.feed(hasher, small)
    assert hasher.threads == [threading.current_thread().name]
    big = hasher.chunk(2, MIB)
    hasher.gates[2].set()
    feeder.feed(hasher, big)
    feeder.drain()
    assert hasher.threads[1].startswith("logical-hash")


def test_multi_chunk_digest_through_the_worker() -> None:
    """Several 1 MiB+ chunks of one column, all via the thread, equal the reference."""
    arr = pa.array([f"row-{i:08d}" for i in range(300_000)])  # ~6 MB of stream
    assert array_digest(arr) == ref_array_digest(arr)


def test_record_digest_chunk_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record digest prepares each column in pieces of its ``chunk_rows`` rows."""
    batch = pa.record_batch([pa.array(["a", "b", "c", "d", "e"])], names=["s"])
    expected = lh.RecordDigest(batch.schema)
    expected.update(batch)
    counted: list[int] = []
    real = lh._stream_bytes

    def spy(part: pa.Array, mask: Any) -> Any:
        counted.append(len(part))
        return real(part, mask)

    monkeypatch.setattr(lh, "_stream_bytes", spy)
    digest = lh.RecordDigest(batch.schema, chunk_rows=2)
    digest.update(batch)
    assert counted == [2, 2, 1]
    assert digest.finalize() == expected.finalize()


def item_spy(real: Any, items: list[int]) -> Any:
    """A stand-in for ``_element_stream`` that records the length of list items it gets."""

    def spy(part: pa.Array, mask: Any, depth: int) -> Any:
        if depth > 0:
            items.append(len(part))
        return real(part, mask, depth)

    return spy


def test_sliced_list_array_prepares_only_its_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing a slice of a list array streams the slice's items, not all that follow."""
    big = pa.array([[i, i + 1, i + 2] for i in range(100)], pa.list_(pa.int64()))
    fixed = pa.array([[i, i + 1, i + 2] for i in range(100)], pa.list_(pa.int64(), 3))
    for array in (big, fixed, big.cast(pa.large_list(pa.int64()))):
        items: list[int] = []
        monkeypatch.setattr(lh, "_element_stream", item_spy(lh._element_stream, items))
        window = array.slice(10, 4)
        assert array_digest(window) == ref_array_digest(window)
        monkeypatch.undo()
        assert items == [12]


def test_record_digest_uses_one_hashing_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """All columns of a record digest share one worker (one thread, in feed order)."""
    column = pa.array([f"row-{i:08d}" for i in range(100_000)])  # > 1 MiB of stream
    batch = pa.record_batch([column, column], names=["a", "b"])
    digest = lh.RecordDigest(batch.schema)
    before = {t.ident for t in threading.enumerate()}
    digest.update(batch)
    workers = [
        t
        for t in threading.enumerate()
        if t.ident not in before and t.name.startswith("logical-hash")
    ]
    digest.finalize()
    assert len(workers) == 1


@pytest.mark.parametrize(
    ("dtype", "message"),
    [
        (pa.null(), "Null type"),
        (pa.map_(pa.string(), pa.int8()), "cannot hash type map"),
        (pa.duration("s"), "cannot hash type duration"),
    ],
)
def test_stream_chunks_refuses_unhashable_arrays_even_empty(
    dtype: pa.DataType, message: str
) -> None:
    """The chunker refuses Null and unsupported types itself, before looking at any row."""
    with pytest.raises(UnsupportedDataType, match=message):
        list(lh._stream_chunks(pa.array([], dtype), None, 10))


# -- stream buffers -----------------------------------------------------------------------------


def test_joined_is_exactly_the_elements_bytes() -> None:
    """The concatenated stream of a sliced array starts and ends at its own elements."""
    elements = pa.array([b"ab", b"cde", b"f", b"gh"], pa.large_binary())
    assert bytes(lh._joined(elements.slice(1, 2))) == b"cdef"
    assert bytes(lh._joined(elements.slice(0, 1))) == b"ab"
    assert bytes(lh._joined(elements.slice(3))) == b"gh"


def test_null_free_fixed_width_values_are_hashed_in_place() -> None:
    """Valid fixed-width values are fed straight from the value buffer: no copy."""
    values = pa.array(range(10), pa.int64()).slice(3, 4)
    stream = lh._stream_bytes(values, None)
    assert stream.address == values.buffers()[1].address + 3 * 8
    assert stream.size == 4 * 8
