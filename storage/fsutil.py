"""Durable file writes: temp file, fsync, rename, fsync directory.

The protocol for every file `storage` publishes under a final name:

1. create ``.pending-<16 random chars>`` in the *same* directory
   (``O_CREAT|O_EXCL|O_NOFOLLOW``: never reuse or follow anything already there);
2. write the content, then ``fsync`` the file, so its bytes are on disk before any
   name points at them;
3. ``os.replace`` it onto the final name (atomic: readers see the old file or the
   new one, never a mix);
4. ``fsync`` the directory, so the rename itself survives a power failure.

`atomic_write_many` runs the same protocol for many files of one directory with
O(1) flushes: every file is written, one ``syncfs`` makes all their data durable
(step 2 for all at once), then every rename, then one directory fsync; `publish_many`
runs steps 2-4 so for files written elsewhere (received objects in quarantine).

Readers ignore ``.pending-*`` names; `cleanup_pending` removes the leftovers of
writers that died between steps 1 and 3. All mutations go through an `FsOps`
(``ops``) so crash tests can interrupt them (see `storage.faults`).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

from storage.errors import UnsafePath
from storage.faults import DEFAULT_OPS, FsOps, SimulatedCrash
from storage.lockfile import FileLock

#: Prefix of temp files; readers skip these names.
PENDING_PREFIX: Final = ".pending-"
#: Random characters after the prefix (16 chars of base32 [a-z2-7]: 80 bits).
PENDING_RANDOM_CHARS: Final = 16
_PENDING_RANDOM_BYTES: Final = PENDING_RANDOM_CHARS * 5 // 8
#: Default age after which a pending file is considered abandoned by its writer.
DEFAULT_STALE_PENDING_AGE_S: Final = 3600.0
#: Mode of mutable files (refs, alias).
FILE_MODE: Final = 0o644
#: Mode of immutable content-addressed objects.
OBJECT_MODE: Final = 0o444
#: Mode of directories created by the store.
DIR_MODE: Final = 0o755
#: Attempts at finding an unused pending name before giving up (collisions are
#: astronomically unlikely; a loop means something else owns the names).
_PENDING_NAME_ATTEMPTS: Final = 8

_READ_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def pending_name() -> str:
    """A fresh temp file name: ``.pending-`` plus 16 random ``[a-z0-9]`` characters."""
    # One urandom call, base32 (``[a-z2-7]``, 5 bits a character): a receive names
    # thousands of files, and a choice per character cost more than the file's write.
    return PENDING_PREFIX + base64.b32encode(os.urandom(_PENDING_RANDOM_BYTES)).decode().lower()


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to the descriptor ``fd`` (``os.write`` may write less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def is_pending_name(name: str) -> bool:
    """Whether ``name`` is a temp file name that readers must ignore."""
    return name.startswith(PENDING_PREFIX)


def _create_pending(directory: Path, mode: int, ops: FsOps) -> tuple[Path, int]:
    """Create a fresh pending file in ``directory``; its path and a writable fd."""
    for _ in range(_PENDING_NAME_ATTEMPTS):
        candidate = directory / pending_name()
        try:
            return candidate, ops.create_exclusive(candidate, mode)
        except FileExistsError:
            continue
    # Needs 8 collisions of 80-bit random names.
    raise FileExistsError(f"no free pending name in {directory}")  # pragma: no cover


class PendingFile:
    """A temp file that becomes visible under its final name only at `commit`.

    Use as a context manager: leaving the block without `commit` (or with an
    exception) removes the temp file. A `SimulatedCrash` leaves it in place, like
    a real crash would.

    Args:
        directory: where the temp file and the final file live (must exist).
        mode: permission bits of the final file.
        ops: the file-operations seam.

    Raises:
        FileNotFoundError: if ``directory`` does not exist.
    """

    def __init__(self, directory: Path, *, mode: int = FILE_MODE, ops: FsOps = DEFAULT_OPS):
        self._ops = ops
        self.directory = Path(directory)
        self.path, fd = _create_pending(self.directory, mode, ops)
        self._fd: int | None = fd
        self.size = 0
        self.committed = False

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` to the temp file."""
        if self._fd is None:
            raise ValueError("pending file is closed")
        self._ops.write(self._fd, data)
        self.size += len(data)

    def commit(self, final: Path) -> None:
        """Fsync, rename onto ``final`` (same directory) and fsync the directory."""
        if self._fd is None:
            raise ValueError("pending file is closed")
        if Path(final).parent != self.directory:
            raise ValueError("final name must be in the pending file's directory")
        self._ops.fsync(self._fd)
        self._close_fd()
        self._ops.replace(self.path, final)
        self.committed = True
        self._ops.fsync_dir(self.directory)

    def commit_new(self, final: Path) -> bool:
        """Like `commit`, but never replaces: whether ``final`` was created.

        The temp file is fsynced, hard-linked onto ``final`` (which fails if the name
        exists), then removed; so of two racing creators one wins with its whole file
        and the other reads the winner's.
        """
        if self._fd is None:
            raise ValueError("pending file is closed")
        if Path(final).parent != self.directory:
            raise ValueError("final name must be in the pending file's directory")
        self._ops.fsync(self._fd)
        self._close_fd()
        try:
            self._ops.link(self.path, final)
            created = True
        except FileExistsError:
            created = False
        self._ops.unlink(self.path)
        self.committed = True
        self._ops.fsync_dir(self.directory)
        return created

    def abort(self) -> None:
        """Close and remove the temp file (no-op after `commit`)."""
        self._close_fd()
        if not self.committed:
            with contextlib.suppress(FileNotFoundError):
                self._ops.unlink(self.path)
            self.committed = True  # nothing left to clean up

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._ops.close(fd)

    def __enter__(self) -> PendingFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and issubclass(exc_type, SimulatedCrash):
            # A crashed process cleans up nothing; only the fd goes away.
            self._close_fd()
            return
        self.abort()


