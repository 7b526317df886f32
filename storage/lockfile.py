"""Advisory file locks (``flock``): the one lock helper every package uses.

A `FileLock` is an exclusive (or shared) ``flock`` on one lock file. Why flock rather
than an ``O_EXCL`` lock file: the kernel drops a flock when its holder dies, so a
crashed writer never leaves a stale lock behind, and nobody has to guess whether a
lock's owner is still alive. A flock belongs to an open file description, so two
threads of one process that each open the file exclude each other too; a caller that
must also serialise threads sharing one `FileLock` adds a thread lock (`locked_dir`).

Waiting polls with a non-blocking ``flock`` and an exponential back-off, so a wait can
have a deadline and an ``async`` caller (`FileLock.acquire_async`) never blocks its
event loop. flock needs a local filesystem (not NFS).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Final

__all__ = [
    "LOCK_FILE_MODE",
    "FileLock",
    "file_lock",
    "file_lock_async",
]

#: Permission bits of a new lock file (it holds no data; only its owner opens it).
LOCK_FILE_MODE: Final = 0o600
#: Back-off bounds while a lock is busy.
POLL_MIN_S: Final = 0.0005
POLL_MAX_S: Final = 0.05
_OPEN_FLAGS: Final = (
    os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


class FileLock:
    """An ``flock`` on the file ``path`` (created if missing; its directory must exist).

    Args:
        path: the lock file.
        shared: take a shared lock (many holders) instead of an exclusive one.
        mode: permission bits of a newly created lock file.

    A lock is not re-entrant: acquiring a held `FileLock` again is a `RuntimeError`.
    """

    def __init__(self, path: Path, *, shared: bool = False, mode: int = LOCK_FILE_MODE) -> None:
        self.path = Path(path)
        self.shared = shared
        self._mode = mode
        self._fd: int | None = None

    def __repr__(self) -> str:
        kind = "shared" if self.shared else "exclusive"
        return f"FileLock({str(self.path)!r}, {kind}, held={self.held})"

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free now; ``False`` if another holder has it.

        Raises:
            RuntimeError: the lock is already held by this object.
            OSError: the lock file cannot be opened (missing directory, symlink).
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this FileLock")
        fd = os.open(self.path, _OPEN_FLAGS, self._mode)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for the lock; ``False`` when ``timeout`` seconds passed (``None``: forever).

        Raises:
            RuntimeError / OSError: see `try_acquire`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = POLL_MIN_S
        while not self.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)
        return True

    async def acquire_async(self, timeout: float | None = None) -> bool:
        """`acquire` for asyncio code: waits with ``asyncio.sleep``, never blocking the loop."""
        # Imported here: every storage reader imports this module and asyncio costs about
        # as much as the interpreter's own start (`odf list` must not pay for it).
        import asyncio

        deadline = None if timeout is None else time.monotonic() + timeout
        delay = POLL_MIN_S
        while not self.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)
        return True

    def release(self) -> None:
        """Drop the lock (idempotent). Closing the descriptor is what releases the flock."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float | None = None, shared: bool = False) -> Iterator[bool]:
    """Hold the lock of ``path`` for the ``with`` block; yields whether it was taken.

    With a ``timeout`` the block runs even when the lock stayed busy (it gets
    ``False``), so that callers raise their own error.
    """
    lock = FileLock(path, shared=shared)
    try:
        yield lock.acquire(timeout)
    finally:
        lock.release()


@contextlib.asynccontextmanager
async def file_lock_async(
    path: Path, *, timeout: float | None = None, shared: bool = False
) -> AsyncIterator[bool]:
    """`file_lock` for asyncio code (see `FileLock.acquire_async`)."""
    lock = FileLock(path, shared=shared)
    try:
        yield await lock.acquire_async(timeout)
    finally:
        lock.release()
