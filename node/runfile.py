"""The run directory of a node (``.odf/run/``): one node per workspace, and how to reach it.

``node.lock`` is an flock held while the node runs (released by the kernel on exit);
``node.json`` (pid, peer id, addresses, HTTP URL) is written atomically after start and
removed on clean stop. `read_run_info` ignores a file whose process is gone. Light on
imports: the CLI reads it without loading the daemon (`node.daemon.service`).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from fbs.errors import ExitCategory
from node.errors import NodeError
from storage.errors import StorageError
from storage.fsutil import atomic_write_bytes, ensure_dir, read_bytes_limited
from storage.lockfile import FileLock

if TYPE_CHECKING:  # annotations only: `odf node status` must not import the dataset layer
    from storage.workspace import Workspace

__all__ = [
    "LOCK_FILE",
    "MAX_RUN_FILE_BYTES",
    "RUN_DIR",
    "RUN_FILE",
    "NodeAlreadyRunning",
    "NodeNotRunning",
    "RunFile",
    "RunInfo",
    "RunLock",
    "read_run_info",
    "run_info_at",
]

#: Run directory files, relative to the workspace root.
RUN_DIR: Final = "run"
RUN_FILE: Final = "run/node.json"
LOCK_FILE: Final = "run/node.lock"
#: Largest run (or follow) file read.
MAX_RUN_FILE_BYTES: Final = 64 * 1024


class NodeAlreadyRunning(NodeError):
    """Another node process serves this workspace (its run lock is held)."""

    exit_category = ExitCategory.CONFLICT


class NodeNotRunning(NodeError):
    """No node process serves this workspace."""

    exit_category = ExitCategory.UNAVAILABLE


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What ``.odf/run/node.json`` says about the running node.

    Attributes:
        pid: the node process.
        peer_id: its libp2p peer id.
        addrs: its dialable multiaddrs (with ``/p2p/<peer id>``).
        http_url: base URL of its HTTP API.
        started_at: UNIX time of start.
    """

    pid: int
    peer_id: str
    addrs: tuple[str, ...]
    http_url: str
    started_at: float

    def to_json(self) -> bytes:
        """The file's JSON."""
        return json.dumps(
            {
                "pid": self.pid,
                "peerId": self.peer_id,
                "addrs": list(self.addrs),
                "httpUrl": self.http_url,
                "startedAt": self.started_at,
            },
            indent=2,
        ).encode()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_run_info(ws: Workspace) -> RunInfo | None:
    """The running node of ``ws`` (``None``: no node, or a stale file of a dead process)."""
    return run_info_at(ws.root)


def run_info_at(root: Path) -> RunInfo | None:
    """`read_run_info` of the workspace whose ``.odf`` directory is ``root``."""
    path = root / RUN_FILE
    try:
        data = read_bytes_limited(path, MAX_RUN_FILE_BYTES)
    except (FileNotFoundError, StorageError):
        return None
    if data is None:
        return None
    try:
        doc = json.loads(data)
        info = RunInfo(
            pid=int(doc["pid"]),
            peer_id=str(doc["peerId"]),
            addrs=tuple(str(a) for a in doc["addrs"]),
            http_url=str(doc["httpUrl"]),
            started_at=float(doc["startedAt"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
    return info if _pid_alive(info.pid) else None


class RunLock:
    """``.odf/run/node.lock``: one node per workspace (released by the kernel on exit)."""

    def __init__(self, ws: Workspace) -> None:
        self.path = ws.root / LOCK_FILE
        self._lock = FileLock(self.path)

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            NodeAlreadyRunning: another process holds it.
        """
        ensure_dir(self.path.parent)
        if not self._lock.try_acquire():
            raise NodeAlreadyRunning(f"a node already serves this workspace ({self.path})")

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        self._lock.release()


class RunFile:
    """The run directory of one node: its `RunLock` and ``node.json``."""

    def __init__(self, ws: Workspace) -> None:
        self.path = ws.root / RUN_FILE
        self.lock = RunLock(ws)

    def acquire(self) -> None:
        """Take the lock (`RunLock.acquire`)."""
        self.lock.acquire()

    def publish(self, info: RunInfo) -> None:
        """Write ``node.json`` atomically."""
        atomic_write_bytes(self.path, info.to_json())

    def remove(self) -> None:
        """Remove ``node.json`` (a missing file is fine)."""
        with contextlib.suppress(OSError):
            self.path.unlink()

    def release(self) -> None:
        """Drop the lock."""
        self.lock.release()
