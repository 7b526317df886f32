"""`p2p.receive.CheckedObjects`: a pull's checked objects, named together in batches.

Objects are checked in quarantine (`check_object`) and named by `adopt` with one
data flush and one directory fsync per store (`DiskObjectStore.adopt_many`), not two
fsyncs each; a pull that fails names what it checked (a rerun does not download it
again). Pulls here use `MemorySource` (no sockets) and real files.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

import p2p.sync
from fbs.multiformats import Multihash
from p2p.errors import PeerMisbehaved, PeerUnavailable
from p2p.memory_source import NO_FAULTS, Faults, MemorySource
from p2p.receive import CheckedObjects, ObjectJob, check_object, object_jobs
from p2p.sync import pull_dataset
from storage.errors import HashMismatch
from storage.faults import RecordingOps
from storage.layout import DatasetLayout
from storage.object_store import DiskObjectStore
from storage.verify import verify_integrity
from tests.p2p.sync_helpers import make_dataset, new_workspace


def received(store: DiskObjectStore, data: bytes, kind: str = "data") -> tuple[ObjectJob, Path]:
    path = store.quarantine_path()
    path.write_bytes(data)
    return ObjectJob(kind, Multihash.sha3_256(data), len(data)), path  # type: ignore[arg-type]


def test_objects_of_two_stores_are_named_with_one_flush_each(tmp_path: Path) -> None:
    ops = RecordingOps()
    layout = DatasetLayout(tmp_path / "ds", ops=ops)
    data, checkpoints = layout.data, layout.checkpoints
    checked = CheckedObjects()
    jobs = []
    for i, store in enumerate([data, data, data, checkpoints, checkpoints]):
        job, path = received(store, f"object {i}".encode() * (i + 1))
        checked.add(store, job, path, check_object(job, path, None))
        jobs.append((store, job))
    ops.trace.clear()
    checked.adopt()
    kinds = [k for k, _ in ops.trace]
    assert kinds.count("fsync_dir") == 2  # one per store
    assert kinds.count("syncfs") == 2
    assert "fsync" not in kinds  # no fsync per object
    for store, job in jobs:
        store.check(job.hash)
    assert not [n for n in os.listdir(data.root) if n.startswith(".pending")]
    checked.adopt()  # nothing left: nothing happens
    assert [k for k, _ in ops.trace] == kinds


def test_full_counts_the_bytes_held(tmp_path: Path) -> None:
    store = DatasetLayout(tmp_path / "ds").data
    checked = CheckedObjects(max_bytes=10)
    fullness = []
    for data in (b"123456789", b"0"):
        job, path = received(store, data)
        checked.add(store, job, path, check_object(job, path, None))
        fullness.append(checked.full)
    checked.adopt()
    assert [*fullness, checked.full] == [False, True, False]


def test_discard_removes_what_was_held(tmp_path: Path) -> None:
    store = DatasetLayout(tmp_path / "ds").data
    checked = CheckedObjects()
    job, path = received(store, b"never named")
    checked.add(store, job, path, check_object(job, path, None))
    checked.discard()
    assert not path.exists()
    assert list(store.iter_hashes()) == []


def test_a_failed_adopt_removes_the_files(tmp_path: Path) -> None:
    store = DatasetLayout(tmp_path / "ds").data
    checked = CheckedObjects()
    job, path = received(store, b"good")
    checked.add(store, job, path, check_object(job, path, None))
    bad, bad_path = received(store, b"bad")
    checked.add(store, bad, bad_path, hashlib.sha3_256(b"other").digest())  # a bug's digest
    with pytest.raises(HashMismatch):
        checked.adopt()
    assert not path.exists() and not bad_path.exists()
    assert list(store.iter_hashes()) == []


def test_check_object_refuses_other_sizes_and_contents(tmp_path: Path) -> None:
    store = DatasetLayout(tmp_path / "ds").data
    job, path = received(store, b"declared")
    path.write_bytes(b"declared!")
    with pytest.raises(PeerMisbehaved, match="9 bytes"):
        check_object(job, path, None)
    path.write_bytes(b"DECLARED")
    with pytest.raises(PeerMisbehaved, match="hash mismatch"):
        check_object(job, path, None)
    path.write_bytes(b"declared")
    assert check_object(job, path, None) == job.hash.digest


@pytest.mark.parametrize("batch_bytes", [1, 1 << 30], ids=["one-per-batch", "one-batch"])
def test_a_pull_names_every_object_whatever_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_bytes: int
) -> None:
    monkeypatch.setattr(p2p.sync, "ADOPT_BATCH_BYTES", batch_bytes)
    src = make_dataset(
        new_workspace(tmp_path / "src"), "prices", tmp_path / "f", 4, checkpoints=True
    )
    dst = new_workspace(tmp_path / "dst")
    result = asyncio.run(pull_dataset(dst, MemorySource.of_dataset(src), alias="prices"))
    assert result.objects_fetched == len(list(src.layout.data.iter_hashes())) + len(
        list(src.layout.checkpoints.iter_hashes())
    )
    copy = dst.get("prices")
    assert copy.head() == src.head()
    assert verify_integrity(copy).ok


def test_a_failed_pull_keeps_what_it_checked(tmp_path: Path) -> None:
    src = make_dataset(new_workspace(tmp_path / "src"), "prices", tmp_path / "f", 4)
    dst = new_workspace(tmp_path / "dst")
    slices = list(src.layout.data.iter_hashes())
    # The object fetched last (largest first, then in chain order), one at a time.
    jobs = object_jobs(b for _h, _raw, b in reversed(list(src.iter_blocks())))
    last = sorted(jobs, key=lambda j: j.size, reverse=True)[-1]
    faulty = MemorySource.of_dataset(src, Faults(missing=frozenset({last.hash})))
    with pytest.raises(PeerUnavailable):
        asyncio.run(pull_dataset(dst, faulty, alias="prices", objects_per_source=1))
    assert dst.list() == []  # the head never moved: no dataset
    result = asyncio.run(pull_dataset(dst, MemorySource.of_dataset(src, NO_FAULTS), alias="prices"))
    # Every other object was named by the failed pull: not downloaded again.
    assert (result.objects_present, result.objects_fetched) == (len(slices) - 1, 1)
    assert verify_integrity(dst.get("prices")).ok
