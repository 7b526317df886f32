"""Dictionary-encoded arrays fed to a digest of their value type.

A Parquet reader hands dictionary-encoded string columns over as Arrow dictionaries most
cheaply; the logical hash must then be bit-identical to the hash of the decoded values.
Digests are compared with the naive reference of `tests.fbs.test_logical_hash` on the
decoded array, never with the code under test.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import fbs.logical_hash as lh
from fbs.errors import DataSchemaMismatch, UnsupportedDataType
from fbs.logical_hash import ArrayDigest, RecordDigest, array_digest
from tests.fbs.test_logical_hash import ref_array_digest, ref_record_digest


def digest_of(array: pa.Array | pa.ChunkedArray, dtype: pa.DataType, **kw: Any) -> bytes:
    digest = ArrayDigest(dtype, **kw)
    digest.update(array)
    return digest.finalize()


def encoded(values: list[Any], dtype: pa.DataType) -> pa.DictionaryArray:
    return pa.array(values, dtype).dictionary_encode()


CASES = [
    (["a", "bb", None, "ccc", "", "a", "bb"], pa.string()),
    (["a", "bb", "ccc", "", "a"], pa.large_string()),
    ([b"\x00\x01", None, b"", b"\x00\x01"], pa.binary()),
    ([b"ab", b"cd", None, b"ab"], pa.binary(2)),
    ([1, -2, None, 1, 3], pa.int64()),
    ([1, 2, 2, None], pa.int16()),
    ([True, None, False, True], pa.bool_()),
    ([1.5, None, -0.0, 1.5], pa.float64()),
]


@pytest.mark.parametrize(("values", "dtype"), CASES, ids=[str(t) for _, t in CASES])
def test_dictionary_hashes_as_its_values(values: list[Any], dtype: pa.DataType) -> None:
    plain = pa.array(values, dtype)
    expected = ref_array_digest(plain)
    assert digest_of(encoded(values, dtype), dtype) == expected
    for start in range(len(values)):
        window = encoded(values, dtype).slice(start, 3)
        assert digest_of(window, dtype) == ref_array_digest(plain.slice(start, 3))
    for rows in (1, 2, 3):
        assert digest_of(encoded(values, dtype), dtype, chunk_rows=rows) == expected


def test_null_indices_hash_as_null_markers() -> None:
    """A null index is a null element (``00``), whatever its slot points at."""
    indices = pa.array([0, None, 1, None], pa.int32())
    array = pa.DictionaryArray.from_arrays(indices, pa.array(["x", "y"]))
    expected = ref_array_digest(pa.array(["x", None, "y", None]))
    assert digest_of(array, pa.string()) == expected
    assert digest_of(array, pa.string()) != ref_array_digest(pa.array(["x", "x", "y", "x"]))


def test_unused_and_reordered_dictionary_entries() -> None:
    indices = pa.array([3, 3, 0, 2], pa.int8())
    dictionary = pa.array(["zero", "one", "two", "three", "four"])
    array = pa.DictionaryArray.from_arrays(indices, dictionary)
    assert digest_of(array, pa.string()) == ref_array_digest(
        pa.array(["three", "three", "zero", "two"])
    )


def test_dictionary_with_null_values_is_decoded() -> None:
    """Null *values* (not indices) mask like null indices: hashed via the decoded array."""
    indices = pa.array([0, 1, 1, 2, None], pa.int32())
    array = pa.DictionaryArray.from_arrays(indices, pa.array(["a", None, "c"]))
    expected = ref_array_digest(pa.array(["a", None, None, "c", None]))
    assert digest_of(array, pa.string()) == expected
    lists = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 2, 0], pa.int32()), pa.array([[1, 2], None, []], pa.list_(pa.int64()))
    )
    decoded = pa.array([[1, 2], None, [], [1, 2]], pa.list_(pa.int64()))
    assert digest_of(lists, pa.list_(pa.int64())) == ref_array_digest(decoded)


def test_chunked_dictionaries_with_different_dictionaries() -> None:
    one = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["p", "q"]))
    two = pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), pa.array(["r", "p"]))
    chunked = pa.chunked_array([one, two])
    expected = ref_array_digest(pa.array(["p", "q", "p", "p", "r"]))
    assert digest_of(chunked, pa.string()) == expected


def test_mixed_plain_and_dictionary_batches() -> None:
    """One column may arrive plainly in one batch and dictionary-encoded in the next."""
    digest = ArrayDigest(pa.string())
    digest.update(pa.array(["a", None]))
    digest.update(encoded(["b", "a", None], pa.string()))
    assert digest.finalize() == ref_array_digest(pa.array(["a", None, "b", "a", None]))


def test_dictionary_of_another_value_type_is_refused() -> None:
    with pytest.raises(DataSchemaMismatch, match="does not match"):
        ArrayDigest(pa.int64()).update(encoded(["a"], pa.string()))
    with pytest.raises(DataSchemaMismatch, match="does not match"):
        ArrayDigest(pa.int32()).update(encoded([1], pa.int64()))
    # Same descriptor, another Arrow type: hashes alike (as plain arrays do).
    assert digest_of(encoded(["a"], pa.large_string()), pa.string()) == array_digest(
        pa.array(["a"])
    )


def test_dictionary_type_itself_is_still_refused() -> None:
    """A schema or digest *declared* with a dictionary type is refused, as upstream."""
    with pytest.raises(UnsupportedDataType):
        array_digest(encoded(["a", "b"], pa.string()))
    with pytest.raises(UnsupportedDataType):
        RecordDigest(pa.schema([("d", pa.dictionary(pa.int32(), pa.string()))]))


def test_dictionary_of_null_values_cannot_hash() -> None:
    empty = pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.null()))
    with pytest.raises(UnsupportedDataType, match="Null type"):
        ArrayDigest(pa.null()).update(empty)
    some = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.nulls(1))
    with pytest.raises(UnsupportedDataType, match="Null type"):
        ArrayDigest(pa.null()).update(some)


def test_dictionary_child_of_a_struct_combines_masks() -> None:
    """Under a struct the parent mask applies (upstream's OR rule): decoded, then hashed."""
    values = ["a", None, "c", "d", None, "f"]
    parent_nulls = pa.array([False, False, True, True, False, False])
    plain = pa.StructArray.from_arrays([pa.array(values)], names=["s"], mask=parent_nulls)
    coded = pa.StructArray.from_arrays(
        [encoded(values, pa.string())], names=["s"], mask=parent_nulls
    )
    schema = pa.schema([("t", plain.type)])
    digest = RecordDigest(schema)
    digest.update(pa.RecordBatch.from_arrays([coded], names=["t"]))
    expected = ref_record_digest(schema, [pa.RecordBatch.from_arrays([plain], names=["t"])])
    assert digest.finalize() == expected


def test_record_digest_takes_dictionary_columns() -> None:
    schema = pa.schema([("city", pa.string()), ("n", pa.int64())])
    cities = ["x", "y", None, "x"] * 50
    plain = pa.record_batch([pa.array(cities), pa.array(range(200))], schema=schema)
    coded = pa.RecordBatch.from_arrays(
        [encoded(cities, pa.string()), pa.array(range(200))], names=["city", "n"]
    )
    digest = RecordDigest(schema, chunk_rows=7)
    digest.update(coded)
    assert digest.finalize() == ref_record_digest(schema, [plain])


# -- chunks and splits ----------------------------------------------------------------------


def gathered(monkeypatch: pytest.MonkeyPatch, array: pa.DictionaryArray, **kw: Any) -> list[int]:
    """Row counts of the pieces a dictionary array's stream is gathered in."""
    seen: list[int] = []
    real = lh._split_gather

    def spy(entries: pa.Array, sizes: pa.Array, indices: pa.Array) -> Any:
        # Only the leaves (pieces actually gathered) are recorded.
        parts = list(real(entries, sizes, indices))
        if len(parts) == 1:
            seen.append(len(indices))
        return iter(parts)

    monkeypatch.setattr(lh, "_split_gather", spy)
    digest = digest_of(array, array.type.value_type, **kw)
    monkeypatch.undo()
    assert digest == ref_array_digest(array.dictionary_decode())
    return seen


def test_dictionary_chunks_have_chunk_rows_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    array = encoded(["ab", "c"] * 5, pa.string())
    assert gathered(monkeypatch, array, chunk_rows=4) == [4, 4, 2]
    assert gathered(monkeypatch, array) == [10]


def test_dictionary_chunks_split_by_gathered_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit counts the streams a chunk gathers (8-byte length + value per row)."""
    array = encoded([f"v{i % 3}" for i in range(8)], pa.string())  # 10 bytes a row
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 40)
    assert gathered(monkeypatch, array) == [4, 4]
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 39)
    assert gathered(monkeypatch, array) == [2, 2, 2, 2]
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 1)
    assert gathered(monkeypatch, array) == [1] * 8
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 80)
    assert gathered(monkeypatch, array) == [8]


def test_null_indices_do_not_count_towards_the_split(monkeypatch: pytest.MonkeyPatch) -> None:
    indices = pa.array([0, None, None, None, 0, None, None, None], pa.int32())
    array = pa.DictionaryArray.from_arrays(indices, pa.array(["abcdefgh"]))  # 16 bytes
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 32)
    assert gathered(monkeypatch, array) == [8]


def test_dictionary_entries_are_built_once_per_array(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each value's stream is prepared once, not once per chunk."""
    dictionary = pa.array(["one", "two", "three"])
    array = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2] * 10, pa.int32()), dictionary)
    lengths: list[int] = []
    real = lh._element_stream

    def spy(part: pa.Array, mask: Any, depth: int) -> Any:
        lengths.append(len(part))
        return real(part, mask, depth)

    monkeypatch.setattr(lh, "_element_stream", spy)
    digest = digest_of(array, pa.string(), chunk_rows=4)
    monkeypatch.undo()
    assert lengths == [3]
    assert digest == ref_array_digest(array.dictionary_decode())


def test_dictionary_of_nested_lists_counts_depth_from_the_top() -> None:
    """The values of a dictionary are at the column's own level: 32 list levels pass."""
    from tests.fbs.test_logical_hash_rules import nested_lists, nested_value

    dtype = nested_lists(32)
    values = pa.array([nested_value(32), [], nested_value(32)], dtype)  # no null value
    array = pa.DictionaryArray.from_arrays(pa.array([2, 0, 1, 1], pa.int32()), values)
    assert digest_of(array, dtype) == ref_array_digest(array.dictionary_decode())


def test_all_null_indices_gather_no_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Null rows count no bytes: even a zero limit leaves an all-null chunk whole."""
    indices = pa.array([None, None, None, None], pa.int32())
    array = pa.DictionaryArray.from_arrays(indices, pa.array(["abc"]))
    monkeypatch.setattr(lh, "MAX_CHUNK_BYTES", 0)
    assert gathered(monkeypatch, array) == [4]
