"""A slice's offsets are checked on the batches its logical hash decodes:
one decode per slice, and a defect is found wherever it falls, across batch boundaries
too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import storage.hashing as hashing
from fbs.logical_hash import logical_hash
from fbs.model import AddData, DataSlice, OffsetInterval
from fbs.multiformats import Multihash
from storage.verify import ProblemKind, _OffsetsCheck, verify_integrity
from tests.storage.test_dataset import SCHEMA, seeded_dataset


def check(batches: list[list[int | None]], start: int, end: int, **kw: Any) -> str | None:
    c = _OffsetsCheck("offset", start, end)
    for values in batches:
        c.feed(pa.record_batch({"offset": pa.array(values, pa.int64()), **kw}))
    return c.problem()


def test_sound_offsets_over_several_batches() -> None:
    assert check([[5, 6], [7], [], [8, 9]], 5, 9) is None
    assert check([], 3, 2) is None  # an empty slice
    assert check([[], []], 3, 2) is None


@pytest.mark.parametrize(
    ("batches", "why"),
    [
        ([[0, 1], [3, 4]], "offsets run 0..4, not 0..3"),
        ([[0], [2], [1], [3]], "offsets are not contiguous and ascending (rows out of order)"),
        ([[0, 1], [1, 3]], "offsets are not contiguous and ascending (rows out of order)"),
        ([[2, 3], [0, 1]], "offsets run 2..1, not 0..3"),
        ([[0, 2], [1, 3]], "offsets are not contiguous and ascending (rows out of order)"),
        ([[0], [2, 1], [3]], "offsets are not contiguous and ascending (rows out of order)"),
        ([[0, 1], [2]], "3 records, offset interval [0, 3] says 4"),
        ([[0, 1], [2, 3, 4]], "5 records, offset interval [0, 3] says 4"),
        ([[0, None], [2, 3]], "null offsets"),
        ([[0, 1], [None, 3]], "null offsets"),
        ([[1, 2, 3, 4]], "offsets run 1..4, not 0..3"),
        ([[0, 1, 2, 5]], "offsets run 0..5, not 0..3"),
    ],
)
def test_defects_across_batches(batches: list[list[int | None]], why: str) -> None:
    assert check(batches, 0, 3) == why


def test_order_is_checked_only_while_sound() -> None:
    """A gap between batches stays a defect whatever follows it."""
    assert check([[0], [2], [3]], 0, 3) is not None
    assert check([[0, 1], [2, 3]], 0, 3) is None


def test_missing_or_unusable_offset_column_is_a_problem() -> None:
    c = _OffsetsCheck("offset", 0, 1)
    c.feed(pa.record_batch({"other": pa.array([0, 1], pa.int64())}))
    c.feed(pa.record_batch({"offset": pa.array([0, 1], pa.int64())}))  # ignored after
    assert c.problem() == "cannot read offsets: no column 'offset'"
    c = _OffsetsCheck("offset", 0, 1)
    c.feed(pa.record_batch({"offset": pa.array(["a", "b"])}))  # never raises
    why = c.problem()
    assert why is not None and why.startswith("cannot read offsets: ")


def _dataset_with(tmp_path: Path, table: pa.Table, start: int, end: int) -> Any:
    tmp_path.mkdir()
    path = tmp_path / "slice.parquet"
    pq.write_table(table, path, row_group_size=5)
    data = path.read_bytes()
    fake = DataSlice(
        logical_hash=logical_hash(table.schema, table),
        physical_hash=Multihash.sha3_256(data),
        offset_interval=OffsetInterval(start=start, end=end),
        size=len(data),
    )
    ds = seeded_dataset(tmp_path)
    ds.commit(SCHEMA, expected_head=ds.head())
    ds.commit(AddData(new_data=fake), expected_head=ds.head(), data_file=path)
    return ds


def _table(offsets: list[int]) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "city": pa.array([f"c{i % 3}" for i in range(len(offsets))]),
        }
    )


def test_verify_finds_a_gap_at_a_batch_boundary(tmp_path: Path, monkeypatch: Any) -> None:
    """Batches of 4 rows: the gap sits exactly between two of them."""
    monkeypatch.setattr(hashing, "_FAST_BATCH_ROWS", 4)
    sound = _dataset_with(tmp_path / "sound", _table(list(range(12))), 0, 11)
    assert verify_integrity(sound).ok
    gap = _dataset_with(tmp_path / "gap", _table([0, 1, 2, 3, 5, 4, 6, 7, 8, 9, 10, 11]), 0, 11)
    report = verify_integrity(gap)
    assert [p.kind for p in report.problems] == [ProblemKind.DATA_OFFSETS]
    assert "not contiguous" in report.problems[0].message


def test_verify_decodes_each_slice_once(tmp_path: Path, monkeypatch: Any) -> None:
    """The offsets come from the logical hash's read: no second Parquet read."""
    ds = _dataset_with(tmp_path / "one", _table(list(range(12))), 0, 11)
    opened: list[object] = []
    real = pq.ParquetFile

    def spy(source: Any, *args: Any, **kw: Any) -> Any:
        opened.append(source)
        return real(source, *args, **kw)

    monkeypatch.setattr(pq, "ParquetFile", spy)
    assert verify_integrity(ds).ok
    # One file for the hash's schema and plain read, one for its dictionary read.
    assert len(opened) == 2
