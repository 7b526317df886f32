"""Content-addressed object stores: `DiskObjectStore` and its in-memory twin.

An object's name is the SHA3-256 multihash of its bytes, rendered canonically
(``f1620`` + 64 lowercase hex digits, `Multihash.to_multibase`). Stores only ever
derive file names from parsed `Multihash` values, never from caller strings, so a
hostile name cannot reach the filesystem: it fails to parse first (`InvalidHash`).

Both implementations satisfy the `ObjectStore` protocol and pass the same contract
tests (``tests/storage/test_object_store.py``). `ObjectStore`, `RangeReader` and
`storage.refs.RefStore` are the storage seam: the S3 backend (`storage.s3`) implements
them too, and one conformance suite (``tests/storage/s3/test_conformance.py``) runs
over the disk and S3 backends.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Protocol, runtime_checkable

from fbs.errors import InvalidHash
from fbs.multiformats import SHA3_256, Multihash
from storage.errors import CorruptObject, HashMismatch, ObjectNotFound, ObjectTooLarge, UnsafePath
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import (
    DEFAULT_STALE_PENDING_AGE_S,
    OBJECT_MODE,
    PendingFile,
    atomic_write_bytes,
    atomic_write_many,
    cleanup_pending,
    ensure_dir,
    is_pending_name,
    open_for_read,
    pending_name,
    publish_many,
    read_bytes_limited,
)

#: Default cap on one object (data files can be large; blocks use a smaller cap).
DEFAULT_MAX_OBJECT_SIZE: Final = 64 * 2**30
#: Cap on one metadata block object (``blocks/``).
MAX_BLOCK_SIZE: Final = 16 * 2**20
#: Read/write granularity when streaming files in and out.
COPY_CHUNK_SIZE: Final = 2**20


class Readable(Protocol):
    """Anything with a binary ``read(n)``: files, sockets wrapped as files, BytesIO."""

    def read(self, n: int, /) -> bytes:
        """Read up to ``n`` bytes; ``b""`` at the end."""
        ...


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """Size and modification time of a stored object."""

    hash: Multihash
    size: int
    mtime: float


@runtime_checkable
class ObjectStore(Protocol):
    """A store of immutable byte strings named by their SHA3-256 multihash."""

    @property
    def max_object_size(self) -> int:
        """Largest object this store accepts, in bytes."""
        ...

    def put(self, expected: Multihash, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` under ``expected`` (idempotent; refreshes the mtime if present).

        Raises:
            InvalidHash: if ``expected`` is not a SHA3-256 `Multihash`.
            ObjectTooLarge: if ``data`` exceeds `max_object_size`.
            HashMismatch: if ``data`` does not hash to ``expected``.
        """
        ...

    def put_many(self, items: Iterable[tuple[Multihash, bytes | bytearray | memoryview]]) -> None:
        """`put` every ``(expected, data)`` pair, made durable together.

        For many small objects (the blocks of a received chain): on disk the flushes do
        not grow with the number of objects (`fsutil.atomic_write_many`). Every item is
        checked before anything is written, so one bad item stores nothing; objects
        already present are only refreshed, as by `put`. Not atomic as a group: after a
        crash any subset of the objects may be stored, each whole.

        Raises:
            InvalidHash: if an ``expected`` is not a SHA3-256 `Multihash`.
            ObjectTooLarge: if a ``data`` exceeds `max_object_size`.
            HashMismatch: if a ``data`` does not hash to its ``expected``.
        """
        ...

    def put_file(self, expected: Multihash, src: Path | Readable) -> None:
        """Stream a file or reader into the store, hashing while copying.

        Nothing is left behind on failure.

        Raises:
            InvalidHash: if ``expected`` is not a SHA3-256 `Multihash`.
            ObjectTooLarge: if the content exceeds `max_object_size`.
            HashMismatch: if the content does not hash to ``expected``.
        """
        ...

    def adopt(self, expected: Multihash, path: Path, *, digest: bytes) -> None:
        """Give a verified file the name ``expected``: the receive path's last step.

        ``path`` is a quarantine file the caller wrote and hashed (a download, an
        upload): for `DiskObjectStore` one named by its `quarantine_path`. The file is
        made durable and renamed, or removed if the object is already stored (whose
        mtime is then refreshed, as by `put`).

        Raises:
            InvalidHash: if ``expected`` is not a SHA3-256 `Multihash`.
            HashMismatch: if ``digest`` (the caller's SHA3-256 of the file) is not
                ``expected``'s.
            ObjectTooLarge: if the file exceeds `max_object_size`.
            ValueError: if the store cannot adopt ``path`` (see the implementation).
        """
        ...

    def adopt_many(self, items: Iterable[tuple[Multihash, Path, bytes]]) -> None:
        """`adopt` every ``(expected, path, digest)``, made durable together.

        For the many objects of one pull: on disk the flushes do not grow with the number
        of files (`fsutil.publish_many`). Every item is checked before anything is
        renamed, so one bad item adopts nothing (the files stay; the caller removes
        them). Not atomic as a group: after a crash any subset may be stored, each whole.

        Raises:
            What `adopt` raises.
        """
        ...

    def get(self, h: Multihash) -> bytes:
        """The object's bytes, verified against ``h``.

        Raises:
            ObjectNotFound: if absent.
            CorruptObject: if the stored bytes do not hash to ``h``.
        """
        ...

    def open(self, h: Multihash) -> BinaryIO:
        """A binary reader over the object (not verified: hash while reading if needed).

        Raises:
            ObjectNotFound: if absent.
        """
        ...

    def has(self, h: Multihash) -> bool:
        """Whether an object is stored under ``h``."""
        ...

    def __contains__(self, h: object) -> bool: ...

    def size(self, h: Multihash) -> int:
        """Size of the object in bytes.

        Raises:
            ObjectNotFound: if absent.
        """
        ...

    def info(self, h: Multihash) -> ObjectInfo:
        """Size and mtime of the object.

        Raises:
            ObjectNotFound: if absent.
        """
        ...

    def check(self, h: Multihash) -> None:
        """Re-hash the stored object.

        Raises:
            ObjectNotFound: if absent.
            CorruptObject: if its bytes do not hash to ``h``.
        """
        ...

    def iter_hashes(self) -> Iterator[Multihash]:
        """Hashes of all stored objects (no particular order)."""
        ...

    def __iter__(self) -> Iterator[Multihash]: ...

    def delete(self, h: Multihash) -> None:
        """Remove the object.

        Raises:
            ObjectNotFound: if absent.
        """
        ...


