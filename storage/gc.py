"""Garbage collection of unreferenced objects.

The caller computes the set of referenced hashes (for example every block reachable
from ``refs/head`` and every data/checkpoint file those blocks name); this module
deletes the rest of one store.

Concurrency: a writer stores its objects first and moves the ref afterwards, so an
object can be unreferenced for a moment while still being needed. Objects younger
than the grace period (by mtime) are therefore kept. `ObjectStore.put` refreshes
the mtime of an object it finds already present, so re-using an old unreferenced
object also restarts its grace period. A writer must finish its commit within the
grace period after its last put; the default is generous for that reason.

Temporary files: writers create ``.pending-*`` files (`storage.fsutil.PendingFile`)
next to their final name and rename them at commit; a writer killed before the
rename (kill -9, power loss) leaves one behind. Writers hold no lock on these files,
but every write refreshes the mtime, so a file untouched for longer than
`DEFAULT_STALE_PENDING_AGE_S` (1 hour) cannot belong to a live writer (a write that
stalls for an hour has failed anyway: its rename would land after the ref moved on,
and a put is retried by the next ingest). `find_temp_files` lists them with their
age (``odf verify`` reports them as warnings), `collect_garbage` and
``Workspace.gc`` remove the stale ones.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fbs.multiformats import Multihash
from storage.errors import ObjectNotFound
from storage.fsutil import DEFAULT_STALE_PENDING_AGE_S, is_pending_name
from storage.object_store import DiskObjectStore, ObjectStore

#: Unreferenced objects younger than this (seconds since mtime) are kept: one hour.
#: A writer has this long from its last put to move the ref. One hour is the age at
#: which a ``.pending-*`` file is stale (`DEFAULT_STALE_PENDING_AGE_S`: a write silent
#: that long has failed) and the lifetime of the presigned upload URLs a node hands out
#: (`storage.s3.presign`): an upload may land until its URL expires, so a shorter
#: period could delete what a pusher is still allowed to send. ``odf gc
#: --grace-period`` changes it for one run.
DEFAULT_GC_GRACE_S: Final = 3600.0


@dataclass(frozen=True, slots=True)
class TempFile:
    """A ``.pending-*`` file found by `find_temp_files`.

    Attributes:
        path: the file.
        age_s: seconds since its last modification.
        stale: older than the threshold given to `find_temp_files` (no live writer).
    """

    path: Path
    age_s: float
    stale: bool


def find_temp_files(
    directories: Iterable[Path],
    *,
    older_than_s: float = DEFAULT_STALE_PENDING_AGE_S,
    now: float | None = None,
) -> tuple[TempFile, ...]:
    """Every ``.pending-*`` regular file directly inside ``directories`` (missing ones skipped).

    Never raises for an unreadable directory or a file that vanished meanwhile (its
    writer committed or aborted); such entries are simply not listed.
    """
    current = time.time() if now is None else now
    found: list[TempFile] = []
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not is_pending_name(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            age = current - st.st_mtime
            found.append(TempFile(Path(entry.path), age, age >= older_than_s))
    return tuple(sorted(found, key=lambda t: t.path))


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a GC run removed (or, in a dry run, would remove).

    Attributes:
        deleted: unreferenced objects removed (would be removed, if ``dry_run``).
        kept_recent: unreferenced objects kept because they are inside the grace period.
        referenced: number of stored objects that are referenced.
        bytes_freed: total size of ``deleted``.
        pending_removed: stale temp files removed (disk stores only).
        dry_run: whether nothing was actually removed.
    """

    deleted: tuple[Multihash, ...]
    kept_recent: tuple[Multihash, ...]
    referenced: int
    bytes_freed: int
    pending_removed: tuple[Path, ...]
    dry_run: bool


def collect_garbage(
    store: ObjectStore,
    referenced: Collection[Multihash],
    *,
    grace_period_s: float = DEFAULT_GC_GRACE_S,
    pending_age_s: float = DEFAULT_STALE_PENDING_AGE_S,
    dry_run: bool = False,
    now: float | None = None,
) -> GcReport:
    """Delete the objects of ``store`` that are not in ``referenced``.

    Args:
        store: the store to clean.
        referenced: hashes that must survive (a set is fastest).
        grace_period_s: unreferenced objects with an mtime newer than this are kept.
        pending_age_s: temp files older than this are removed (disk stores).
        dry_run: report without deleting.
        now: the current time (defaults to `time.time()`; tests pass a fixed value).

    Returns:
        A `GcReport`; hashes in it are sorted.
    """
    current = time.time() if now is None else now
    keep = referenced if isinstance(referenced, (set, frozenset)) else frozenset(referenced)
    deleted: list[Multihash] = []
    recent: list[Multihash] = []
    referenced_count = 0
    freed = 0
    for h in list(store.iter_hashes()):
        if h in keep:
            referenced_count += 1
            continue
        try:
            info = store.info(h)
        except ObjectNotFound:
            continue  # removed concurrently
        if current - info.mtime < grace_period_s:
            recent.append(h)
            continue
        if not dry_run:
            try:
                store.delete(h)
            except ObjectNotFound:
                continue
        deleted.append(h)
        freed += info.size
    pending: tuple[Path, ...] = ()
    if isinstance(store, DiskObjectStore):
        pending = store.cleanup_pending(older_than_s=pending_age_s, now=current, dry_run=dry_run)
    return GcReport(
        deleted=tuple(sorted(deleted)),
        kept_recent=tuple(sorted(recent)),
        referenced=referenced_count,
        bytes_freed=freed,
        pending_removed=pending,
        dry_run=dry_run,
    )
