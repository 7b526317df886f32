"""Tests for the durable write helpers in `storage.fsutil`."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from storage.errors import UnsafePath
from storage.faults import CrashAt, FsOps, RecordingOps, SimulatedCrash, plan_crashes
from storage.fsutil import (
    PENDING_PREFIX,
    PendingFile,
    atomic_write_bytes,
    cleanup_pending,
    create_file_durably,
    ensure_dir,
    is_pending_name,
    open_for_read,
    pending_name,
    read_bytes_limited,
)


class FailingWriteOps(FsOps):
    """Injects an I/O error (disk full) on the first write."""

    def write(self, fd: int, data: bytes | memoryview) -> None:
        raise OSError(28, "No space left on device")


def test_pending_name_format() -> None:
    names = {pending_name() for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert re.fullmatch(r"\.pending-[a-z0-9]{16}", name)
        assert is_pending_name(name)
    assert not is_pending_name("f1620abcd")


def test_atomic_write_creates_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "file"
    atomic_write_bytes(target, b"one")
    assert target.read_bytes() == b"one"
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["file"]


def test_atomic_write_sets_mode(tmp_path: Path) -> None:
    target = tmp_path / "ro"
    atomic_write_bytes(target, b"x", mode=0o444)
    assert stat.S_IMODE(target.stat().st_mode) == 0o444


def test_atomic_write_protocol_order(tmp_path: Path) -> None:
    ops = RecordingOps()
    target = tmp_path / "file"
    atomic_write_bytes(target, b"payload", ops=ops)
    kinds = [kind for kind, _ in ops.trace]
    assert kinds == ["create", "write", "fsync", "replace", "fsync_dir"]
    assert Path(ops.trace[0][1]).parent == tmp_path
    assert Path(ops.trace[0][1]).name.startswith(PENDING_PREFIX)
    assert ops.trace[3][1] == str(target)
    assert ops.trace[4][1] == str(tmp_path)


def test_failed_write_leaves_old_content_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "file"
    atomic_write_bytes(target, b"old")
    with pytest.raises(OSError, match="No space"):
        atomic_write_bytes(target, b"new", ops=FailingWriteOps())
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["file"]


def test_atomic_write_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write_bytes(tmp_path / "nope" / "file", b"x")


def test_pending_file_without_commit_is_removed(tmp_path: Path) -> None:
    with PendingFile(tmp_path) as pending:
        pending.write(b"abc")
        assert pending.path.exists()
    assert os.listdir(tmp_path) == []


def test_pending_file_exception_is_removed(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), PendingFile(tmp_path) as pending:
        pending.write(b"abc")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_pending_file_commit_rejects_other_directory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with PendingFile(tmp_path) as pending, pytest.raises(ValueError):
        pending.commit(tmp_path / "sub" / "x")
    assert sorted(os.listdir(tmp_path)) == ["sub"]


def test_pending_file_counts_size(tmp_path: Path) -> None:
    with PendingFile(tmp_path) as pending:
        pending.write(b"ab")
        pending.write(memoryview(b"cde"))
        assert pending.size == 5
        pending.commit(tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b"abcde"


def _make_pending(directory: Path, mtime: float) -> Path:
    path = directory / pending_name()
    path.write_bytes(b"partial")
    os.utime(path, (mtime, mtime))
    return path


def test_cleanup_pending_removes_only_old_pending_files(tmp_path: Path) -> None:
    old = _make_pending(tmp_path, 1000.0)
    young = _make_pending(tmp_path, 1990.0)
    keep = tmp_path / "f1620keep"
    keep.write_bytes(b"object")
    os.utime(keep, (0.0, 0.0))
    (tmp_path / (PENDING_PREFIX + "dir")).mkdir()

    dry = cleanup_pending(tmp_path, older_than_s=100.0, now=2000.0, dry_run=True)
    assert dry == (old,)
    assert old.exists()

    removed = cleanup_pending(tmp_path, older_than_s=100.0, now=2000.0)
    assert removed == (old,)
    assert not old.exists()
    assert young.exists()
    assert keep.exists()
    assert (tmp_path / (PENDING_PREFIX + "dir")).is_dir()


def test_cleanup_pending_missing_directory(tmp_path: Path) -> None:
    assert cleanup_pending(tmp_path / "missing", older_than_s=0.0) == ()


def test_ensure_dir_nested_and_idempotent(tmp_path: Path) -> None:
    ops = RecordingOps()
    target = tmp_path / "a" / "b" / "c"
    ensure_dir(target, ops=ops)
    assert target.is_dir()
    assert [k for k, _ in ops.trace] == ["mkdir", "fsync_dir"] * 3
    again = RecordingOps()
    ensure_dir(target, ops=again)
    assert again.trace == []


def test_ensure_dir_refuses_file_and_symlink(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(UnsafePath):
        ensure_dir(tmp_path / "file")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePath):
        ensure_dir(tmp_path / "link")


def test_open_for_read_refuses_symlink_and_dir(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    (tmp_path / "link").symlink_to(secret)
    with pytest.raises(UnsafePath):
        open_for_read(tmp_path / "link")
    with pytest.raises(UnsafePath):
        open_for_read(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_for_read(tmp_path / "missing")
    with open_for_read(secret) as f:
        assert f.read() == b"secret"


def test_read_bytes_limited(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    assert read_bytes_limited(path, 5) == b"12345"
    assert read_bytes_limited(path, 4) is None


def test_write_file_durably_alias(tmp_path: Path) -> None:
    from storage.fsutil import write_file_durably

    write_file_durably(tmp_path / "out.bin", b"\x00block")
    assert (tmp_path / "out.bin").read_bytes() == b"\x00block"
    assert os.listdir(tmp_path) == ["out.bin"]


# -- create_file_durably: create once, never replace --------------------------------------


def test_create_file_durably_never_replaces(tmp_path: Path) -> None:
    target = tmp_path / "token"
    assert create_file_durably(target, b"first", mode=0o600)
    assert not create_file_durably(target, b"second", mode=0o600)
    assert target.read_bytes() == b"first"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pending-")]


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_create_file_durably_crash_points(tmp_path: Path, power_loss: bool) -> None:
    plan = plan_crashes(lambda ops: create_file_durably(tmp_path / "probe", b"x", ops=ops))
    assert [k for k, _ in plan.trace] == [
        "create",
        "chmod",
        "write",
        "fsync",
        "link",
        "unlink",
        "fsync_dir",
    ]
    for n in plan.points():
        root = tmp_path / f"crash-{n}"
        root.mkdir()
        ops = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            create_file_durably(root / "f", b"whole", ops=ops)
        if power_loss:
            ops.power_loss()
        if (root / "f").exists():
            assert (root / "f").read_bytes() == b"whole"  # never a partial file
        cleanup_pending(root, older_than_s=0.0)
        create_file_durably(root / "f", b"whole")  # recovery
        assert (root / "f").read_bytes() == b"whole"