@runtime_checkable
class RangeReader(Protocol):
    """A store that reads part of an object (every backend of the storage seam).

    The bytes are not verified (a part cannot be hashed alone): callers that need
    integrity check the whole object (`ObjectStore.check`) or what they derive.
    """

    def read_range(self, h: Multihash, start: int, length: int) -> bytes:
        """Up to ``length`` bytes of object ``h`` from offset ``start`` (fewer at its end).

        Raises:
            ObjectNotFound: if absent.
            ValueError: a negative ``start`` or ``length``.
        """
        ...


def check_range(start: int, length: int) -> None:
    """Raises `ValueError` for a negative range start or length."""
    if start < 0 or length < 0:
        raise ValueError(f"invalid range: start {start}, length {length}")


def require_object_hash(h: object) -> Multihash:
    """Check that ``h`` is a `Multihash` a store can address (SHA3-256).

    Raises:
        InvalidHash: for strings, other types and other hash functions.
    """
    if not isinstance(h, Multihash):
        raise InvalidHash(f"object stores take a Multihash, got {type(h).__name__}")
    if h.code != SHA3_256:
        raise InvalidHash(f"objects are addressed by sha3-256, not code 0x{h.code:x}")
    return h


def parse_object_name(name: str) -> Multihash | None:
    """The hash named by a store file name, or ``None`` unless it is canonical SHA3-256."""
    if not name.startswith("f1620"):
        return None
    try:
        h = Multihash.from_multibase(name)
    except InvalidHash:
        return None
    if h.code != SHA3_256 or h.to_multibase() != name:
        return None
    return h


