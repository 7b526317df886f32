"""`ObjectStore.adopt_many` and `fsutil.publish_many`: received objects named together.

A pull checks every object in quarantine, then names them in batches: on disk one data
flush and one directory fsync per batch, not two fsyncs per object. Contract tests run
on both stores; disk tests check the flushes and every crash point with and without
power loss: each object is visible whole or not at all, nothing is renamed before the
data flush, and everything is durable once ``adopt_many`` returns (so a head moved
after it never points at a missing object).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from fbs.errors import InvalidHash
from fbs.multiformats import Multihash
from storage.errors import HashMismatch
from storage.faults import CrashAt, FsOps, RecordingOps, SimulatedCrash
from storage.fsutil import is_pending_name, publish_many
from storage.object_store import DiskObjectStore, MemoryObjectStore, ObjectStore

PAYLOADS = [f"received object {i} ".encode() * (i + 2) for i in range(5)]
HASHES = [Multihash.sha3_256(d) for d in PAYLOADS]


def _names(root: Path) -> list[str]:
    return sorted(os.listdir(root)) if root.exists() else []


def _quarantine(store: ObjectStore, spare: Path, data: bytes, ops: FsOps | None = None) -> Path:
    """A received file where ``store`` adopts from (written through ``ops`` if given)."""
    if isinstance(store, DiskObjectStore):
        path = store.quarantine_path()
    else:
        spare.mkdir(exist_ok=True)
        path = spare / f"q-{hashlib.sha3_256(data).hexdigest()[:12]}-{len(os.listdir(spare))}"
    ops = ops or FsOps()
    fd = ops.create_exclusive(path, 0o600)
    try:
        ops.write(fd, data)
    finally:
        ops.close(fd)
    return path


def _items(
    store: ObjectStore, spare: Path, payloads: list[bytes], ops: FsOps | None = None
) -> list[tuple[Multihash, Path, bytes]]:
    out = []
    for data in payloads:
        path = _quarantine(store, spare, data, ops)
        out.append((Multihash.sha3_256(data), path, hashlib.sha3_256(data).digest()))
    return out


# -- contract (both stores) ---------------------------------------------------------------


def test_adopt_many_names_every_item(object_store: ObjectStore, tmp_path: Path) -> None:
    items = _items(object_store, tmp_path / "spare", PAYLOADS)
    object_store.adopt_many(items)
    assert set(object_store) == set(HASHES)
    for h, data in zip(HASHES, PAYLOADS, strict=True):
        assert object_store.get(h) == data
    assert not any(path.exists() for _h, path, _d in items)  # renamed or consumed


def test_adopt_many_of_nothing(object_store: ObjectStore) -> None:
    object_store.adopt_many([])
    assert list(object_store) == []


def test_a_bad_digest_adopts_nothing(object_store: ObjectStore, tmp_path: Path) -> None:
    items = _items(object_store, tmp_path / "spare", PAYLOADS)
    h, path, _digest = items[2]
    items[2] = (h, path, hashlib.sha3_256(b"other bytes").digest())
    with pytest.raises(HashMismatch):
        object_store.adopt_many(items)
    assert list(object_store) == []
    assert all(path.exists() for _h, path, _d in items)  # the caller removes them


def test_a_non_sha3_hash_adopts_nothing(object_store: ObjectStore, tmp_path: Path) -> None:
    items = _items(object_store, tmp_path / "spare", PAYLOADS[:2])
    bad = [items[0], ("f1620" + "00" * 32, items[1][1], items[1][2])]
    with pytest.raises(InvalidHash):
        object_store.adopt_many(bad)  # type: ignore[arg-type]
    assert list(object_store) == []


# -- disk ---------------------------------------------------------------------------------


def test_flushes_do_not_grow_with_the_batch(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    items = _items(store, tmp_path, PAYLOADS)
    ops = RecordingOps()
    DiskObjectStore(tmp_path / "objects", ops=ops).adopt_many(items)
    n = len(PAYLOADS)
    assert [k for k, _ in ops.trace] == ["chmod"] * n + ["syncfs"] + ["replace"] * n + ["fsync_dir"]
    for h in HASHES:
        assert store.path_of(h).stat().st_mode & 0o777 == 0o444
    assert _names(tmp_path / "objects") == sorted(h.to_multibase() for h in HASHES)


def test_present_and_repeated_objects_are_not_renamed_again(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    store.put(HASHES[0], PAYLOADS[0])
    items = _items(store, tmp_path, [PAYLOADS[0], PAYLOADS[1], PAYLOADS[1]])
    ops = RecordingOps()
    DiskObjectStore(tmp_path / "objects", ops=ops).adopt_many(items)
    kinds = [k for k, _ in ops.trace]
    assert kinds.count("replace") == 1  # PAYLOADS[1] once
    assert kinds.count("touch") == 1  # the present object's mtime is refreshed
    assert kinds.count("unlink") == 2  # the duplicates' quarantine files
    assert _names(tmp_path / "objects") == sorted(h.to_multibase() for h in HASHES[:2])


def test_only_quarantine_files_of_the_store_are_adopted(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    good = _items(store, tmp_path, PAYLOADS[:1])
    stray = tmp_path / "stray"
    stray.write_bytes(PAYLOADS[1])
    digest = hashlib.sha3_256(PAYLOADS[1]).digest()
    with pytest.raises(ValueError, match="not a quarantine file"):
        store.adopt_many([*good, (HASHES[1], stray, digest)])
    assert list(store) == []


def test_publish_many_refuses_other_directories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="must be in"):
        publish_many(tmp_path, [(tmp_path / "sub" / "a", tmp_path / "a")])
    publish_many(tmp_path, [])


def test_a_failed_rename_removes_the_files_not_renamed(tmp_path: Path) -> None:
    class FailingSecondRename(FsOps):
        renames = 0

        def replace(self, src: Path, dst: Path) -> None:
            self.renames += 1
            if self.renames == 2:
                raise OSError(28, "No space left on device")
            super().replace(src, dst)

    store = DiskObjectStore(tmp_path / "objects", ops=FailingSecondRename())
    items = _items(store, tmp_path, PAYLOADS[:3])
    with pytest.raises(OSError, match="No space"):
        store.adopt_many(items)
    names = _names(tmp_path / "objects")
    assert names == [HASHES[0].to_multibase()]  # the first one was complete and renamed
    assert not [n for n in names if is_pending_name(n)]


# -- crash points ------------------------------------------------------------------------------


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
@pytest.mark.parametrize("present", [0, 2], ids=["empty", "two-present"])
@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync-each"])
def test_adopt_many_crash_points(
    tmp_path: Path, power_loss: bool, present: int, syncfs: bool
) -> None:
    """Received (tracked) quarantine files, then `adopt_many`, crashed at every step."""

    class Crash(CrashAt):
        def syncfs(self, path: Path) -> bool:
            if syncfs:
                return super().syncfs(path)
            self._tick("syncfs", path)  # a system without it: still a crash point
            return False

    def fresh(label: str) -> Path:
        store_dir = tmp_path / label / "objects"
        store_dir.mkdir(parents=True)
        DiskObjectStore(store_dir).put_many(list(zip(HASHES, PAYLOADS, strict=True))[:present])
        os.sync()  # what was there before is durable
        return store_dir

    def run(store_dir: Path, ops: FsOps) -> None:
        store = DiskObjectStore(store_dir, ops=ops)
        store.adopt_many(_items(store, store_dir, PAYLOADS, ops))  # download, then name

    expected = set(HASHES)
    before = set(HASHES[:present])
    probe = Crash(None)
    run(fresh("probe"), probe)
    new = len(PAYLOADS) - present
    # create+write per download; touch+unlink per present one; chmod per new one; the
    # data flush(es); the renames; one directory fsync
    flushes = 1 + (0 if syncfs else new)
    assert probe.count == 2 * len(PAYLOADS) + 2 * present + new + flushes + new + 1
    for n in range(1, probe.count + 1):
        store_dir = fresh(f"crash-{n}")
        ops = Crash(n)
        with pytest.raises(SimulatedCrash):
            run(store_dir, ops)
        if power_loss:
            ops.power_loss()
            # The directory fsync is the last operation: before it, no new name survives.
            assert set(DiskObjectStore(store_dir)) == before
        _check_after_crash(store_dir, expected, before)
    store_dir = fresh("complete")
    done = Crash(None)
    run(store_dir, done)
    # Everything is durable on return (the head may move) but the removals of the
    # duplicates' quarantine files: undone, they are leftovers `cleanup_pending` removes.
    assert done.pending_effects() == present
    if power_loss:
        done.power_loss()
    assert set(DiskObjectStore(store_dir)) == expected
    _check_after_crash(store_dir, expected, before)


def _check_after_crash(store_dir: Path, expected: set[Multihash], before: set[Multihash]) -> None:
    """Each object whole or absent, what was stored before still there; redo completes."""
    store = DiskObjectStore(store_dir)
    listed = set(store)
    assert before <= listed <= expected
    for h in listed:
        store.check(h)  # never a partial object under its name
    store.cleanup_pending(older_than_s=0.0)
    assert not [n for n in _names(store_dir) if is_pending_name(n)]
    store.adopt_many(_items(store, store_dir, PAYLOADS))
    for h, data in zip(HASHES, PAYLOADS, strict=True):
        assert store.get(h) == data


def test_memory_store_adopt_many_reads_and_removes_the_files(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    items = _items(store, tmp_path / "spare", PAYLOADS[:2])
    store.adopt_many(items)
    assert set(store) == set(HASHES[:2])
    assert _names(tmp_path / "spare") == []
