"""Verified reads of data slices and checkpoints.

Nothing hands a reader (`odf tail`/`export`, the Python API, `odf sql`'s staging, an
engine request's inputs) the bytes of a slice or checkpoint before they were checked
against the metadata: the size the block declares and the physical (SHA3-256) hash the
object is named by. A mismatch is a `DamagedObject` naming the object and ``odf verify``;
a missing file is `MissingObject` (an `ObjectNotFound` that marks damage too).

Cost: an object is hashed once, then remembered by its *stamp* -- path, inode, size,
``mtime_ns`` and ``ctime_ns`` (``ctime`` cannot be set back by ``utime``; a file swapped
in by rename has another inode; an edit in place changes ``mtime``/``ctime``). Later reads
of an unchanged file cost one ``lstat``. Where the whole object is read anyway
(`iter_slice_sources`, used by ``to_arrow``), a first read hashes the bytes while
reading them and the caller parses those very bytes: no second pass, no window
between check and use. The readers that walk a chain to find its slices and check them
here are `storage.reads`'s.

Stamps are kept in a process-wide dict and, for a dataset opened from a workspace, in a
persistent record ``.odf/cache/verified/<did>.json`` (next to the chain-state cache):
``{"version": 1, "objects": {"<absolute path>": [ino, size, mtime_ns, ctime_ns]}}``,
written atomically (tmp + rename) after new objects were verified, merged with what is on
disk and pruned of files that are gone. Losing it (or a concurrent writer winning) only
costs a re-hash. The record is a cache in the workspace like the others: whoever can edit
it can edit the objects too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fbs.multiformats import Multihash
from storage.errors import DamagedObject, MissingObject, UnsafePath
from storage.fsutil import open_for_read

__all__ = [
    "RECORD_DIR",
    "SliceSource",
    "VerifiedObjects",
    "verified_checkpoint_path",
    "verified_object_path",
]

#: Directory under ``.odf/cache/`` holding the per-dataset records.
RECORD_DIR: Final = "verified"
RECORD_VERSION: Final = 1
_CHUNK: Final = 1 << 20

Stamp = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns

_SEEN: dict[str, Stamp] = {}
_SEEN_LOCK = threading.Lock()


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def forget_all() -> None:
    """Drop the process-wide stamps (tests and benchmarks measure cold reads with it)."""
    with _SEEN_LOCK:
        _SEEN.clear()


def forget_under(directory: Path) -> None:
    """Drop the process-wide stamps of files under ``directory`` (a deleted dataset)."""
    prefix = os.path.join(os.path.abspath(directory), "")
    with _SEEN_LOCK:
        for key in [k for k in _SEEN if k.startswith(prefix)]:
            del _SEEN[key]


@dataclass(frozen=True, slots=True)
class SliceSource:
    """One slice to read: its file, and its bytes when they were just read and hashed."""

    hash: Multihash
    path: Path
    data: bytes | None


class VerifiedObjects:
    """Checks objects against their metadata and remembers the verified ones.

    Args:
        record: the persistent record file (``None``: this process only).
    """

    def __init__(self, record: Path | None = None) -> None:
        self.record = record
        self._loaded = record is None
        self._dirty = False
        self._mine: dict[str, Stamp] = {}  # stamps of this dataset's objects
        self._lock = threading.Lock()

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        assert self.record is not None
        self._mine = _read_record(self.record)
        with _SEEN_LOCK:
            for key, stamp in self._mine.items():
                _SEEN.setdefault(key, stamp)

    def check(
        self, root: Path, kind: str, h: Multihash, size: int | None, *, keep: bool = False
    ) -> bytes | None:
        """Verify the object ``h`` of the store at ``root``.

        Returns its bytes if ``keep`` and they had to be read (not remembered), else None.

        Raises:
            MissingObject: no file for ``h`` (an `ObjectNotFound`).
            DamagedObject: wrong size, wrong hash, or not a regular file.
        """
        path = root / h.to_multibase()
        key = os.path.abspath(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise MissingObject(
                f"{kind} object {h} is missing ({path}); run `odf verify --integrity`"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise DamagedObject(kind, h, path, "not a regular file")
        if size is not None and st.st_size != size:
            raise DamagedObject(kind, h, path, f"{st.st_size} bytes, the metadata says {size}")
        with self._lock:
            self._load()
        with _SEEN_LOCK:
            known = _SEEN.get(key)
        if known == _stamp(st):
            return None
        data = self._hash(path, kind, h, size, key, keep)
        return data

    def _hash(
        self, path: Path, kind: str, h: Multihash, size: int | None, key: str, keep: bool
    ) -> bytes | None:
        try:
            f = open_for_read(path)
        except FileNotFoundError:
            raise MissingObject(
                f"{kind} object {h} is missing ({path}); run `odf verify --integrity`"
            ) from None
        except UnsafePath:
            raise DamagedObject(kind, h, path, "not a regular file") from None
        with f:
            before = _stamp(os.fstat(f.fileno()))  # taken before reading: a later edit misses
            hasher = hashlib.sha3_256()
            parts: list[bytes] = []
            total = 0
            while chunk := f.read(_CHUNK):
                total += len(chunk)
                if size is not None and total > size:
                    raise DamagedObject(kind, h, path, f"more than the {size} bytes declared")
                hasher.update(chunk)
                if keep:
                    parts.append(chunk)
        if size is not None and total != size:
            raise DamagedObject(kind, h, path, f"{total} bytes, the metadata says {size}")
        if hasher.digest() != h.digest:
            actual = Multihash(h.code, hasher.digest())
            raise DamagedObject(kind, h, path, f"its bytes hash to {actual}")
        with _SEEN_LOCK:
            _SEEN[key] = before
        with self._lock:
            if self.record is not None:
                self._mine[key] = before
                self._dirty = True
        return b"".join(parts) if keep else None

    def flush(self) -> None:
        """Persist newly verified stamps (best effort: a failure only costs a re-hash)."""
        with self._lock:
            if self.record is None or not self._dirty:
                self._dirty = False
                return
            self._dirty = False
            record = self.record
            mine = dict(self._mine)
        merged = _read_record(record)
        merged.update(mine)
        live = {k: v for k, v in merged.items() if _still_there(k, v)}
        tmp = record.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            body = {"version": RECORD_VERSION, "objects": {k: list(v) for k, v in live.items()}}
            tmp.write_text(json.dumps(body, separators=(",", ":")))
            os.replace(tmp, record)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _still_there(key: str, stamp: Stamp) -> bool:
    try:
        return _stamp(os.lstat(key)) == stamp
    except OSError:
        return False


def _read_record(path: Path) -> dict[str, Stamp]:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(body, dict) or body.get("version") != RECORD_VERSION:
        return {}
    objects = body.get("objects")
    if not isinstance(objects, dict):
        return {}
    out: dict[str, Stamp] = {}
    for k, v in objects.items():
        ok = isinstance(k, str) and isinstance(v, list) and len(v) == 4
        if ok and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            out[k] = (v[0], v[1], v[2], v[3])
    return out


def record_path_for(state_cache: Path | None) -> Path | None:
    """The verified-objects record next to a dataset's chain-state cache file."""
    if state_cache is None:
        return None
    return state_cache.parent.parent / RECORD_DIR / state_cache.name


_MEMORY_ONLY = VerifiedObjects(None)


def verified_object_path(root: Path, kind: str, h: Multihash, size: int | None) -> Path:
    """The file of object ``h`` in the store at ``root``, checked (size may be unknown).

    For callers that only have a store directory (an engine request's input list):
    stamps are remembered in this process only.

    Raises:
        MissingObject / DamagedObject: see `VerifiedObjects.check`.
    """
    _MEMORY_ONLY.check(root, kind, h, size)
    return root / h.to_multibase()


def verified_checkpoint_path(root: Path, h: Multihash, size: int | None = None) -> Path:
    """`verified_object_path` for a checkpoint."""
    return verified_object_path(root, "checkpoint", h, size)
