"""Crash-point enumeration for object puts, ref CAS and GC (storage level).

For every mutating file operation of an operation we run it again with
`CrashAt(n)`, optionally apply `power_loss()` (drop everything not fsynced), then
reopen the store with real file operations and check the invariants:

- objects: the store lists, every listed object verifies, the new object is either
  fully present with the right bytes or absent; after leftover cleanup no temp
  files remain and the operation can be redone;
- refs: the ref reads as the old or the new value, never garbage, and the lock is
  free (a CAS from the observed value succeeds).

A completed operation followed by power loss must keep its effect (durability).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import storage.object_store as object_store_module
from fbs.multiformats import Multihash
from storage.faults import CrashAt, FsOps, SimulatedCrash, plan_crashes
from storage.fsutil import PENDING_PREFIX, atomic_write_bytes, cleanup_pending, is_pending_name
from storage.gc import collect_garbage
from storage.object_store import DiskObjectStore
from storage.refs import HEAD, DiskRefStore

DATA = b"the object payload " * 3
H = Multihash.sha3_256(DATA)
OLD = Multihash.sha3_256(b"old head")
NEW = Multihash.sha3_256(b"new head")

Setup = Callable[[Path], None]
Operation = Callable[[Path, FsOps], None]
Check = Callable[[Path, bool], None]


def _enumerate(
    tmp_path: Path, setup: Setup, operation: Operation, check: Check, power_loss: bool
) -> int:
    """Run ``operation`` crashed at every point (and once to completion); returns the count."""

    def fresh(label: str) -> Path:
        root = tmp_path / label
        root.mkdir()
        setup(root)
        return root

    probe_root = fresh("probe")
    plan = plan_crashes(lambda ops: operation(probe_root, ops))
    assert plan.count > 0
    for n in plan.points():
        root = fresh(f"crash-{n}")
        ops = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            operation(root, ops)
        assert ops.crashed
        if power_loss:
            ops.power_loss()
        check(root, False)
    root = fresh("complete")
    ops = CrashAt(None)
    operation(root, ops)
    # The protocol leaves nothing un-synced once it returns.
    if power_loss:
        ops.power_loss()
    check(root, True)
    return plan.count


def _no_setup(root: Path) -> None:
    pass


def _check_object_store(store_dir: Path, completed: bool, extra: frozenset[Multihash]) -> None:
    store = DiskObjectStore(store_dir)
    listed = set(store)
    assert listed <= {H} | extra
    for h in listed:
        store.check(h)  # every listed object verifies: never a partial object
    if completed:
        assert store.get(H) == DATA
    store.cleanup_pending(older_than_s=0.0)
    if store_dir.exists():
        assert not [n for n in os.listdir(store_dir) if is_pending_name(n)]
    store.put(H, DATA)  # recovery: the put can always be redone
    assert store.get(H) == DATA


# -- object puts --------------------------------------------------------------------------


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
@pytest.mark.parametrize("root_exists", [True, False], ids=["root", "no-root"])
def test_put_crash_points(tmp_path: Path, power_loss: bool, root_exists: bool) -> None:
    def setup(root: Path) -> None:
        if root_exists:
            (root / "objects").mkdir()

    def operation(root: Path, ops: FsOps) -> None:
        DiskObjectStore(root / "objects", ops=ops).put(H, DATA)

    def check(root: Path, completed: bool) -> None:
        _check_object_store(root / "objects", completed, frozenset())

    count = _enumerate(tmp_path, setup, operation, check, power_loss)
    assert count == (5 if root_exists else 7)


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_put_file_crash_points(
    tmp_path: Path, power_loss: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks so the copy loop itself has several crash points.
    monkeypatch.setattr(object_store_module, "COPY_CHUNK_SIZE", 16)

    def operation(root: Path, ops: FsOps) -> None:
        DiskObjectStore(root / "objects", ops=ops).put_file(H, io.BytesIO(DATA))

    def check(root: Path, completed: bool) -> None:
        _check_object_store(root / "objects", completed, frozenset())

    count = _enumerate(tmp_path, _no_setup, operation, check, power_loss)
    assert count > 8  # mkdir, create, 4 writes, fsync, replace, fsync_dir


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_put_existing_crash_points(tmp_path: Path, power_loss: bool) -> None:
    other = b"another object"

    def setup(root: Path) -> None:
        store = DiskObjectStore(root / "objects")
        store.put(H, DATA)
        store.put(Multihash.sha3_256(other), other)

    def operation(root: Path, ops: FsOps) -> None:
        DiskObjectStore(root / "objects", ops=ops).put(H, DATA)

    def check(root: Path, completed: bool) -> None:
        store = DiskObjectStore(root / "objects")
        assert store.get(H) == DATA
        assert store.get(Multihash.sha3_256(other)) == other
        assert sorted(os.listdir(root / "objects")) == sorted(
            [H.to_multibase(), Multihash.sha3_256(other).to_multibase()]
        )

    assert _enumerate(tmp_path, setup, operation, check, power_loss) == 1  # just the touch


# -- refs ---------------------------------------------------------------------------------


def _check_ref(
    root: Path, allowed: set[Multihash | None], completed_value: Multihash | None, completed: bool
) -> None:
    refs = DiskRefStore(root / "refs", lock_timeout_s=0.0)  # a leaked lock would time out
    value = refs.get_or_none(HEAD)  # raises InvalidRef on garbage
    assert value in allowed
    if completed:
        assert value == completed_value
    assert refs.names() == ([] if value is None else [HEAD])
    # The lock is free and the ref usable.
    refs.set_if_equals(HEAD, value, Multihash.sha3_256(b"after recovery"))
    assert refs.get(HEAD) == Multihash.sha3_256(b"after recovery")
    cleanup_pending(root / "refs", older_than_s=0.0)
    assert not [n for n in os.listdir(root / "refs") if is_pending_name(n)]


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_ref_create_crash_points(tmp_path: Path, power_loss: bool) -> None:
    def operation(root: Path, ops: FsOps) -> None:
        DiskRefStore(root / "refs", ops=ops).set_if_equals(HEAD, None, NEW)

    def check(root: Path, completed: bool) -> None:
        _check_ref(root, {None, NEW}, NEW, completed)

    # mkdir refs + fsync parent, then create/write/fsync/replace/fsync_dir.
    assert _enumerate(tmp_path, _no_setup, operation, check, power_loss) == 7


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_ref_update_crash_points(tmp_path: Path, power_loss: bool) -> None:
    def setup(root: Path) -> None:
        DiskRefStore(root / "refs").set_if_equals(HEAD, None, OLD)

    def operation(root: Path, ops: FsOps) -> None:
        DiskRefStore(root / "refs", ops=ops).set_if_equals(HEAD, OLD, NEW)

    def check(root: Path, completed: bool) -> None:
        _check_ref(root, {OLD, NEW}, NEW, completed)

    assert _enumerate(tmp_path, setup, operation, check, power_loss) == 5


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_ref_delete_crash_points(tmp_path: Path, power_loss: bool) -> None:
    def setup(root: Path) -> None:
        DiskRefStore(root / "refs").set_if_equals(HEAD, None, OLD)

    def operation(root: Path, ops: FsOps) -> None:
        DiskRefStore(root / "refs", ops=ops).delete_if_equals(HEAD, OLD)

    def check(root: Path, completed: bool) -> None:
        _check_ref(root, {OLD, None}, None, completed)

    assert _enumerate(tmp_path, setup, operation, check, power_loss) == 2


# -- GC -----------------------------------------------------------------------------------

GARBAGE = [bytes([i]) * 10 for i in range(3)]


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_gc_crash_points(tmp_path: Path, power_loss: bool) -> None:
    garbage = {Multihash.sha3_256(g) for g in GARBAGE}

    def setup(root: Path) -> None:
        store = DiskObjectStore(root / "objects")
        store.put(H, DATA)
        for g in GARBAGE:
            store.put(Multihash.sha3_256(g), g)
        (root / "objects" / (PENDING_PREFIX + "x" * 16)).write_bytes(b"partial")

    def operation(root: Path, ops: FsOps) -> None:
        store = DiskObjectStore(root / "objects", ops=ops)
        collect_garbage(store, {H}, grace_period_s=0.0, pending_age_s=0.0)

    def check(root: Path, completed: bool) -> None:
        store = DiskObjectStore(root / "objects")
        listed = set(store)
        assert H in listed
        assert store.get(H) == DATA  # the referenced object always survives intact
        assert listed <= {H} | garbage
        for h in listed:
            store.check(h)
        if completed and not power_loss:
            assert listed == {H}
            assert os.listdir(root / "objects") == [H.to_multibase()]

    assert _enumerate(tmp_path, setup, operation, check, power_loss) == 4


# -- the crash model itself ----------------------------------------------------------------


def test_crash_at_stops_everything_after_the_crash(tmp_path: Path) -> None:
    ops = CrashAt(2)
    fd = ops.create_exclusive(tmp_path / "f", 0o644)
    with pytest.raises(SimulatedCrash):
        ops.write(fd, b"x")
    with pytest.raises(SimulatedCrash):
        ops.fsync(fd)
    ops.close(fd)  # closing is not a crash point
    assert (tmp_path / "f").read_bytes() == b""
    assert ops.trace == [("create", str(tmp_path / "f")), ("write", str(tmp_path / "f"))]


def test_crash_at_rejects_bad_numbers() -> None:
    with pytest.raises(ValueError):
        CrashAt(0)


def test_model_detects_rename_before_fsync(tmp_path: Path) -> None:
    """A writer that renames without fsyncing the file publishes an empty file."""
    ops = CrashAt(None)
    final = tmp_path / "final"
    fd = ops.create_exclusive(tmp_path / ".pending-buggy", 0o644)
    ops.write(fd, b"content")
    ops.close(fd)
    ops.replace(tmp_path / ".pending-buggy", final)
    ops.fsync_dir(tmp_path)
    assert ops.pending_effects() == 1
    ops.power_loss()
    assert final.read_bytes() == b""  # the bug is visible


def test_model_detects_missing_directory_fsync(tmp_path: Path) -> None:
    """Without the directory fsync an acknowledged replace is lost on power failure."""
    final = tmp_path / "final"
    final.write_bytes(b"old")
    ops = CrashAt(None)
    fd = ops.create_exclusive(tmp_path / ".pending-buggy", 0o644)
    ops.write(fd, b"new")
    ops.fsync(fd)
    ops.close(fd)
    ops.replace(tmp_path / ".pending-buggy", final)
    assert final.read_bytes() == b"new"
    ops.power_loss()
    assert final.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["final"]


def test_model_undoes_unsynced_unlink_and_mkdir(tmp_path: Path) -> None:
    (tmp_path / "victim").write_bytes(b"keep me")
    os.chmod(tmp_path / "victim", 0o444)
    ops = CrashAt(None)
    ops.unlink(tmp_path / "victim")
    ops.mkdir(tmp_path / "newdir")
    ops.power_loss()
    assert (tmp_path / "victim").read_bytes() == b"keep me"
    assert (tmp_path / "victim").stat().st_mode & 0o777 == 0o444
    assert not (tmp_path / "newdir").exists()


def test_durable_protocol_leaves_nothing_pending(tmp_path: Path) -> None:
    ops = CrashAt(None)
    atomic_write_bytes(tmp_path / "f", b"durable", ops=ops)
    assert ops.pending_effects() == 0
    kinds = [kind for kind, _ in ops.trace]
    # fsync(file) -> replace -> fsync(dir), in that order.
    assert kinds.index("fsync") < kinds.index("replace") < kinds.index("fsync_dir")


# -- adopting a downloaded file ------------------------------------------------------------


def _download(root: Path) -> Path:
    """A quarantine file written outside the seam, as a transport does."""
    store = DiskObjectStore(root / "objects")
    path = store.quarantine_path()
    path.write_bytes(DATA)
    return path


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_adopt_crash_points(tmp_path: Path, power_loss: bool) -> None:
    def operation(root: Path, ops: FsOps) -> None:
        [quarantine] = (root / "objects").iterdir()
        DiskObjectStore(root / "objects", ops=ops).adopt(H, quarantine, digest=H.digest)

    def check(root: Path, completed: bool) -> None:
        _check_object_store(root / "objects", completed, frozenset())

    count = _enumerate(tmp_path, _download, operation, check, power_loss)
    assert count == 4  # chmod, fsync, replace, fsync_dir


def test_adopt_makes_the_file_durable_before_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "r"
    quarantine = _download(root)
    plan = plan_crashes(
        lambda ops: DiskObjectStore(root / "objects", ops=ops).adopt(H, quarantine, digest=H.digest)
    )
    assert [k for k, _ in plan.trace] == ["chmod", "fsync", "replace", "fsync_dir"]