def check_size(size: int, limit: int) -> None:
    """Raises `ObjectTooLarge` if ``size`` exceeds ``limit``."""
    if size > limit:
        raise ObjectTooLarge(f"object of {size} bytes exceeds the limit of {limit} bytes")


def check_digest(expected: Multihash, digest: bytes) -> None:
    """Raises `HashMismatch` unless ``digest`` is ``expected``'s SHA3-256 digest."""
    if digest != expected.digest:
        actual = Multihash(SHA3_256, digest)
        raise HashMismatch(f"content hashes to {actual}, expected {expected}")


def checked_items(
    items: Iterable[tuple[Multihash, bytes | bytearray | memoryview]], limit: int
) -> list[tuple[Multihash, bytes]]:
    """The items of a `put_many`, each checked as `put` checks it, without repeats.

    Raises:
        InvalidHash / ObjectTooLarge / HashMismatch: as `ObjectStore.put`.
    """
    checked: dict[Multihash, bytes] = {}
    for expected, data in items:
        require_object_hash(expected)
        check_size(len(data), limit)
        check_digest(expected, hashlib.sha3_256(data).digest())
        checked.setdefault(expected, bytes(data))  # same hash, same bytes
    return list(checked.items())


def copy_hashing(src: Readable, sink: Callable[[bytes], object], limit: int) -> bytes:
    """Copy ``src`` into ``sink`` in chunks; returns the SHA3-256 digest.

    Raises:
        ObjectTooLarge: as soon as more than ``limit`` bytes were read.
    """
    hasher = hashlib.sha3_256()
    total = 0
    while chunk := src.read(COPY_CHUNK_SIZE):
        total += len(chunk)
        check_size(total, limit)
        hasher.update(chunk)
        sink(chunk)
    return hasher.digest()


def _put_from(put_stream: Callable[[Readable], None], src: Path | Readable) -> None:
    if isinstance(src, (str, os.PathLike)):
        with open(src, "rb") as f:
            put_stream(f)
    else:
        put_stream(src)