def atomic_write_bytes(
    path: Path, data: bytes, *, mode: int = FILE_MODE, ops: FsOps = DEFAULT_OPS
) -> None:
    """Durably replace the file at ``path`` with ``data`` (temp + fsync + rename + fsync dir).

    Raises:
        FileNotFoundError: if the parent directory does not exist.
        OSError: for other filesystem failures (the temp file is removed).
    """
    path = Path(path)
    with PendingFile(path.parent, mode=mode, ops=ops) as pending:
        pending.write(data)
        pending.commit(path)


def create_file_durably(
    path: Path, data: bytes, *, mode: int = FILE_MODE, ops: FsOps = DEFAULT_OPS
) -> bool:
    """Create the file ``path`` holding ``data`` unless something is there already.

    Unlike `atomic_write_bytes` an existing file is never replaced (`PendingFile.commit_new`):
    the file appears whole, with exactly ``mode`` (whatever the umask), or not at all.

    Returns:
        Whether this call created the file.

    Raises:
        FileNotFoundError: if the parent directory does not exist.
    """
    path = Path(path)
    with PendingFile(path.parent, mode=mode, ops=ops) as pending:
        ops.chmod(pending.path, mode)  # the umask may have dropped bits of ``mode``
        pending.write(data)
        return pending.commit_new(path)


def atomic_write_many(
    directory: Path,
    items: Sequence[tuple[Path, bytes]],
    *,
    mode: int = FILE_MODE,
    ops: FsOps = DEFAULT_OPS,
) -> None:
    """Durably replace the files ``items`` (``(path, data)``, all in ``directory``).

    Each file ends as `atomic_write_bytes` would leave it, but the flushes do not grow
    with the number of files: all are written to pending files first, one ``syncfs``
    makes their data durable (an fsync per file where syncfs is unavailable, or for a
    single file), then they are renamed and the directory is fsynced once. So a name
    appears only with its complete bytes, and everything is durable on return. Not
    atomic as a group: a crash can leave any subset of the files renamed.

    Raises:
        ValueError: a path outside ``directory``.
        FileNotFoundError: ``directory`` does not exist.
        OSError: for other filesystem failures (pending files not yet renamed are removed).
    """
    directory = Path(directory)
    if not _all_in(directory, (final for final, _ in items)):
        raise ValueError(f"every file must be in {directory}")
    if not items:
        return
    written: list[tuple[Path, Path]] = []
    try:
        for final, data in items:
            written.append((_write_pending(directory, data, mode, ops), final))
    except SimulatedCrash:
        raise  # a crashed process cleans up nothing
    except BaseException:
        _remove_pending([pending for pending, _ in written], ops)
        raise
    publish_many(directory, written, ops=ops)


def publish_many(
    directory: Path, items: Sequence[tuple[Path, Path]], *, ops: FsOps = DEFAULT_OPS
) -> None:
    """Durably rename complete pending files onto their final names (``(pending, final)``).

    Steps 2-4 of the protocol for files already written (and closed) in ``directory``:
    one data flush for all of them (`atomic_write_many`'s), every rename, one directory
    fsync. A name appears only once the data behind it is durable; everything is durable
    on return. On a failure, the pending files not yet renamed are removed.

    Raises:
        ValueError: a file outside ``directory``.
        OSError: for filesystem failures.
    """
    directory = Path(directory)
    if not _all_in(directory, (path for pair in items for path in pair)):
        raise ValueError(f"every file must be in {directory}")
    if not items:
        return
    renamed = 0
    try:
        _flush_data(directory, [pending for pending, _ in items], ops)
        for pending, final in items:
            ops.replace(pending, final)
            renamed += 1
    except SimulatedCrash:
        raise  # a crashed process cleans up nothing
    except BaseException:
        _remove_pending([pending for pending, _ in items[renamed:]], ops)
        raise
    ops.fsync_dir(directory)


