"""`verify_integrity` on every core: the same report as on one thread, sound
or damaged, and each object read once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fbs.model import DatasetKind, DatasetSnapshot
from fbs.multiformats import Multihash
from storage.dataset import Dataset
from storage.object_store import DiskObjectStore
from storage.reads import verified_slice_paths
from storage.verify import ProblemKind, verify_integrity
from storage.workspace import Workspace
from tests.node.conftest import RootWriter


@pytest.fixture
def root(tmp_path: Path) -> RootWriter:
    ws = Workspace.init(tmp_path / "project")
    ws.add_snapshot(DatasetSnapshot(name="cities", kind=DatasetKind.Root, metadata=()))
    slices = tmp_path / "slices"
    slices.mkdir()
    w = RootWriter(ws, "cities", slices)
    for i in range(8):
        w.append([(f"c{i}-{j}", i * 10 + j) for j in range(i + 1)])
    return w


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def _same_either_way(ds: Dataset) -> Any:
    serial = verify_integrity(ds, workers=1)
    for workers in (2, 3, 8):
        assert verify_integrity(ds, workers=workers) == serial
    return serial


def test_sound_dataset(root: RootWriter) -> None:
    report = _same_either_way(root.ds)
    assert report.ok and report.objects_checked == 8


def test_damaged_dataset_same_problems_in_block_order(root: RootWriter) -> None:
    files = verified_slice_paths(root.ds)
    _flip(files[1], 40)  # physical hash
    files[3].chmod(0o644)
    files[3].write_bytes(files[3].read_bytes()[:-5])  # size
    files[5].unlink()  # missing
    _flip(files[6], len(files[6].read_bytes()) // 2)
    report = _same_either_way(root.ds)
    kinds = [p.kind for p in report.problems]
    assert kinds[:3] == [ProblemKind.DATA_CORRUPT, ProblemKind.DATA_SIZE, ProblemKind.DATA_MISSING]
    seqs = [p.sequence_number for p in report.problems]
    assert seqs == sorted(seqs)  # oldest block first, whatever thread finished first


def test_problem_limit_applies_in_the_same_order(root: RootWriter) -> None:
    for path in verified_slice_paths(root.ds):
        path.unlink()
    serial = verify_integrity(root.ds, workers=1, max_problems=3)
    assert verify_integrity(root.ds, workers=4, max_problems=3) == serial
    assert len(serial.problems) == 3


def test_each_data_object_is_opened_once(root: RootWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: Counter[Multihash] = Counter()
    real = DiskObjectStore.open

    def spy(self: DiskObjectStore, h: Multihash) -> Any:
        opened[h] += 1
        return real(self, h)

    monkeypatch.setattr(DiskObjectStore, "open", spy)
    report = verify_integrity(root.ds, workers=2)
    assert report.ok
    data = [h for h in opened if root.ds.layout.data.has(h)]
    assert len(data) == 8 and all(opened[h] == 1 for h in data)


def _logical_hashes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    import storage.verify as verify

    calls: list[object] = []
    real = verify._logical_hash

    def spy(source: Any, observe: Any) -> Any:
        calls.append(source)
        return real(source, observe)

    monkeypatch.setattr(verify, "_logical_hash", spy)
    return calls


def test_sound_slices_are_not_decoded_again(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repeated verify reads and SHA3-hashes each slice, and decodes none
    whose bytes still hash to the name its block gives (logical hash already checked)."""
    calls = _logical_hashes(monkeypatch)
    first = verify_integrity(root.ds)
    assert first.ok and len(calls) == 8
    assert verify_integrity(root.ds) == first
    assert len(calls) == 8
    # Damage is still found: the bytes are hashed every time.
    files = verified_slice_paths(root.ds)
    _flip(files[2], 30)
    report = verify_integrity(root.ds)
    assert [p.kind for p in report.problems] == [ProblemKind.DATA_CORRUPT]
    assert len(calls) == 8


def test_damaged_sound_record_is_ignored(root: RootWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    import storage.verify as verify

    verify_integrity(root.ds)
    ds = root.ds
    record = verify._sound_slices_path(ds)
    assert record is not None and record.is_file()
    text = record.read_text()
    record.write_text(text.replace('"sha3": "', '"sha3": "0', 1))
    calls = _logical_hashes(monkeypatch)
    assert verify_integrity(ds).ok
    assert len(calls) == 8  # recomputed, then remembered again
    assert verify_integrity(ds).ok and len(calls) == 8


# -- several datasets on one pool (verify_datasets) ---------------------------------------------


@pytest.fixture
def small_roots(tmp_path: Path) -> list[RootWriter]:
    """Three one-slice datasets (and one that has only its Seed) in one workspace."""
    ws = Workspace.init(tmp_path / "many")
    slices = tmp_path / "many-slices"
    slices.mkdir()
    writers = []
    for name in ("a", "b", "c", "empty"):
        ws.add_snapshot(DatasetSnapshot(name=name, kind=DatasetKind.Root, metadata=()))
        w = RootWriter(ws, name, slices)
        if name != "empty":
            w.append([(f"{name}-{j}", j) for j in range(3)])
        writers.append(w)
    return writers


def test_verify_datasets_gives_each_dataset_its_own_report(small_roots: list[RootWriter]) -> None:
    from storage.verify import verify_datasets

    datasets = [w.ds for w in small_roots]
    _flip(verified_slice_paths(datasets[1])[0], 30)
    expected = [verify_integrity(ds, workers=1) for ds in datasets]
    for workers in (1, 2, 8):
        assert verify_datasets(datasets, workers=workers) == expected
    assert [r.ok for r in expected] == [True, False, True, True]
    assert [r.objects_checked for r in expected] == [1, 1, 1, 0]
    assert verify_datasets([]) == []


def test_verify_datasets_problem_limit_is_per_dataset(small_roots: list[RootWriter]) -> None:
    from storage.verify import verify_datasets

    for w in small_roots[:2]:
        w.append([("more", 1)])
    datasets = [w.ds for w in small_roots[:2]]
    for ds in datasets:
        for path in verified_slice_paths(ds):
            path.unlink()
    reports = verify_datasets(datasets, max_problems=1)
    assert [[p.kind for p in r.problems] for r in reports] == [[ProblemKind.DATA_MISSING]] * 2
    assert [r.problems[0].sequence_number for r in reports] == [2, 2]  # the oldest slice
    assert [len(r.problems) for r in verify_datasets(datasets)] == [2, 2]


def test_one_slice_datasets_are_checked_at_the_same_time(
    small_roots: list[RootWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of two one-slice datasets waits for the other's check to start: on one pool
    both run at once; dataset after dataset, the barrier would break."""
    import threading

    import storage.verify as verify

    barrier = threading.Barrier(2, timeout=30)
    real = verify._logical_hash

    def meet(source: Any, observe: Any) -> Any:
        barrier.wait()
        return real(source, observe)

    monkeypatch.setattr(verify, "_logical_hash", meet)
    reports = verify.verify_datasets([w.ds for w in small_roots[:2]], workers=2)
    assert [r.ok for r in reports] == [True, True]
    assert not barrier.broken
