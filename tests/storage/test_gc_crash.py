"""A writer killed (SIGKILL, a real process) after its uploads, before its ref moves.

The head stays where it was; what the writer stored is unreferenced. GC keeps it
inside the grace period (the writer could still be alive and about to commit) and
deletes it after. The same on S3: `tests.storage.s3.test_s3_gc_crash`.
"""

from __future__ import annotations

from pathlib import Path

from storage.gc import DEFAULT_GC_GRACE_S
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace
from tests.storage.gc_crash_writer import run_until_uploaded


def _data_files(ws: Workspace, alias: str) -> set[object]:
    return set(ws.get(alias).layout.data.iter_hashes())


def test_local_orphan_survives_the_grace_period_then_goes(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "ws")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=1)
    head, before = ds.head(), _data_files(ws, "prices")
    run_until_uploaded("local", str(ws.root), "prices", str(tmp_path / "more"))
    assert ws.get("prices").head() == head
    orphans = _data_files(ws, "prices") - before
    assert len(orphans) == 1
    inside = ws.gc()
    assert inside.data["prices"].deleted == ()
    assert set(inside.data["prices"].kept_recent) == orphans
    after = ws.gc(now=max(o.mtime for o in map(ds.layout.data.info, orphans)) + DEFAULT_GC_GRACE_S)
    assert set(after.data["prices"].deleted) == orphans
    assert _data_files(ws, "prices") == before
    assert verify_integrity(ws.get("prices")).ok