def _all_in(directory: Path, paths: Iterable[Path | str]) -> bool:
    """Whether every path names an entry of ``directory`` (compared as strings: a batch
    has thousands of paths, and building a `Path` parent of each cost more than the
    rename)."""
    where = os.fspath(directory)
    return all(os.path.dirname(os.fspath(path)) == where for path in paths)


def _remove_pending(paths: Sequence[Path], ops: FsOps) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            ops.unlink(path)


def _write_pending(directory: Path, data: bytes, mode: int, ops: FsOps) -> Path:
    """A closed pending file holding ``data`` (not yet flushed)."""
    path, fd = _create_pending(directory, mode, ops)
    try:
        ops.write(fd, data)
    except BaseException as e:
        if not isinstance(e, SimulatedCrash):
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(path)
        raise
    finally:
        # Closed at once: a batch of thousands must not hold thousands of fds.
        ops.close(fd)
    return path


def _flush_data(directory: Path, paths: Sequence[Path], ops: FsOps) -> None:
    """Make the data of the files ``paths`` (in ``directory``) durable."""
    # A single file is fsynced alone: the same one flush, and it never waits for
    # unrelated dirty data elsewhere in the filesystem as a syncfs does.
    if len(paths) > 1 and ops.syncfs(directory):
        return
    for path in paths:
        ops.fsync_path(path)


#: Same as `atomic_write_bytes` (the name `node.cli` uses for ``--output`` files).
write_file_durably = atomic_write_bytes


def ensure_dir(path: Path, *, ops: FsOps = DEFAULT_OPS) -> None:
    """Create ``path`` and missing parents durably (each new entry's parent is fsynced).

    Raises:
        UnsafePath: if ``path`` exists but is not a directory (or is a symlink).
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{path} exists and is not a directory")
        return
    if path.parent != path:
        ensure_dir(path.parent, ops=ops)
    try:
        ops.mkdir(path, DIR_MODE)
    except FileExistsError:
        # A concurrent creator won; it is responsible for the parent fsync too,
        # but syncing again is cheap and keeps this call's promise unconditional.
        if not path.is_dir() or path.is_symlink():
            raise UnsafePath(f"{path} exists and is not a directory") from None
    ops.fsync_dir(path.parent)


def open_for_read(path: Path) -> BinaryIO:
    """Open a regular file for binary reading without following a symlink.

    Raises:
        FileNotFoundError: if nothing is at ``path``.
        UnsafePath: if ``path`` is a symlink or not a regular file.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        # ELOOP on Linux; some BSDs report EMLINK for O_NOFOLLOW on a symlink.
        if e.errno in (errno.ELOOP, errno.EMLINK):
            raise UnsafePath(f"refusing to follow symlink {path}") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


@contextlib.contextmanager
def locked_dir(
    root: Path,
    lock_name: str,
    thread_lock: contextlib.AbstractContextManager[object],
    *,
    ops: FsOps = DEFAULT_OPS,
) -> Iterator[None]:
    """Hold ``thread_lock`` (a Lock or RLock) and an exclusive flock of ``root/lock_name``.

    The thread lock serializes threads of this process (flock is per open file, so two
    threads would each get it); the flock serializes processes, and the kernel drops it
    when its holder dies.
    """
    with thread_lock:
        ensure_dir(root, ops=ops)
        with FileLock(root / lock_name, mode=FILE_MODE):
            yield


def read_bytes_limited(path: Path, max_size: int) -> bytes | None:
    """Read a whole regular file, or return ``None`` if it is larger than ``max_size``.

    Raises:
        FileNotFoundError: if nothing is at ``path``.
        UnsafePath: if ``path`` is a symlink or not a regular file.
    """
    with open_for_read(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_size:
            return None
        # Read by the real size (a huge max_size must not become a huge buffer);
        # one extra byte detects a file that grew since the fstat.
        data = f.read(size + 1)
    return None if len(data) > max_size else data


def cleanup_pending(
    directory: Path,
    *,
    older_than_s: float = DEFAULT_STALE_PENDING_AGE_S,
    now: float | None = None,
    dry_run: bool = False,
    ops: FsOps = DEFAULT_OPS,
) -> tuple[Path, ...]:
    """Remove ``.pending-*`` files in ``directory`` whose mtime is older than ``older_than_s``.

    Young pending files may belong to a live writer and are left alone.

    Args:
        directory: directory to scan (a missing directory has nothing to clean).
        older_than_s: minimum age in seconds.
        now: the current time (defaults to `time.time()`; tests pass a fixed value).
        dry_run: only report what would be removed.
        ops: the file-operations seam.

    Returns:
        The removed (or, in a dry run, removable) paths, sorted.
    """
    current = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return ()
    for entry in entries:
        if not is_pending_name(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # its writer committed or aborted meanwhile
        if stat.S_ISDIR(st.st_mode):
            continue  # we never create pending directories; not ours to remove
        if current - st.st_mtime < older_than_s:
            continue
        path = Path(entry.path)
        if not dry_run:
            try:
                ops.unlink(path)
            except FileNotFoundError:
                continue
        removed.append(path)
    return tuple(sorted(removed))
