"""The file-operations seam, and a crash simulator built on it.

Every filesystem *mutation* made by `storage` (object puts, ref updates, directory
creation, GC deletes) goes through an `FsOps` object. Production code uses
`DEFAULT_OPS`, which calls `os` directly. Tests swap in:

- `RecordingOps`: runs the real operation and appends ``(kind, path)`` to `trace`,
  so a test can count the crash points of an operation and check its protocol
  (for example "fsync file -> replace -> fsync dir").
- `CrashAt(n)`: like `RecordingOps`, but raises `SimulatedCrash` *instead of*
  running the n-th mutating operation (1-based), and every later operation too
  (the process is dead). ``CrashAt(None)`` never crashes and is a counting run.

Crash model. `CrashAt` remembers which effects were never made durable:

- data written to a file but not fsynced (lost up to the file's last fsync), unless a
  `FsOps.syncfs` of its filesystem came after the write (it flushes every file's data);
- directory entries (create, rename/replace, unlink, mkdir) in a directory that
  was not fsynced afterwards (the entry change is lost). A syncfs does not count
  here: on ext4 or XFS it commits the journal, renames included, but POSIX promises
  nothing of the kind, so the model keeps only what ``fsync_dir`` promises.

After a crash a test can inspect the state "as the process left it" (the OS page
cache survived: an application crash), or first call `CrashAt.power_loss()`,
which undoes every non-durable effect in reverse order (a machine crash where the
disk kept only what was synced). These are the two extreme outcomes; orderings
where only *some* unsynced effects survive are not modelled. That is enough to
catch the classic bugs: rename before fsync of the file (an empty file appears
under the final name) and no fsync of the directory after a rename (an
acknowledged write disappears).

Usage for a crash-point test::

    probe = CrashAt(None)
    operation(ops=probe)                 # count the mutating operations
    for n in range(1, probe.count + 1):
        ops = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            operation(ops=ops)
        ops.power_loss()                 # optional
        check_invariants()               # with fresh objects and DEFAULT_OPS

Reads are never routed through the seam: they do not change state.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

#: Flags for creating a new private temp file: never reuse, never follow a symlink.
_CREATE_FLAGS: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class SimulatedCrash(BaseException):
    """Raised by `CrashAt` in place of a file operation.

    A `BaseException` so that ``except Exception`` cleanup paths (which a real
    crash would never run) do not swallow it.
    """


class FsOps:
    """Real file operations: the production implementation of the seam.

    Mutating methods are `create_exclusive`, `write`, `fsync`, `fsync_path`, `syncfs`,
    `chmod`, `replace`, `link`, `fsync_dir`, `mkdir`, `unlink` and `touch`. `close` does
    not change what is on disk and is never a crash point.
    """

    def create_exclusive(self, path: Path, mode: int) -> int:
        """Create a new file (``O_EXCL``, ``O_NOFOLLOW``) open for writing; returns its fd.

        Raises:
            FileExistsError: if anything already exists at ``path``.
        """
        return os.open(path, _CREATE_FLAGS, mode)

    def write(self, fd: int, data: bytes | memoryview) -> None:
        """Write all of ``data`` to ``fd`` (looping over short writes)."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def fsync(self, fd: int) -> None:
        """Flush a file's data and metadata to stable storage."""
        os.fsync(fd)

    def close(self, fd: int) -> None:
        """Close a file descriptor (not a crash point)."""
        os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        """Atomically rename ``src`` onto ``dst`` (same directory)."""
        os.replace(src, dst)

    def fsync_dir(self, path: Path) -> None:
        """Make a directory's entries (creates, renames, unlinks) durable."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, path: Path, mode: int = 0o755) -> None:
        """Create one directory level.

        Raises:
            FileExistsError: if ``path`` exists.
        """
        os.mkdir(path, mode)

    def unlink(self, path: Path) -> None:
        """Remove a file.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
        """
        os.unlink(path)

    def touch(self, path: Path) -> None:
        """Set a file's mtime to now without following symlinks."""
        os.utime(path, follow_symlinks=False)

    def link(self, src: Path, dst: Path) -> None:
        """Give the file ``src`` the second name ``dst`` (a hard link; never replaces).

        Raises:
            FileExistsError: if anything exists at ``dst``.
        """
        os.link(src, dst, follow_symlinks=False)

    def fsync_path(self, path: Path) -> None:
        """Flush a file that was written outside the seam (e.g. by a download) to disk."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def chmod(self, path: Path, mode: int) -> None:
        """Set a file's permission bits (without following a symlink)."""
        os.chmod(path, mode, follow_symlinks=False)

    def syncfs(self, path: Path) -> bool:
        """Flush the written data of every file in the filesystem holding ``path``.

        One ``syncfs(2)`` instead of an fsync per file: the way to make many new files
        durable at once. Directory entries still need `fsync_dir` (POSIX does not
        promise that a syncfs covers them). Linux reports writeback errors here since
        5.8; older kernels may return success after a failed write.

        Returns:
            Whether it flushed: ``False`` (having done nothing) where the C library has
            no ``syncfs``, and the caller must then fsync each file.

        Raises:
            OSError: the flush failed.
        """
        flush = _libc_syncfs()
        if flush is None:
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            if flush(fd) != 0:
                err = _errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}", str(path))
        finally:
            os.close(fd)
        return True