class DiskObjectStore:
    """Objects as files ``<root>/<multibase hash>`` (the kamu ``blocks/``/``data/`` layout).

    Args:
        root: the directory holding the objects (created on the first put).
        max_object_size: the size cap for this store.
        ops: the file-operations seam (tests inject `storage.faults.CrashAt`).
    """

    def __init__(
        self,
        root: Path,
        *,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        ops: FsOps = DEFAULT_OPS,
    ) -> None:
        self.root = Path(root)
        self._max_object_size = max_object_size
        self._ops = ops

    def __repr__(self) -> str:
        return f"DiskObjectStore({str(self.root)!r})"

    @property
    def max_object_size(self) -> int:
        return self._max_object_size

    def path_of(self, h: Multihash) -> Path:
        """The file path of ``h`` (whether or not it exists).

        Raises:
            InvalidHash: if ``h`` is not a SHA3-256 `Multihash`.
        """
        name = require_object_hash(h).to_multibase()
        # Defence in depth: the canonical rendering is [0-9a-f] only, so it can
        # never contain a separator or "..".
        if parse_object_name(name) is None:  # pragma: no cover - impossible by construction
            raise InvalidHash(f"non-canonical object name {name!r}")
        return self.root / name

    # -- writes ---------------------------------------------------------------------

    def put(self, expected: Multihash, data: bytes | bytearray | memoryview) -> None:
        require_object_hash(expected)
        check_size(len(data), self._max_object_size)
        check_digest(expected, hashlib.sha3_256(data).digest())
        path = self.path_of(expected)
        if self._refresh_existing(path, len(data)):
            return
        ensure_dir(self.root, ops=self._ops)
        atomic_write_bytes(path, bytes(data), mode=OBJECT_MODE, ops=self._ops)

    def put_many(self, items: Iterable[tuple[Multihash, bytes | bytearray | memoryview]]) -> None:
        missing: list[tuple[Path, bytes]] = []
        for h, data in checked_items(items, self._max_object_size):
            path = self.path_of(h)
            if not self._refresh_existing(path, len(data)):
                missing.append((path, data))
        if not missing:
            return
        ensure_dir(self.root, ops=self._ops)
        atomic_write_many(self.root, missing, mode=OBJECT_MODE, ops=self._ops)

    def put_file(self, expected: Multihash, src: Path | Readable) -> None:
        require_object_hash(expected)
        _put_from(lambda stream: self._put_stream(expected, stream), src)

    def _put_stream(self, expected: Multihash, src: Readable) -> None:
        ensure_dir(self.root, ops=self._ops)
        # Always copy into a pending file, even when the object exists: the source
        # can be read only once, and verifying it is part of the contract.
        with PendingFile(self.root, mode=OBJECT_MODE, ops=self._ops) as pending:
            digest = copy_hashing(src, pending.write, self._max_object_size)
            check_digest(expected, digest)
            path = self.path_of(expected)
            if self._refresh_existing(path, pending.size):
                return  # the pending copy is removed on exit
            pending.commit(path)

    def quarantine_path(self) -> Path:
        """A fresh quarantine name for `adopt`, in this store's directory (created).

        Nothing exists under it yet; readers ignore it (a ``.pending-*`` name) and
        `cleanup_pending` removes it if its writer dies.
        """
        ensure_dir(self.root, ops=self._ops)
        return self.root / pending_name()

    def adopt(self, expected: Multihash, path: Path, *, digest: bytes) -> None:
        """See `ObjectStore.adopt`; ``path`` must be a `quarantine_path` of this store.

        Every step goes through the seam, in the order of `fsutil`'s protocol: mode,
        fsync of the file, rename, fsync of the directory.

        Raises:
            ValueError: ``path`` is not a quarantine name in this store's directory.
            FileNotFoundError: nothing is at ``path``.
            UnsafePath: ``path`` is not a regular file.
        """
        path, st = self._adoptable(expected, path, digest)
        final = self.path_of(expected)
        if self._refresh_existing(final, st.st_size):
            # Another writer (a concurrent pull) stored it first: ours is a duplicate.
            with contextlib.suppress(FileNotFoundError):
                self._ops.unlink(path)
            return
        self._ops.chmod(path, OBJECT_MODE)
        self._ops.fsync_path(path)
        self._ops.replace(path, final)
        self._ops.fsync_dir(self.root)

    def adopt_many(self, items: Iterable[tuple[Multihash, Path, bytes]]) -> None:
        """See `ObjectStore.adopt_many`; every path a `quarantine_path` of this store.

        The order of `fsutil.publish_many`: every file's mode (unless its writer created
        it with `OBJECT_MODE`: a pull's blocks), one data flush for all, the renames,
        one directory fsync.

        Raises:
            What `adopt` raises.
        """
        checked = [(h, *self._adoptable(h, path, digest)) for h, path, digest in items]
        publish: dict[Path, Path] = {}  # final -> quarantine
        for h, path, st in checked:
            final = self.path_of(h)
            if final in publish or self._refresh_existing(final, st.st_size):
                # Stored already (by another writer, or earlier in this batch).
                with contextlib.suppress(FileNotFoundError):
                    self._ops.unlink(path)
                continue
            if stat.S_IMODE(st.st_mode) != OBJECT_MODE:
                self._ops.chmod(path, OBJECT_MODE)
            publish[final] = path
        publish_many(self.root, [(q, final) for final, q in publish.items()], ops=self._ops)

    def _adoptable(
        self, expected: Multihash, path: Path, digest: bytes
    ) -> tuple[Path, os.stat_result]:
        """``path`` and its ``lstat``, once it may be adopted as ``expected`` (see `adopt`)."""
        require_object_hash(expected)
        check_digest(expected, digest)
        path = Path(path)
        if path.parent != self.root or not is_pending_name(path.name):
            raise ValueError(f"{path} is not a quarantine file of {self.root}")
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path} is not a regular file")
        check_size(st.st_size, self._max_object_size)
        return path, st

    def _refresh_existing(self, path: Path, size: int) -> bool:
        """If a sound copy of the object is present, refresh its mtime and return True.

        The mtime refresh protects the object from a concurrent GC whose grace
        period is measured from the mtime: without it, a writer that found the
        object present could see it pruned before it references it.
        """
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            # A symlink, or a copy truncated by a crash: let the atomic replace heal it.
            return False
        try:
            self._ops.touch(path)
        except FileNotFoundError:
            return False  # pruned between lstat and touch: write it again
        return True

    def delete(self, h: Multihash) -> None:
        # No directory fsync: a delete undone by a power failure is harmless (the
        # object is immutable and a later GC removes it again).
        try:
            self._ops.unlink(self.path_of(h))
        except FileNotFoundError:
            raise ObjectNotFound(f"no object {h}") from None

    def cleanup_pending(
        self,
        *,
        older_than_s: float = DEFAULT_STALE_PENDING_AGE_S,
        now: float | None = None,
        dry_run: bool = False,
    ) -> tuple[Path, ...]:
        """Remove temp files abandoned by crashed writers (see `fsutil.cleanup_pending`)."""
        return cleanup_pending(
            self.root, older_than_s=older_than_s, now=now, dry_run=dry_run, ops=self._ops
        )

    # -- reads ----------------------------------------------------------------------

    def get(self, h: Multihash) -> bytes:
        path = self.path_of(h)
        try:
            data = read_bytes_limited(path, self._max_object_size)
        except FileNotFoundError:
            raise ObjectNotFound(f"no object {h}") from None
        if data is None:
            raise CorruptObject(f"object {h} is larger than the store limit")
        if hashlib.sha3_256(data).digest() != h.digest:
            raise CorruptObject(f"stored object {h} does not match its hash")
        return data

    def open(self, h: Multihash) -> BinaryIO:
        try:
            return open_for_read(self.path_of(h))
        except FileNotFoundError:
            raise ObjectNotFound(f"no object {h}") from None

    def read_range(self, h: Multihash, start: int, length: int) -> bytes:
        check_range(start, length)
        with self.open(h) as f:
            f.seek(start)
            return f.read(length)

    def check(self, h: Multihash) -> None:
        with self.open(h) as f:
            try:
                digest = copy_hashing(f, lambda _chunk: None, self._max_object_size)
            except ObjectTooLarge:
                raise CorruptObject(f"object {h} is larger than the store limit") from None
        if digest != h.digest:
            raise CorruptObject(f"stored object {h} does not match its hash")

    def _stat(self, h: Multihash) -> os.stat_result:
        path = self.path_of(h)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise ObjectNotFound(f"no object {h}") from None
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path} is not a regular file")
        return st

    def has(self, h: Multihash) -> bool:
        try:
            self._stat(h)
        except (ObjectNotFound, UnsafePath):
            return False
        return True

    def __contains__(self, h: object) -> bool:
        return isinstance(h, Multihash) and h.code == SHA3_256 and self.has(h)

    def size(self, h: Multihash) -> int:
        return self._stat(h).st_size

    def info(self, h: Multihash) -> ObjectInfo:
        st = self._stat(h)
        return ObjectInfo(h, st.st_size, st.st_mtime)

    def iter_hashes(self) -> Iterator[Multihash]:
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return
        for entry in entries:
            # Pending files, lock files and foreign names are never objects.
            h = parse_object_name(entry.name)
            if h is not None and entry.is_file(follow_symlinks=False):
                yield h

    def __iter__(self) -> Iterator[Multihash]:
        return self.iter_hashes()


