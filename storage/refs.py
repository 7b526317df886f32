"""Named refs with compare-and-swap: `DiskRefStore` and its in-memory twin.

A ref file (kamu layout: ``refs/head``) holds the canonical multibase text of a
block hash with no trailing newline. Readers parse it strictly (`InvalidRef`).

The only way to move a ref is `set_if_equals` / `delete_if_equals`: every higher
operation writes its immutable objects first, then swaps the ref.

Cross-process CAS on disk: the writer takes an exclusive ``fcntl.flock`` on
``refs/.<name>.lock``, re-reads the ref *under the lock*, compares, then writes the
new value with the durable temp + fsync + rename + fsync-dir protocol. Why flock
rather than an ``O_EXCL`` lock file: the kernel releases a flock when its holder
dies, so a crashed writer can never leave a stale lock that needs age or pid
heuristics (which can also break the lock of a live, merely slow, writer). The
lock file carries no data and is never deleted (deleting it would let two writers
lock two different inodes). Readers take no lock: the rename makes every read see
the old or the new value. flock needs a local filesystem (not NFS).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from fbs.errors import InvalidHash
from fbs.multiformats import MAX_MULTIBASE_LEN, Multihash
from storage.errors import (
    InvalidRef,
    InvalidRefName,
    RefCASFailed,
    RefLockTimeout,
    RefNotFound,
    UnsafePath,
)
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import FILE_MODE, atomic_write_bytes, ensure_dir, read_bytes_limited
from storage.lockfile import FileLock

#: The dataset head ref.
HEAD: Final = "head"
#: Longest ref name accepted.
MAX_REF_NAME_LEN: Final = 64
#: Allowed ref names: ``head`` and other lowercase ``[a-z0-9-]`` names, not starting with ``-``.
REF_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9-]*")
#: Largest ref file a reader accepts.
MAX_REF_FILE_SIZE: Final = MAX_MULTIBASE_LEN
#: How long a writer waits for the ref lock before `RefLockTimeout`.
DEFAULT_LOCK_TIMEOUT_S: Final = 30.0


def validate_ref_name(name: object) -> str:
    """Return ``name`` if it is an allowed ref name.

    Raises:
        InvalidRefName: for anything else (non-strings, ``..``, slashes, upper case, ...).
    """
    if not isinstance(name, str) or len(name) > MAX_REF_NAME_LEN or not REF_NAME_RE.fullmatch(name):
        raise InvalidRefName(f"invalid ref name {name!r}")
    return name


def _require_hash(value: object, what: str) -> Multihash:
    if not isinstance(value, Multihash):
        raise InvalidHash(f"{what} must be a Multihash, got {type(value).__name__}")
    return value


def encode_ref(value: Multihash) -> bytes:
    """The ref file content for ``value``: canonical multibase, no newline."""
    return value.to_multibase().encode("ascii")


def parse_ref(data: bytes) -> Multihash:
    """Parse ref file content strictly (canonical multibase, no whitespace).

    Raises:
        InvalidRef: if ``data`` is not exactly a canonical multibase hash.
    """
    try:
        text = data.decode("ascii")
        value = Multihash.from_multibase(text)
    except (UnicodeDecodeError, InvalidHash) as e:
        raise InvalidRef(f"ref content is not a hash: {data[:80]!r}: {e}") from None
    if value.to_multibase() != text:
        raise InvalidRef(f"ref content is not canonical: {data[:80]!r}")
    return value


def _cas_failed(name: str, current: Multihash | None, old: Multihash | None) -> RefCASFailed:
    return RefCASFailed(f"ref {name!r} is {current}, expected {old}")


@runtime_checkable
class RefStore(Protocol):
    """Named pointers to hashes, changed only by compare-and-swap."""

    def get(self, name: str) -> Multihash:
        """The ref's value.

        Raises:
            InvalidRefName: for a bad name.
            RefNotFound: if the ref does not exist.
            InvalidRef: if the stored value is not a valid hash.
        """
        ...

    def get_or_none(self, name: str) -> Multihash | None:
        """The ref's value, or ``None`` if it does not exist.

        Raises:
            InvalidRefName: for a bad name.
            InvalidRef: if the stored value is not a valid hash.
        """
        ...

    def set_if_equals(self, name: str, old: Multihash | None, new: Multihash) -> None:
        """Set the ref to ``new`` if it currently equals ``old`` (``None``: must not exist).

        Raises:
            InvalidRefName: for a bad name.
            RefCASFailed: if the current value differs from ``old``.
            InvalidRef: if the stored value is not a valid hash.
            RefLockTimeout: if another writer holds the ref for too long.
        """
        ...

    def delete_if_equals(self, name: str, old: Multihash) -> None:
        """Delete the ref if it currently equals ``old``.

        Raises:
            InvalidRefName: for a bad name.
            RefCASFailed: if the ref is absent or differs from ``old``.
            RefLockTimeout: if another writer holds the ref for too long.
        """
        ...

    def names(self) -> list[str]:
        """Sorted names of the existing refs."""
        ...


class DiskRefStore:
    """Refs as files ``<refs_dir>/<name>`` (see the module docstring for the locking).

    Args:
        refs_dir: the directory holding ref files (created on the first write).
        ops: the file-operations seam.
        lock_timeout_s: how long a writer waits for a busy ref lock.
    """

    def __init__(
        self,
        refs_dir: Path,
        *,
        ops: FsOps = DEFAULT_OPS,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> None:
        self.refs_dir = Path(refs_dir)
        self._ops = ops
        self._lock_timeout_s = lock_timeout_s

    def __repr__(self) -> str:
        return f"DiskRefStore({str(self.refs_dir)!r})"

    def path_of(self, name: str) -> Path:
        """The file of ref ``name``.

        Raises:
            InvalidRefName: for a bad name.
        """
        return self.refs_dir / validate_ref_name(name)

    def get(self, name: str) -> Multihash:
        value = self.get_or_none(name)
        if value is None:
            raise RefNotFound(f"ref {name!r} does not exist")
        return value

    def get_or_none(self, name: str) -> Multihash | None:
        path = self.path_of(name)
        try:
            data = read_bytes_limited(path, MAX_REF_FILE_SIZE)
        except FileNotFoundError:
            return None
        except UnsafePath as e:
            raise InvalidRef(f"ref {name!r}: {e}") from None
        if data is None:
            raise InvalidRef(f"ref {name!r} is larger than {MAX_REF_FILE_SIZE} bytes")
        return parse_ref(data)

    def set_if_equals(self, name: str, old: Multihash | None, new: Multihash) -> None:
        path = self.path_of(name)
        _require_hash(new, "new ref value")
        if old is not None:
            _require_hash(old, "expected ref value")
        with self._locked(name):
            # Re-read while holding the lock: the value read before locking (if any)
            # may already be stale.
            current = self.get_or_none(name)
            if current != old:
                raise _cas_failed(name, current, old)
            if current == new:
                return
            atomic_write_bytes(path, encode_ref(new), mode=FILE_MODE, ops=self._ops)

    def delete_if_equals(self, name: str, old: Multihash) -> None:
        path = self.path_of(name)
        _require_hash(old, "expected ref value")
        with self._locked(name):
            current = self.get_or_none(name)
            if current != old:
                raise _cas_failed(name, current, old)
            self._ops.unlink(path)
            self._ops.fsync_dir(self.refs_dir)

    def names(self) -> list[str]:
        try:
            entries = list(os.scandir(self.refs_dir))
        except FileNotFoundError:
            return []
        return sorted(
            e.name
            for e in entries
            if len(e.name) <= MAX_REF_NAME_LEN
            and REF_NAME_RE.fullmatch(e.name)
            and e.is_file(follow_symlinks=False)
        )

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        """Hold the exclusive flock of ref ``name``.

        Raises:
            RefLockTimeout: if it stays busy for longer than the lock timeout.
        """
        ensure_dir(self.refs_dir, ops=self._ops)
        # The kernel releases the flock when the descriptor closes: also on a
        # SimulatedCrash, which models the kernel releasing it when a process dies.
        lock = FileLock(self.refs_dir / f".{name}.lock", mode=FILE_MODE)
        if not lock.acquire(self._lock_timeout_s):
            raise RefLockTimeout(f"ref {name!r} stayed locked for {self._lock_timeout_s} s")
        try:
            yield
        finally:
            lock.release()


class MemoryRefStore:
    """The in-memory twin of `DiskRefStore` (thread-safe, same contract)."""

    def __init__(self) -> None:
        self._refs: dict[str, Multihash] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryRefStore({self._refs!r})"

    def get(self, name: str) -> Multihash:
        value = self.get_or_none(name)
        if value is None:
            raise RefNotFound(f"ref {name!r} does not exist")
        return value

    def get_or_none(self, name: str) -> Multihash | None:
        return self._refs.get(validate_ref_name(name))

    def set_if_equals(self, name: str, old: Multihash | None, new: Multihash) -> None:
        validate_ref_name(name)
        _require_hash(new, "new ref value")
        if old is not None:
            _require_hash(old, "expected ref value")
        with self._lock:
            current = self._refs.get(name)
            if current != old:
                raise _cas_failed(name, current, old)
            self._refs[name] = new

    def delete_if_equals(self, name: str, old: Multihash) -> None:
        validate_ref_name(name)
        _require_hash(old, "expected ref value")
        with self._lock:
            current = self._refs.get(name)
            if current != old:
                raise _cas_failed(name, current, old)
            del self._refs[name]

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._refs)