@functools.cache
def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs``, or ``None`` off Linux or without it (loaded on first use)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here, not at module level: only batch writers pay for the import

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    flush: Callable[[int], int] = fn
    return flush


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


#: The production seam.
DEFAULT_OPS: Final = FsOps()


class RecordingOps(FsOps):
    """Real operations that also record ``(kind, path)`` for each mutation in `trace`."""

    def __init__(self) -> None:
        self.trace: list[tuple[str, str]] = []
        self._fd_paths: dict[int, str] = {}

    @property
    def count(self) -> int:
        """Number of mutating operations attempted so far."""
        return len(self.trace)

    def _tick(self, kind: str, path: Path | str) -> None:
        self.trace.append((kind, str(path)))

    def create_exclusive(self, path: Path, mode: int) -> int:
        self._tick("create", path)
        fd = super().create_exclusive(path, mode)
        self._fd_paths[fd] = str(path)
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> None:
        self._tick("write", self._fd_paths.get(fd, f"fd:{fd}"))
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._tick("fsync", self._fd_paths.get(fd, f"fd:{fd}"))
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self._fd_paths.pop(fd, None)
        super().close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        self._tick("replace", dst)
        super().replace(src, dst)

    def fsync_dir(self, path: Path) -> None:
        self._tick("fsync_dir", path)
        super().fsync_dir(path)

    def mkdir(self, path: Path, mode: int = 0o755) -> None:
        self._tick("mkdir", path)
        super().mkdir(path, mode)

    def unlink(self, path: Path) -> None:
        self._tick("unlink", path)
        super().unlink(path)

    def touch(self, path: Path) -> None:
        self._tick("touch", path)
        super().touch(path)

    def link(self, src: Path, dst: Path) -> None:
        self._tick("link", dst)
        super().link(src, dst)

    def fsync_path(self, path: Path) -> None:
        self._tick("fsync", path)
        super().fsync_path(path)

    def chmod(self, path: Path, mode: int) -> None:
        self._tick("chmod", path)
        super().chmod(path, mode)

    def syncfs(self, path: Path) -> bool:
        self._tick("syncfs", path)
        return super().syncfs(path)


@dataclass(slots=True, eq=False)
class _TrackedFile:
    """A file created through the seam; follows it across renames."""

    path: Path | None
    synced_size: int = 0


@dataclass(slots=True, eq=False)
class _Undo:
    """How to revert one non-durable effect, and what makes it durable."""

    undo: Callable[[], None]
    directory: Path | None = None  # fsync_dir(directory) makes it durable
    file: _TrackedFile | None = None  # fsync of this file makes it durable


def _abs(path: Path | str) -> Path:
    return Path(os.path.abspath(path))


@dataclass(slots=True, eq=False)
class _Saved:
    """Bytes and mode of a file that an operation is about to overwrite or remove."""

    data: bytes
    mode: int

    @classmethod
    def of(cls, path: Path) -> _Saved | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return cls(path.read_bytes(), stat.S_IMODE(st.st_mode))

    def restore(self, path: Path) -> None:
        path.write_bytes(self.data)
        os.chmod(path, self.mode)


