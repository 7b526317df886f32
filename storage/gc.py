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
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fbs.multiformats import Multihash
from storage.errors import ObjectNotFound
from storage.fsutil import DEFAULT_STALE_PENDING_AGE_S
from storage.object_store import DiskObjectStore, ObjectStore

#: Unreferenced objects younger than this (seconds since mtime) are kept.
DEFAULT_GC_GRACE_S: Final = 24 * 3600.0


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
