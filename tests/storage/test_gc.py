"""GC tests on both store implementations (mtimes controlled, no sleeps)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from fbs.multiformats import Multihash
from storage.fsutil import pending_name
from storage.gc import collect_garbage
from storage.object_store import DiskObjectStore, MemoryObjectStore, ObjectStore

T0 = 1_000_000.0
GRACE = 3600.0
NOW = T0 + 2 * GRACE


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _store(kind: str, tmp_path: Path, clock: Clock) -> ObjectStore:
    if kind == "disk":
        return DiskObjectStore(tmp_path / "objects")
    return MemoryObjectStore(clock=clock)


def _put_at(store: ObjectStore, clock: Clock, data: bytes, mtime: float) -> Multihash:
    h = Multihash.sha3_256(data)
    clock.t = mtime
    store.put(h, data)
    if isinstance(store, DiskObjectStore):
        os.utime(store.path_of(h), (mtime, mtime), follow_symlinks=False)
    return h


@pytest.fixture(params=["disk", "memory"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ObjectStore, Clock]:
    clock = Clock(T0)
    return _store(request.param, tmp_path, clock), clock


def test_gc_deletes_only_old_unreferenced(setup: tuple[ObjectStore, Clock]) -> None:
    store, clock = setup
    kept = _put_at(store, clock, b"referenced", T0)
    old = _put_at(store, clock, b"old garbage!", T0)
    young = _put_at(store, clock, b"young garbage", NOW - 10)
    report = collect_garbage(store, {kept}, grace_period_s=GRACE, now=NOW)
    assert report.deleted == (old,)
    assert report.kept_recent == (young,)
    assert report.referenced == 1
    assert report.bytes_freed == len(b"old garbage!")
    assert not report.dry_run
    assert sorted(store) == sorted([kept, young])
    assert store.get(kept) == b"referenced"


def test_gc_dry_run_changes_nothing(setup: tuple[ObjectStore, Clock]) -> None:
    store, clock = setup
    a = _put_at(store, clock, b"a", T0)
    b = _put_at(store, clock, b"bb", T0)
    dry = collect_garbage(store, [], grace_period_s=GRACE, now=NOW, dry_run=True)
    assert dry.dry_run
    assert set(dry.deleted) == {a, b}
    assert dry.bytes_freed == 3
    assert sorted(store) == sorted([a, b])
    real = collect_garbage(store, [], grace_period_s=GRACE, now=NOW)
    assert real.deleted == dry.deleted
    assert list(store) == []


def test_gc_refreshed_object_survives(setup: tuple[ObjectStore, Clock]) -> None:
    """A put of an existing old object restarts its grace period (writer/GC race)."""
    store, clock = setup
    h = _put_at(store, clock, b"reused", T0)
    clock.t = NOW
    store.put(h, b"reused")  # refreshes the mtime
    report = collect_garbage(store, set(), grace_period_s=GRACE, now=NOW)
    assert report.deleted == ()
    assert report.kept_recent == (h,)
    assert store.has(h)


def test_gc_empty_store(setup: tuple[ObjectStore, Clock]) -> None:
    store, _ = setup
    report = collect_garbage(store, set(), now=NOW)
    assert (report.deleted, report.kept_recent, report.referenced) == ((), (), 0)


def test_gc_report_is_frozen(setup: tuple[ObjectStore, Clock]) -> None:
    store, _ = setup
    report = collect_garbage(store, set(), now=NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.dry_run = True  # type: ignore[misc]


def test_gc_removes_stale_pending_files(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path)
    store.put(Multihash.sha3_256(b"x"), b"x")
    stale = tmp_path / pending_name()
    stale.write_bytes(b"abandoned")
    os.utime(stale, (T0, T0))
    live = tmp_path / pending_name()
    live.write_bytes(b"in progress")
    os.utime(live, (NOW - 1, NOW - 1))
    dry = collect_garbage(
        store, {Multihash.sha3_256(b"x")}, pending_age_s=GRACE, now=NOW, dry_run=True
    )
    assert dry.pending_removed == (stale,)
    assert stale.exists()
    report = collect_garbage(store, {Multihash.sha3_256(b"x")}, pending_age_s=GRACE, now=NOW)
    assert report.pending_removed == (stale,)
    assert not stale.exists()
    assert live.exists()
    assert report.deleted == ()