class CrashAt(RecordingOps):
    """Crash simulator: fails at the n-th mutating operation and can model power loss.

    Args:
        n: 1-based index of the mutating operation that "crashes" (it does not run);
            ``None`` never crashes (use it to count an operation's crash points).
    """

    def __init__(self, n: int | None) -> None:
        super().__init__()
        if n is not None and n < 1:
            raise ValueError("crash point numbers start at 1")
        self.crash_at = n
        self.crashed = False
        self._undo: list[_Undo] = []
        self._by_fd: dict[int, _TrackedFile] = {}
        self._by_path: dict[Path, _TrackedFile] = {}

    def _tick(self, kind: str, path: Path | str) -> None:
        if self.crashed:
            raise SimulatedCrash(f"process already crashed; {kind} {path} never ran")
        super()._tick(kind, path)
        if self.count == self.crash_at:
            self.crashed = True
            raise SimulatedCrash(f"crash at operation #{self.count}: {kind} {path}")

    # -- mutating operations, each recording how to undo it ---------------------------

    def create_exclusive(self, path: Path, mode: int) -> int:
        fd = super().create_exclusive(path, mode)
        tracked = _TrackedFile(_abs(path))
        self._by_fd[fd] = tracked
        self._by_path[_abs(path)] = tracked
        self._undo.append(_Undo(lambda: self._drop_entry(tracked), directory=_abs(path).parent))
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> None:
        super().write(fd, data)
        tracked = self._by_fd.get(fd)
        if tracked is not None:
            self._undo.append(_Undo(lambda: self._truncate(tracked), file=tracked))

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        tracked = self._by_fd.get(fd)
        if tracked is not None:
            tracked.synced_size = os.fstat(fd).st_size
            self._undo = [u for u in self._undo if u.file is not tracked]

    def close(self, fd: int) -> None:
        self._by_fd.pop(fd, None)
        super().close(fd)

    def fsync_path(self, path: Path) -> None:
        super().fsync_path(path)
        # A file written outside the seam (a download) is tracked from here on, so a
        # later rename of it can be undone by a power loss.
        tracked = self._by_path.get(_abs(path))
        if tracked is None:
            tracked = _TrackedFile(_abs(path))
            self._by_path[_abs(path)] = tracked
        tracked.synced_size = os.lstat(path).st_size
        self._undo = [u for u in self._undo if u.file is not tracked]

    def syncfs(self, path: Path) -> bool:
        if not super().syncfs(path):
            return False
        # Every tracked file of that filesystem keeps its data as of now; entries in
        # directories stay undoable until their fsync_dir (see the module docstring).
        device = os.stat(path).st_dev
        flushed: set[int] = set()
        for tracked in {*self._by_path.values(), *self._by_fd.values()}:
            if tracked.path is None:
                continue  # unlinked: if a power loss brings it back, pessimistically unsynced
            try:
                st = os.lstat(tracked.path)
            except FileNotFoundError:
                continue  # removed outside the seam (a test's rmtree)
            if st.st_dev == device:
                tracked.synced_size = st.st_size
                flushed.add(id(tracked))
        self._undo = [u for u in self._undo if u.file is None or id(u.file) not in flushed]
        return True

    def replace(self, src: Path, dst: Path) -> None:
        src, dst = _abs(src), _abs(dst)
        saved = _Saved.of(dst)
        displaced = self._by_path.pop(dst, None)
        super().replace(src, dst)
        moved = self._by_path.pop(src, None)
        if moved is not None:
            moved.path = dst
            self._by_path[dst] = moved
        if displaced is not None:
            displaced.path = None

        def undo() -> None:
            if dst.exists():
                os.replace(dst, src)
            if moved is not None:
                moved.path = src
                self._by_path[src] = moved
            if saved is not None:
                saved.restore(dst)
            if displaced is not None:
                displaced.path = dst

        self._undo.append(_Undo(undo, directory=dst.parent))

    def link(self, src: Path, dst: Path) -> None:
        super().link(src, dst)
        created = _abs(dst)
        self._undo.append(_Undo(lambda: created.unlink(missing_ok=True), directory=created.parent))

    def fsync_dir(self, path: Path) -> None:
        super().fsync_dir(path)
        directory = _abs(path)
        self._undo = [u for u in self._undo if u.directory != directory]

    def mkdir(self, path: Path, mode: int = 0o755) -> None:
        super().mkdir(path, mode)
        created = _abs(path)
        # Losing the entry loses the whole subtree, durable or not.
        self._undo.append(
            _Undo(lambda: shutil.rmtree(created, ignore_errors=True), directory=created.parent)
        )

    def unlink(self, path: Path) -> None:
        path = _abs(path)
        saved = _Saved.of(path)
        super().unlink(path)
        tracked = self._by_path.pop(path, None)
        if tracked is not None:
            tracked.path = None

        def undo() -> None:
            if saved is not None:
                saved.restore(path)
            if tracked is not None:
                tracked.path = path
                self._by_path[path] = tracked

        self._undo.append(_Undo(undo, directory=path.parent))

    # -- power loss -------------------------------------------------------------------

    def power_loss(self) -> None:
        """Undo every effect that was never made durable, newest first.

        Call it after the `SimulatedCrash`; afterwards the directory tree looks as
        it would after a power failure at that point (pessimistic variant).
        """
        pending, self._undo = self._undo, []
        for entry in reversed(pending):
            entry.undo()

    def pending_effects(self) -> int:
        """Number of effects that `power_loss` would undo (0 = everything is durable)."""
        return len(self._undo)

    def _drop_entry(self, tracked: _TrackedFile) -> None:
        if tracked.path is not None:
            self._by_path.pop(tracked.path, None)
            tracked.path.unlink(missing_ok=True)
            tracked.path = None

    @staticmethod
    def _truncate(tracked: _TrackedFile) -> None:
        if tracked.path is not None and tracked.path.exists():
            # Objects are stored read-only; truncating needs write permission.
            mode = stat.S_IMODE(os.lstat(tracked.path).st_mode)
            os.chmod(tracked.path, mode | stat.S_IWUSR)
            os.truncate(tracked.path, tracked.synced_size)
            os.chmod(tracked.path, mode)


@dataclass(frozen=True, slots=True)
class CrashPlan:
    """The crash points of one operation: ``1..count`` (``count`` from a counting run)."""

    count: int
    trace: tuple[tuple[str, str], ...] = field(default=())

    def points(self) -> range:
        """Every crash point number of the operation."""
        return range(1, self.count + 1)


def plan_crashes(run: Callable[[FsOps], object]) -> CrashPlan:
    """Run ``run(ops)`` once with a counting `CrashAt(None)` and return its crash points."""
    probe = CrashAt(None)
    run(probe)
    return CrashPlan(probe.count, tuple(probe.trace))
