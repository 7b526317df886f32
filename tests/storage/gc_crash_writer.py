"""A writer that stops after its uploads, before its ref moves, for the kill -9 GC tests.

Run as ``python -m tests.storage.gc_crash_writer local WS ALIAS TMP`` (one more slice
committed to a workspace dataset) or ``... s3 WS ALIAS URL`` (a push of the dataset to
an S3 prefix). The ref store's compare-and-swap is replaced by one that prints
``UPLOADED`` and waits: every object of the commit is durable by then, and the test
kills this process (SIGKILL) while it waits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from storage.refs import DiskRefStore
from storage.s3.refs import S3RefStore
from storage.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]


def run_until_uploaded(*argv: str) -> None:
    """Start this writer with ``argv``, wait for its uploads, then SIGKILL it (by its PID)."""
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


def _stop_here(*_args: Any, **_kw: Any) -> None:
    print("UPLOADED", flush=True)
    threading.Event().wait()


def main(argv: list[str]) -> int:
    mode, ws_root, alias, where = argv
    ws = Workspace.open(Path(ws_root))
    ds = ws.get(ws.resolve(alias).id)
    if mode == "local":
        from tests.p2p.sync_helpers import add_slices

        DiskRefStore.set_if_equals = _stop_here  # type: ignore[method-assign]
        add_slices(ds, Path(where), 1)
    else:
        from p2p.s3.push import push_to_s3
        from storage.s3.url import parse_s3_url

        S3RefStore.set_if_equals = _stop_here  # type: ignore[method-assign]
        push_to_s3(ds, parse_s3_url(where), alias=alias)
    return 1  # never reached: the ref never moves


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