@dataclass(frozen=True, slots=True)
class _MemoryEntry:
    data: bytes
    mtime: float


class MemoryObjectStore:
    """The in-memory twin of `DiskObjectStore` (same contract, no I/O).

    Args:
        max_object_size: the size cap for this store.
        clock: source of mtimes (tests inject a fake clock for GC).
    """

    def __init__(
        self,
        *,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._max_object_size = max_object_size
        self._clock = clock
        self._objects: dict[Multihash, _MemoryEntry] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryObjectStore({len(self._objects)} objects)"

    @property
    def max_object_size(self) -> int:
        return self._max_object_size

    def put(self, expected: Multihash, data: bytes | bytearray | memoryview) -> None:
        require_object_hash(expected)
        check_size(len(data), self._max_object_size)
        check_digest(expected, hashlib.sha3_256(data).digest())
        with self._lock:
            self._objects[expected] = _MemoryEntry(bytes(data), self._clock())

    def put_many(self, items: Iterable[tuple[Multihash, bytes | bytearray | memoryview]]) -> None:
        checked = checked_items(items, self._max_object_size)
        with self._lock:
            now = self._clock()
            for h, data in checked:
                self._objects[h] = _MemoryEntry(data, now)

    def put_file(self, expected: Multihash, src: Path | Readable) -> None:
        require_object_hash(expected)

        def put_stream(stream: Readable) -> None:
            buf = io.BytesIO()
            check_digest(expected, copy_hashing(stream, buf.write, self._max_object_size))
            with self._lock:
                self._objects[expected] = _MemoryEntry(buf.getvalue(), self._clock())

        _put_from(put_stream, src)

    def adopt(self, expected: Multihash, path: Path, *, digest: bytes) -> None:
        """See `ObjectStore.adopt`: the file's bytes are read (and checked), then removed."""
        require_object_hash(expected)
        check_digest(expected, digest)
        with open(path, "rb") as f:
            self.put_file(expected, f)
        os.unlink(path)

    def adopt_many(self, items: Iterable[tuple[Multihash, Path, bytes]]) -> None:
        """See `ObjectStore.adopt_many`: every item checked, then each one adopted."""
        checked = list(items)
        for expected, _path, digest in checked:
            require_object_hash(expected)
            check_digest(expected, digest)
        for expected, path, digest in checked:
            self.adopt(expected, path, digest=digest)

    def _entry(self, h: Multihash) -> _MemoryEntry:
        require_object_hash(h)
        try:
            return self._objects[h]
        except KeyError:
            raise ObjectNotFound(f"no object {h}") from None

    def get(self, h: Multihash) -> bytes:
        data = self._entry(h).data
        if hashlib.sha3_256(data).digest() != h.digest:  # pragma: no cover - only via tampering
            raise CorruptObject(f"stored object {h} does not match its hash")
        return data

    def open(self, h: Multihash) -> BinaryIO:
        return io.BytesIO(self._entry(h).data)

    def read_range(self, h: Multihash, start: int, length: int) -> bytes:
        check_range(start, length)
        return self._entry(h).data[start : start + length]

    def check(self, h: Multihash) -> None:
        self.get(h)

    def has(self, h: Multihash) -> bool:
        return require_object_hash(h) in self._objects

    def __contains__(self, h: object) -> bool:
        return isinstance(h, Multihash) and h in self._objects

    def size(self, h: Multihash) -> int:
        return len(self._entry(h).data)

    def info(self, h: Multihash) -> ObjectInfo:
        entry = self._entry(h)
        return ObjectInfo(h, len(entry.data), entry.mtime)

    def iter_hashes(self) -> Iterator[Multihash]:
        with self._lock:
            return iter(list(self._objects))

    def __iter__(self) -> Iterator[Multihash]:
        return self.iter_hashes()

    def delete(self, h: Multihash) -> None:
        with self._lock:
            if self._objects.pop(require_object_hash(h), None) is None:
                raise ObjectNotFound(f"no object {h}")
