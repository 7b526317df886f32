"""``odf node run`` as real subprocesses: kill -9 and SIGTERM during a pull, CLI queries.

Node A owns a dataset of large-ish slices; node B follows everything and is stopped
(SIGKILL or SIGTERM) while it pulls. Afterwards B's workspace must be consistent (every
dataset verifies, every object file under its final name hashes to that name) and a
restarted B resumes the pull without downloading again what it already stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fbs.did import DatasetId
from fbs.multiformats import Multihash
from node.daemon.service import RUN_FILE, RunInfo, read_run_info
from storage.errors import DatasetNotFound
from storage.fsutil import is_pending_name
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 40.0
#: Slices x padding: big enough that a pull on loopback takes a noticeable moment.
SLICES = 40
PAD = 3 << 20


def write_config(path: Path, **extra: Any) -> Path:
    lines = [
        "http: {host: 127.0.0.1, port: 0}",
        "head_poll_interval_s: 0.1",
        "pull_retry_delay_s: 0.2",
        "log_level: info",
    ]
    lines += [f"{k}: {json.dumps(v)}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_until(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Node:
    """A node subprocess on workspace ``root`` (its log in ``root/node.log``)."""

    def __init__(self, root: Path, *args: str) -> None:
        self.root = root
        self.ws = Workspace.open(root)
        self.log_path = root / "node.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "node.cli",
                "--workspace",
                str(root),
                "node",
                "run",
                "-q",
                *args,
            ],
            cwd=REPO,
            stdout=self._log,
            stderr=self._log,
        )
        self.info: RunInfo | None = None
        try:
            wait_until(self._ready, f"node in {root} to start")
        except AssertionError:
            self.kill()
            raise AssertionError(f"node did not start:\n{self.log()}") from None

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log()
        info = read_run_info(self.ws)
        if info is None or info.pid != self.proc.pid:
            return False
        self.info = info
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def status(self) -> dict[str, Any]:
        import urllib.request

        assert self.info is not None
        with urllib.request.urlopen(self.info.http_url + "/api/status", timeout=10) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._log.close()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self._log.close()
        return code


@contextlib.contextmanager
def node(root: Path, *args: str) -> Iterator[Node]:
    n = Node(root, *args)
    try:
        yield n
    finally:
        if n.proc.poll() is None:
            n.kill()


def head_of(ws: Workspace, did: DatasetId) -> Multihash | None:
    try:
        return ws.get(did).head()
    except DatasetNotFound:
        return None


def staged_objects(ws: Workspace, did: DatasetId) -> list[Path]:
    data = ws.root / "staging" / f"pull-{did.as_multibase()}" / "data"
    if not data.is_dir():
        return []
    return [p for p in data.iterdir() if not is_pending_name(p.name)]


def assert_objects_sound(root: Path) -> int:
    """Every object under a final name (datasets and staging) hashes to its name."""
    count = 0
    for store in [*root.glob("datasets/*/data"), *root.glob("staging/*/data")]:
        for p in store.iterdir():
            if is_pending_name(p.name):
                continue
            assert Multihash.sha3_256(p.read_bytes()).to_multibase() == p.name, p
            count += 1
    return count


def assert_workspace_sound(ws: Workspace) -> None:
    for entry in ws.list():
        # Padded test slices are not valid Parquet: physical hashes and chain only.
        report = verify_integrity(ws.get(entry.id), check_logical_hashes=False)
        assert report.ok, (entry.alias, report.problems)
    assert_objects_sound(ws.root)


@pytest.fixture
def publisher(tmp_path: Path) -> Iterator[tuple[Node, DatasetId, Multihash]]:
    wa = new_workspace(tmp_path / "a")
    ds = make_dataset(wa, "big", tmp_path / "slices", slices=SLICES, pad=PAD)
    state = ds.state()
    assert state is not None
    cfg = write_config(tmp_path / "a.yaml")
    with node(tmp_path / "a", "--config", str(cfg)) as a:
        yield a, state.dataset_id, state.head


def start_follower(tmp_path: Path, a: Node) -> Node:
    assert a.info is not None
    root = tmp_path / "b"
    if not (root / ".odf").exists():
        new_workspace(root)
    cfg = write_config(tmp_path / "b.yaml", follow=["all"], bootstrap=[a.info.addrs[0]])
    return Node(root, "--config", str(cfg))


def test_kill_9_during_pull_then_resume(
    tmp_path: Path, publisher: tuple[Node, DatasetId, Multihash]
) -> None:
    a, did, head = publisher
    b = start_follower(tmp_path, a)
    try:
        wait_until(lambda: len(staged_objects(b.ws, did)) >= 2, "the pull to store objects")
    finally:
        b.kill()  # SIGKILL: no cleanup at all
    before = len(staged_objects(b.ws, did))
    assert head_of(b.ws, did) is None, "the pull finished before the kill: make it bigger"
    assert 0 < before < SLICES
    assert_workspace_sound(b.ws)  # nothing half-written is visible

    b2 = start_follower(tmp_path, a)
    try:
        wait_until(lambda: head_of(b2.ws, did) == head, "the resumed pull")

        def finished() -> list[dict[str, Any]]:
            # The head moves before the daemon records the pull (after the install's
            # fsyncs): wait for the record, not only for the head.
            pulls = b2.status()["recentPulls"]
            return [p for p in pulls if p["ok"] and p["dataset"] == did.to_did_odf()]

        wait_until(lambda: bool(finished()), "the resumed pull's record")
        done = finished()
    finally:
        assert b2.terminate() == 0
    assert done and done[-1]["objectsPresent"] >= before  # not downloaded again
    assert done[-1]["objects"] + done[-1]["objectsPresent"] == SLICES
    assert_workspace_sound(b2.ws)
    assert not (b2.ws.root / "staging" / f"pull-{did.as_multibase()}").exists()


def test_sigterm_during_pull_leaves_nothing_half_written(
    tmp_path: Path, publisher: tuple[Node, DatasetId, Multihash]
) -> None:
    a, did, head = publisher
    b = start_follower(tmp_path, a)
    wait_until(lambda: len(staged_objects(b.ws, did)) >= 1, "the pull to start")
    assert b.terminate() == 0, b.log()
    assert not (b.ws.root / RUN_FILE).exists()  # clean stop removes the run file
    assert read_run_info(b.ws) is None
    assert '"node stopped"' in b.log_path.read_text()
    assert_workspace_sound(b.ws)
    if head_of(b.ws, did) is None:
        # Restart: the pull completes from what was staged.
        b2 = start_follower(tmp_path, a)
        try:
            wait_until(lambda: head_of(b2.ws, did) == head, "the resumed pull")
        finally:
            assert b2.terminate() == 0
    assert head_of(b.ws, did) == head
    assert_workspace_sound(b.ws)


def test_cli_status_peers_follow(
    tmp_path: Path, publisher: tuple[Node, DatasetId, Multihash]
) -> None:
    a, did, head = publisher
    root = tmp_path / "c"
    new_workspace(root)
    assert a.info is not None
    cfg = write_config(tmp_path / "c.yaml", bootstrap=[a.info.addrs[0]])

    def odf(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "node.cli", "--workspace", str(root), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = odf("node", "status")
    assert r.returncode == 3 and "No node is running" in r.stdout
    with node(root, "--config", str(cfg)) as c:
        assert c.info is not None and a.info is not None
        r = odf("node", "status", "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["peerId"] == c.info.peer_id and doc["httpUrl"] == c.info.http_url
        wait_until(lambda: c.status()["peers"] >= 1, "the bootstrap connection")
        r = odf("node", "peers", "--json")
        assert r.returncode == 0, r.stderr
        assert a.info.peer_id in {p["peerId"] for p in json.loads(r.stdout)}
        assert head_of(c.ws, did) is None  # not followed yet
        r = odf("node", "follow", did.to_did_odf())
        assert r.returncode == 0, r.stderr
        wait_until(lambda: head_of(c.ws, did) == head, "the followed dataset")
        assert did.to_did_odf() in c.status()["follow"]
        r = odf("node", "run", "--config", str(cfg))  # a second node on the workspace
        assert r.returncode != 0 and "already serves" in r.stderr
        assert c.terminate() == 0
    assert_workspace_sound(Workspace.open(root))
    # The follow persists across restarts.
    assert did.to_did_odf() in json.loads((root / ".odf/p2p/follow.json").read_text())
    assert os.path.exists(root / ".odf/p2p/identity.key")
