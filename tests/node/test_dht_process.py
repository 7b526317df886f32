"""Content routing between real ``odf node run`` processes: datasets found by DID alone.

Five nodes in a line (each bootstrapped only to the one before it), then a sixth node
bootstrapped only to the second. The first owns a dataset; the nodes between hold
nothing. The last of the line, connected to no holder, runs ``odf node follow DID`` and
gets it, verified; then the sixth, connected only to a node without the dataset, pulls
it by DID (``odf pull did:odf:...`` through its running node) and verifies it; then a
validator connected only to a node without it follows the DID, replicates and attests it.
Every wait polls a condition; every process is stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fbs.did import DatasetId
from tests.node.test_daemon_process import REPO, Node, head_of, wait_until, write_config
from tests.p2p.sync_helpers import make_dataset, new_workspace

pytestmark = pytest.mark.timeout(240)

#: Generous bound for a condition polled across processes on a loaded 2-core machine.
WAIT_S = 120.0


def odf(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(root), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def peers_of(n: Node) -> set[str]:
    r = odf(n.root, "node", "peers", "-o", "json")
    assert r.returncode == 0, r.stderr
    return {p["peerId"] for p in json.loads(r.stdout) if p["connected"]}


def dht(n: Node) -> dict[str, Any]:
    doc: dict[str, Any] = n.status()["dht"]
    return doc


@contextlib.contextmanager
def nodes() -> Iterator[list[Node]]:
    """The nodes started in the block; each is stopped (SIGTERM, else killed) after it."""
    started: list[Node] = []
    try:
        yield started
    finally:
        for n in reversed(started):
            if n.proc.poll() is None:
                try:
                    n.terminate()
                except subprocess.TimeoutExpired:
                    n.kill()


def start(started: list[Node], root: Path, cfg: Path, bootstrap: Node | None, *extra: str) -> Node:
    args = ["--config", str(cfg), *extra]
    if bootstrap is not None:
        assert bootstrap.info is not None
        args += ["--bootstrap", bootstrap.info.addrs[0]]
    n = Node(root, *args)
    started.append(n)
    return n


def verified(root: Path, did: DatasetId) -> None:
    # Every block, object and logical hash, every chain rule (a root: nothing to replay).
    r = odf(root, "verify", did.to_did_odf())
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_a_dataset_is_found_by_did_across_a_line_of_nodes(tmp_path: Path) -> None:
    roots = [tmp_path / f"n{i}" for i in range(7)]
    workspaces = [new_workspace(root) for root in roots]
    owner = make_dataset(workspaces[0], "line", tmp_path / "slices", slices=3)
    state = owner.state()
    assert state is not None
    did, head = state.dataset_id, state.head
    cfg = write_config(tmp_path / "node.yaml", head_poll_interval_s=0.5)
    with nodes() as started:
        line = [start(started, roots[0], cfg, None)]
        for root in roots[1:4]:
            line.append(start(started, root, cfg, line[-1]))
        first = line[0]
        # The owner provides its dataset once a peer takes the provider record.
        wait_until(lambda: dht(first)["published"] >= 1, "the owner to provide", WAIT_S)
        line.append(start(started, roots[4], cfg, line[-1]))
        assert first.info is not None and line[1].info is not None
        owner_id = first.info.peer_id

        # The last of the line, never connected to the owner, follows the DID and gets it.
        last = line[-1]
        wait_until(lambda: dht(last)["routingTableSize"] >= 1, "a routing table", WAIT_S)
        assert line[3].info is not None
        assert peers_of(last) == {line[3].info.peer_id}  # it holds nothing
        r = odf(roots[4], "node", "follow", did.to_did_odf())
        assert r.returncode == 0, r.stderr
        wait_until(lambda: head_of(last.ws, did) == head, "the followed dataset", WAIT_S)
        verified(roots[4], did)
        for middle in line[1:4]:
            assert head_of(middle.ws, did) is None  # nothing went through them

        found = {p for f in dht(last)["providersFound"] for p in f["providers"]}
        assert owner_id in found
        r = odf(roots[4], "node", "status")
        assert r.returncode == 0 and "routing table" in r.stdout, r.stdout + r.stderr
        assert f"providers: {did.to_did_odf()}" in r.stdout
        r = odf(roots[4], "node", "peers", "-o", "json")
        rows = json.loads(r.stdout)
        assert any(p["inRoutingTable"] for p in rows)
        assert did.to_did_odf() in next(p for p in rows if p["peerId"] == owner_id)["provides"]
        r = odf(roots[4], "node", "peers")
        assert r.returncode == 0 and "Routing table:" in r.stdout, r.stdout

        # A node connected only to a node that does not hold the dataset pulls it by DID.
        aside = start(started, roots[5], cfg, line[1])
        wait_until(lambda: dht(aside)["routingTableSize"] >= 1, "a routing table", WAIT_S)
        assert peers_of(aside) == {line[1].info.peer_id}
        assert head_of(line[1].ws, did) is None
        r = odf(roots[5], "pull", did.to_did_odf())
        assert r.returncode == 0, r.stdout + r.stderr
        assert head_of(aside.ws, did) == head
        verified(roots[5], did)

        # A validator connected only to a node without the dataset finds it the same way
        # and attests it.
        assert line[2].info is not None
        checker = start(
            started, roots[6], cfg, line[2], "--validator", "--follow", did.to_did_odf()
        )
        wait_until(lambda: head_of(checker.ws, did) == head, "the validated dataset", WAIT_S)
        validator = checker.status()["validator"]["validator"]

        def attested() -> bool:
            r = odf(roots[6], "attestations", did.to_did_odf(), "-o", "json")
            return r.returncode == 0 and any(
                a["validator"] == validator for a in json.loads(r.stdout)["attestations"]
            )

        wait_until(attested, "the validator's attestation", WAIT_S)
        assert dht(checker)["lookupsFound"] >= 1  # found through the DHT
        verified(roots[6], did)

        for n in reversed(started):
            assert n.terminate() == 0, n.log()
