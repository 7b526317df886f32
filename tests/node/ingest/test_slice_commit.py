"""The new slice is written into the data store's quarantine and moved in by the commit.

No copy and no second hash of the slice; nothing is left in the store when
an attempt commits nothing (bad or empty input, a duplicate) or loses the head race.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from fbs.model import AddData, Timestamp
from node.ingest.errors import ReadError
from node.ingest.pipeline import ProgressUpdate, ingest, pull
from storage.dataset import Dataset
from storage.fsutil import is_pending_name
from storage.object_store import DiskObjectStore
from storage.verify import verify_integrity
from tests.node.ingest.test_pipeline import A, B, csv, make, records


def data_files(ds: Dataset) -> tuple[list[str], list[str]]:
    """Names of the objects and of the pending files in the dataset's data store."""
    root = ds.layout.data.root
    names = sorted(p.name for p in root.iterdir()) if root.exists() else []
    return [n for n in names if not is_pending_name(n)], [n for n in names if is_pending_name(n)]


def committed_slices(ds: Dataset) -> list[str]:
    return sorted(
        b.event.new_data.physical_hash.to_multibase()
        for _h, _r, b in ds.iter_blocks()
        if isinstance(b.event, AddData) and b.event.new_data is not None
    )


def test_slice_is_moved_into_the_store_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_copy(*_args: object, **_kwargs: object) -> NoReturn:
        raise AssertionError("the slice was copied into the store")

    monkeypatch.setattr(DiskObjectStore, "put_file", no_copy)
    ds = make(tmp_path)
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    ingest(ds, [csv(tmp_path, "b.csv", B)])
    objects, pending = data_files(ds)
    assert objects == committed_slices(ds) and len(objects) == 2
    assert pending == []
    mode = (ds.layout.data.root / objects[0]).stat().st_mode & 0o777
    assert mode == 0o444
    assert verify_integrity(ds).ok
    assert [city for _op, city, _p in records(ds)] == ["A", "B", "A", "C", "B"]


def test_attempts_that_commit_nothing_leave_nothing_in_the_store(tmp_path: Path) -> None:
    ds = make(tmp_path)
    bad = "event_time,city,population\n2020-01-01T00:00:00Z,A,not-a-number\n"
    with pytest.raises(ReadError):
        ingest(ds, [csv(tmp_path, "bad.csv", bad)])
    assert ingest(ds, [csv(tmp_path, "empty.csv", "event_time,city,population\n")]).empty_input
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    assert ingest(ds, [csv(tmp_path, "a2.csv", A)]).duplicate_input
    objects, pending = data_files(ds)
    assert pending == []
    assert objects == committed_slices(ds) and len(objects) == 1


def test_lost_head_race_retries_and_leaves_no_quarantine_file(tmp_path: Path) -> None:
    ds = make(tmp_path)
    ingest(ds, [csv(tmp_path, "a.csv", A)])
    moved: list[int] = []

    def race(update: ProgressUpdate) -> None:
        # Another writer moves the head between the slice's write and its commit.
        if update.stage == "commit" and not moved:
            moved.append(1)
            pull(ds, set_watermark=Timestamp.parse_rfc3339("2020-06-01T00:00:00Z"))

    res = ingest(ds, [csv(tmp_path, "b.csv", B)], progress=race)
    assert moved and res.num_records == 3
    assert res.offset_interval is not None and res.offset_interval.start == 2
    objects, pending = data_files(ds)
    assert pending == []
    assert objects == committed_slices(ds) and len(objects) == 2
    assert verify_integrity(ds).ok
