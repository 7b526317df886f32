"""`ObjectStore.put_many`, `fsutil.atomic_write_many` and the crash model of ``syncfs``.

Contract tests run on both stores. Disk tests check the flushes (one ``syncfs`` and one
directory fsync whatever the number of objects), the per-file fallback, cleanup after
a failure, and every crash point with and without power loss: each object is visible
whole or not at all, and everything is durable once ``put_many`` returns.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fbs.errors import InvalidHash
from fbs.multiformats import SHA2_256, Multihash
from storage.errors import HashMismatch, ObjectTooLarge
from storage.faults import CrashAt, FsOps, RecordingOps, SimulatedCrash
from storage.fsutil import atomic_write_many, is_pending_name
from storage.object_store import DiskObjectStore, MemoryObjectStore, ObjectStore
from tests.storage.conftest import TEST_MAX_OBJECT_SIZE

PAYLOADS = [f"object number {i} ".encode() * (i + 1) for i in range(6)]
ITEMS = [(Multihash.sha3_256(d), d) for d in PAYLOADS]
FLUSHES = frozenset({"fsync", "syncfs", "fsync_dir"})


def _disk_names(root: Path) -> list[str]:
    return sorted(os.listdir(root)) if root.exists() else []


class NoSyncfsOps(RecordingOps):
    """Recording operations on a system without ``syncfs``."""

    def syncfs(self, path: Path) -> bool:
        self._tick("syncfs", path)
        return False


class FailingWriteOps(FsOps):
    """Real operations whose ``n``-th write fails like a full disk."""

    def __init__(self, n: int) -> None:
        self.writes_left = n

    def write(self, fd: int, data: bytes | memoryview) -> None:
        self.writes_left -= 1
        if self.writes_left == 0:
            raise OSError(28, "No space left on device")
        super().write(fd, data)


# -- contract (both stores) ---------------------------------------------------------------


def test_put_many_stores_every_item(object_store: ObjectStore) -> None:
    object_store.put_many(ITEMS)
    for h, data in ITEMS:
        assert object_store.get(h) == data
    assert set(object_store) == {h for h, _ in ITEMS}


def test_put_many_accepts_buffers_repeats_and_nothing(object_store: ObjectStore) -> None:
    object_store.put_many([])
    assert list(object_store) == []
    h, data = ITEMS[0]
    object_store.put_many([(h, bytearray(data)), (h, memoryview(data)), ITEMS[1]])
    assert object_store.get(h) == data
    assert set(object_store) == {h, ITEMS[1][0]}


def test_put_many_skips_present_objects(object_store: ObjectStore) -> None:
    object_store.put_many(ITEMS[:2])
    object_store.put_many(ITEMS)  # idempotent: present objects are only refreshed
    assert set(object_store) == {h for h, _ in ITEMS}
    for h, data in ITEMS:
        assert object_store.get(h) == data


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ((ITEMS[0][0], b"other bytes"), HashMismatch),
        ((Multihash(SHA2_256, bytes(32)), b""), InvalidHash),
        (("f1620" + "00" * 32, b""), InvalidHash),
        (
            (
                Multihash.sha3_256(b"x" * (TEST_MAX_OBJECT_SIZE + 1)),
                b"x" * (TEST_MAX_OBJECT_SIZE + 1),
            ),
            ObjectTooLarge,
        ),
    ],
    ids=["mismatch", "sha2", "string", "too-large"],
)
def test_one_bad_item_stores_nothing(
    object_store: ObjectStore, bad: tuple[object, bytes], error: type[Exception]
) -> None:
    items = [*ITEMS[1:3], bad, *ITEMS[3:]]
    with pytest.raises(error):
        object_store.put_many(items)  # type: ignore[arg-type]
    assert list(object_store) == []
    if isinstance(object_store, DiskObjectStore):
        assert _disk_names(object_store.root) == []


def test_put_many_refreshes_mtimes_in_memory() -> None:
    now = [100.0]
    store = MemoryObjectStore(clock=lambda: now[0])
    store.put_many(ITEMS[:1])
    now[0] = 200.0
    store.put_many(ITEMS[:2])
    assert [store.info(h).mtime for h, _ in ITEMS[:2]] == [200.0, 200.0]


# -- disk: flushes, fallback, cleanup ----------------------------------------------------


@pytest.mark.parametrize("count", [2, 6])
def test_flushes_do_not_grow_with_the_batch(tmp_path: Path, count: int) -> None:
    (tmp_path / "objects").mkdir()
    ops = RecordingOps()
    DiskObjectStore(tmp_path / "objects", ops=ops).put_many(ITEMS[:count])
    kinds = [k for k, _ in ops.trace]
    assert kinds == ["create", "write"] * count + ["syncfs"] + ["replace"] * count + ["fsync_dir"]
    assert sum(k in FLUSHES for k in kinds) == 2


def test_a_single_object_is_fsynced_not_syncfs(tmp_path: Path) -> None:
    (tmp_path / "objects").mkdir()
    ops = RecordingOps()
    DiskObjectStore(tmp_path / "objects", ops=ops).put_many(ITEMS[:1])
    assert [k for k, _ in ops.trace] == ["create", "write", "fsync", "replace", "fsync_dir"]


def test_without_syncfs_every_file_is_fsynced(tmp_path: Path) -> None:
    (tmp_path / "objects").mkdir()
    ops = NoSyncfsOps()
    store = DiskObjectStore(tmp_path / "objects", ops=ops)
    store.put_many(ITEMS)
    kinds = [k for k, _ in ops.trace]
    n = len(ITEMS)
    assert kinds == ["create", "write"] * n + ["syncfs"] + ["fsync"] * n + ["replace"] * n + [
        "fsync_dir"
    ]
    for h, data in ITEMS:
        assert store.get(h) == data


def test_present_objects_are_touched_not_rewritten(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    store.put_many(ITEMS[:3])
    ops = RecordingOps()
    DiskObjectStore(tmp_path / "objects", ops=ops).put_many(ITEMS)
    kinds = [k for k, _ in ops.trace]
    assert kinds.count("touch") == 3
    assert kinds.count("create") == kinds.count("replace") == len(ITEMS) - 3
    ops = RecordingOps()
    DiskObjectStore(tmp_path / "objects", ops=ops).put_many(ITEMS)
    assert [k for k, _ in ops.trace] == ["touch"] * len(ITEMS)  # nothing to flush


def test_a_truncated_copy_is_replaced(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    store.put_many(ITEMS)
    h, data = ITEMS[2]
    path = store.path_of(h)
    os.chmod(path, 0o644)
    path.write_bytes(data[:3])  # what a crash of an unsafe writer could leave
    store.put_many(ITEMS)
    assert store.get(h) == data


@pytest.mark.parametrize("failing_write", [1, 4, 6])
def test_a_failed_write_leaves_no_pending_file(tmp_path: Path, failing_write: int) -> None:
    (tmp_path / "objects").mkdir()
    store = DiskObjectStore(tmp_path / "objects", ops=FailingWriteOps(failing_write))
    with pytest.raises(OSError, match="No space"):
        store.put_many(ITEMS)
    assert _disk_names(tmp_path / "objects") == []


def test_atomic_write_many_refuses_other_directories(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be in"):
        atomic_write_many(tmp_path, [(tmp_path / "sub" / "x", b"x")])
    atomic_write_many(tmp_path, [])
    assert _disk_names(tmp_path) == []


def test_atomic_write_many_replaces_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"old")
    atomic_write_many(tmp_path, [(tmp_path / "a", b"new a"), (tmp_path / "b", b"new b")])
    assert (tmp_path / "a").read_bytes() == b"new a"
    assert (tmp_path / "b").read_bytes() == b"new b"
    assert _disk_names(tmp_path) == ["a", "b"]


# -- the crash model of syncfs --------------------------------------------------------------


def test_syncfs_makes_written_data_durable_but_not_names(tmp_path: Path) -> None:
    ops = CrashAt(None)
    fd = ops.create_exclusive(tmp_path / "a", 0o644)
    ops.write(fd, b"synced")
    ops.close(fd)
    ops.fsync_dir(tmp_path)  # the name "a" is durable, its data is not
    assert ops.syncfs(tmp_path)
    ops.replace(tmp_path / "a", tmp_path / "b")  # a rename after it is not durable
    ops.power_loss()
    assert _disk_names(tmp_path) == ["a"]
    assert (tmp_path / "a").read_bytes() == b"synced"


def test_writes_after_syncfs_are_lost(tmp_path: Path) -> None:
    ops = CrashAt(None)
    fd = ops.create_exclusive(tmp_path / "a", 0o644)
    ops.fsync_dir(tmp_path)
    ops.write(fd, b"kept")
    assert ops.syncfs(tmp_path)
    ops.write(fd, b" lost")
    ops.close(fd)
    ops.power_loss()
    assert (tmp_path / "a").read_bytes() == b"kept"


def test_syncfs_without_fsync_dir_loses_new_files(tmp_path: Path) -> None:
    ops = CrashAt(None)
    fd = ops.create_exclusive(tmp_path / "a", 0o644)
    ops.write(fd, b"data")
    ops.close(fd)
    assert ops.syncfs(tmp_path)
    assert ops.pending_effects() == 1  # only the directory entry
    ops.power_loss()
    assert _disk_names(tmp_path) == []


def test_a_syncfs_is_a_crash_point(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "a", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    ops = CrashAt(1)
    with pytest.raises(SimulatedCrash, match="syncfs"):
        ops.syncfs(tmp_path)
    assert ops.trace == [("syncfs", str(tmp_path))]


def test_the_real_syncfs_runs(tmp_path: Path) -> None:
    # Linux has syncfs; elsewhere the seam says so and callers fsync each file.
    assert FsOps().syncfs(tmp_path) is sys.platform.startswith("linux")


# -- crash points ------------------------------------------------------------------------------


def _check_after_crash(store_dir: Path, expected: set[Multihash], completed: bool) -> None:
    """Each object whole or absent; all present once completed; the put can be redone."""
    store = DiskObjectStore(store_dir)
    listed = set(store)
    assert listed <= expected
    for h in listed:
        store.check(h)  # never a partial object under its name
    if completed:
        assert listed == expected
    store.cleanup_pending(older_than_s=0.0)
    assert not [n for n in _disk_names(store_dir) if is_pending_name(n)]
    store.put_many(ITEMS)
    for h, data in ITEMS:
        assert store.get(h) == data


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
@pytest.mark.parametrize("present", [0, 2], ids=["empty", "two-present"])
@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync-each"])
def test_put_many_crash_points(
    tmp_path: Path, power_loss: bool, present: int, syncfs: bool
) -> None:
    class Crash(CrashAt):
        def syncfs(self, path: Path) -> bool:
            if syncfs:
                return super().syncfs(path)
            self._tick("syncfs", path)  # a system without it: still a crash point
            return False

    def fresh(label: str) -> Path:
        store_dir = tmp_path / label / "objects"
        store_dir.mkdir(parents=True)
        DiskObjectStore(store_dir).put_many(ITEMS[:present])
        return store_dir

    def run(store_dir: Path, ops: FsOps) -> None:
        DiskObjectStore(store_dir, ops=ops).put_many(ITEMS)

    expected = {h for h, _ in ITEMS}
    probe = Crash(None)
    run(fresh("probe"), probe)
    points = probe.count
    new = len(ITEMS) - present
    # touches, create+write per new object, the data flush(es), renames, one dir fsync
    assert points == present + 2 * new + (1 + (0 if syncfs else new)) + new + 1
    for n in range(1, points + 1):
        store_dir = fresh(f"crash-{n}")
        ops = Crash(n)
        with pytest.raises(SimulatedCrash):
            run(store_dir, ops)
        if power_loss:
            ops.power_loss()
            # The directory fsync is the last operation: before it, no new name survives.
            assert set(DiskObjectStore(store_dir)) == {h for h, _ in ITEMS[:present]}
        _check_after_crash(store_dir, expected, completed=False)
    store_dir = fresh("complete")
    done = Crash(None)
    run(store_dir, done)
    assert done.pending_effects() == 0  # everything is durable on return
    if power_loss:
        done.power_loss()
    _check_after_crash(store_dir, expected, completed=True)
