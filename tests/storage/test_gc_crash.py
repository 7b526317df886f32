"""A writer killed (SIGKILL, a real process) after its uploads, before its ref moves.

The head stays where it was; what the writer stored is unreferenced. GC keeps it
inside the grace period (the writer could still be alive and about to commit) and
deletes it after. The same on S3: `tests.storage.s3.test_s3_gc_crash`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from storage.gc import DEFAULT_GC_GRACE_S
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace

ROOT = Path(__file__).resolve().parents[2]


def _run_until_uploaded(*argv: str) -> None:
    """Start the crash writer, wait for its uploads, then SIGKILL it (by its PID)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.gc_crash_writer", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "UPLOADED", proc.stderr.read() if proc.stderr else ""
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _data_files(ws: Workspace, alias: str) -> set[object]:
    return set(ws.get(alias).layout.data.iter_hashes())


def test_local_orphan_survives_the_grace_period_then_goes(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "ws")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=1)
    head, before = ds.head(), _data_files(ws, "prices")
    _run_until_uploaded("local", str(ws.root), "prices", str(tmp_path / "more"))
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
