"""A replica cloned by DID is updated from the network, and says "up to date" only when
it is; a name not held points at the DID the network publishes under it.

Node A (an ``odf node run`` process) publishes ``far.away`` and ``other.one``; node B
(another process, bootstrapped to A, following nothing) runs on the workspace where
``odf`` processes clone ``far.away`` by DID. Then, on B:

- after A's new head was heard, ``odf pull far.away`` and ``odf pull DID`` update the
  replica (they said "no polling source" or "up-to-date" before);
- ``odf pull other.one`` (not held) names the DID heard under that name;
- a newer head heard while no peer serves it is an error (exit 7), not "up to date".
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fbs.did import DatasetId
from p2p.head_store import HeadStore
from storage.workspace import Workspace
from tests.node.test_daemon_process import REPO, Node, node, wait_until, write_config
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

pytestmark = pytest.mark.timeout(240)


def odf(ws: Workspace, *argv: str) -> subprocess.CompletedProcess[str]:
    """``odf --workspace WS ARGV...`` as a process."""
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(ws.root.parent), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def get(n: Node, path: str) -> Any:
    assert n.info is not None
    with urllib.request.urlopen(n.info.http_url + path, timeout=60) as r:
        return json.loads(r.read())


def signed(ws: Workspace, did: DatasetId) -> None:
    """Wait until the owner's node signed its current head."""
    store = HeadStore.for_workspace(ws.root)
    head = ws.get(did).head()
    wait_until(lambda: (r := store.get(did)) is not None and r.head == head, "a signed head")


def heard(b: Node, name: str, seq: int) -> None:
    """Wait until node ``b`` heard (gossip) a head of sequence ``seq`` signed as ``name``."""

    def got() -> bool:
        matches = get(b, f"/api/heard/{name}")["matches"]
        return any(m["record"]["sequenceNumber"] >= seq for m in matches)

    wait_until(got, f"node B to hear {name} #{seq}")


def test_a_replica_cloned_by_did_follows_the_network(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    far = make_dataset(wa, "far.away", tmp_path / "s1", 2)
    other = make_dataset(wa, "other.one", tmp_path / "s2", 1)
    did = wa.resolve("far.away").id
    other_did = wa.resolve("other.one").id.to_did_odf()
    a_root, b_root = wa.root.parent, wb.root.parent
    with node(a_root, "--config", str(write_config(tmp_path / "a.yaml"))) as a:
        assert a.info is not None
        cfg = write_config(tmp_path / "b.yaml", bootstrap=[a.info.addrs[0]])
        with node(b_root, "--config", str(cfg)) as b:
            wait_until(lambda: b.status()["peers"] >= 1, "B connected to A")
            signed(wa, did)
            proc = odf(wb, "pull", did.to_did_odf(), "--no-progress")
            assert proc.returncode == 0, proc.stderr
            assert "Cloned far.away" in proc.stdout

            add_slices(far, tmp_path / "s3", 1)
            signed(wa, did)
            state = far.state()
            assert state is not None
            heard(b, "far.away", state.sequence_number)
            proc = odf(wb, "pull", "far.away", "--no-progress")
            assert proc.returncode == 0, proc.stderr
            assert "Updated far.away" in proc.stdout
            assert wb.get(did).head() == far.head()
            proc = odf(wb, "pull", did.to_did_odf(), "--no-progress")
            assert proc.returncode == 0 and "up to date" in proc.stdout, proc

            # Not held here: the name the network publishes it under leads to it.
            add_slices(other, tmp_path / "s4", 1)
            heard(b, "other.one", 2)
            proc = odf(wb, "pull", "other.one", "--no-progress")
            assert proc.returncode == 3, proc
            assert proc.stderr.count("\n") == 1 and f"odf pull {other_did}" in proc.stderr

            # A newer head heard that nobody serves any more is not "up to date".
            held = wb.get(did).head()
            add_slices(far, tmp_path / "s5", 1)
            signed(wa, did)
            heard(b, "far.away", state.sequence_number + 1)
            a.kill()
            wait_until(lambda: b.status()["peers"] == 0, "B to lose A")
            proc = odf(wb, "pull", "far.away", "--no-progress")
            assert proc.returncode == 7, proc
            assert "newer head" in proc.stderr and "up to date" not in proc.stdout
            assert wb.get(did).head() == held
    assert odf(wb, "verify", "--integrity", "far.away").returncode == 0
