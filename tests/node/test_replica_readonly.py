"""A replica is read-only: nothing appends a block the publisher never made.

Node A (an ``odf node run`` process) publishes a root with a push source and a
derivative reading it; B clones them with ``odf pull http://A/pop`` and ``odf pull
odf+http://A/big`` (``odf`` processes).
On B every local append is refused with one line naming the publisher (its DID and
signed name) and the way to a copy of one's own, and B's heads do not move: ``odf
ingest``, ``--set-watermark``, the Python API, the transform of the derivative, and
push ingest over B's own node's HTTP API. ``odf pull DS`` and ``--all`` update the
replicas from their publisher instead and run nothing locally.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from node.api import open_workspace
from node.errors import ReplicaReadOnly
from node.http.auth import token_path
from node.transform import pull_derivative
from storage.workspace import Workspace
from tests.node.test_daemon_process import REPO, Node, node, write_config

pytestmark = pytest.mark.timeout(240)

ROOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: pop
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Csv
      header: true
      ddlSchema:
      - event_time TIMESTAMP
      - city STRING
      - population BIGINT
    merge:
      kind: Ledger
      primaryKey:
      - city
"""
DERIVATIVE = """\
kind: DatasetSnapshot
version: 1
content:
  name: big
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: pop
    transform:
      kind: Sql
      engine: spark
      query: SELECT event_time, city, population FROM pop WHERE population > 1
"""
DATA = "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-02T00:00:00Z,B,2\n"
MORE = "event_time,city,population\n2020-01-03T00:00:00Z,C,3\n"


def odf(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``odf --workspace ROOT ARGV...`` as a process."""
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(root), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def ok(root: Path, *argv: str) -> str:
    proc = odf(root, *argv)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@dataclass
class Setup:
    a: Node
    b_root: Path
    url: str
    did: str

    @property
    def b(self) -> Workspace:
        return Workspace.open(self.b_root)


@pytest.fixture
def cloned(tmp_path: Path) -> Iterator[Setup]:
    """A publishes ``pop`` (2 records) and ``big``; B cloned both from A's URL."""
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    for root in (a_root, b_root):
        root.mkdir()
        ok(root, "init")
    (tmp_path / "pop.yaml").write_text(ROOT)
    (tmp_path / "big.yaml").write_text(DERIVATIVE)
    (tmp_path / "data.csv").write_text(DATA)
    (tmp_path / "more.csv").write_text(MORE)
    ok(a_root, "add", str(tmp_path / "pop.yaml"), str(tmp_path / "big.yaml"))
    ok(a_root, "ingest", "pop", str(tmp_path / "data.csv"))
    with node(a_root, "--config", str(write_config(tmp_path / "a.yaml"))) as a:
        assert a.info is not None
        url = a.info.http_url
        ok(b_root, "pull", f"{url}/pop", "--no-progress")
        ok(b_root, "pull", f"odf+{url}/big", "--no-progress")  # the smart protocol
        did = Workspace.open(a_root).resolve("pop").id.to_did_odf()
        yield Setup(a, b_root, url, did)


def refused(proc: subprocess.CompletedProcess[str], did: str) -> None:
    """One ``odf: error:`` line, exit 4, naming the publisher and a way to a copy."""
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr
    assert err.startswith("odf: error: ") and err.count("\n") == 1, err
    assert "replica" in err and did in err and "odf add" in err


def test_ingest_and_watermark_into_a_replica_are_refused(cloned: Setup, tmp_path: Path) -> None:
    b = cloned.b
    head = b.get("pop").head()
    refused(odf(cloned.b_root, "ingest", "pop", str(tmp_path / "more.csv")), cloned.did)
    refused(
        odf(cloned.b_root, "pull", "pop", "--set-watermark", "2030-01-01T00:00:00Z"), cloned.did
    )
    # The same dataset named by its DID is the same replica.
    refused(odf(cloned.b_root, "ingest", cloned.did, str(tmp_path / "more.csv")), cloned.did)
    assert b.get("pop").head() == head

    api = open_workspace(cloned.b_root)
    with pytest.raises(ReplicaReadOnly, match="replica"):
        api.dataset("pop").ingest([tmp_path / "more.csv"])
    assert b.get("pop").head() == head
    ok(cloned.b_root, "verify", "--integrity", "pop")


def test_a_replicas_transform_never_runs_here(cloned: Setup, tmp_path: Path) -> None:
    b = cloned.b
    heads = {ds: b.get(ds).head() for ds in ("pop", "big")}
    # Updated from the publisher, who has nothing newer: up to date, nothing run here.
    out = ok(cloned.b_root, "pull", "big", "--no-progress")
    assert "up to date" in out
    out = ok(cloned.b_root, "pull", "--all", "--no-progress")
    assert out.count("up to date") == 2, out
    assert {ds: b.get(ds).head() for ds in heads} == heads
    with pytest.raises(ReplicaReadOnly, match="run its transform"):
        pull_derivative(b, "big")
    # A derivative of B's own reading the replica: `-r` passes the replica by (it is
    # pulled, not run); the replica's input has no data yet, so nothing runs either way.
    (tmp_path / "mine.yaml").write_text(
        DERIVATIVE.replace("name: big", "name: mine").replace("datasetRef: pop", "datasetRef: big")
    )
    ok(cloned.b_root, "add", str(tmp_path / "mine.yaml"))
    b.get("big").layout.config_path.unlink()  # as a replica cloned by DID: no pull alias
    proc = odf(cloned.b_root, "pull", "-r", "mine", "--no-progress")
    assert "replica" not in proc.stderr, proc.stderr
    assert {ds: b.get(ds).head() for ds in heads} == heads

    # A new block at the publisher comes over as the publisher made it.
    a_root = cloned.a.root
    ok(a_root, "ingest", "pop", str(tmp_path / "more.csv"))
    assert "Updated pop" in ok(cloned.b_root, "pull", "pop", "--no-progress")
    assert b.get("pop").head() == Workspace.open(a_root).get("pop").head()


def test_push_ingest_into_a_replica_is_refused_over_http(cloned: Setup, tmp_path: Path) -> None:
    b_root = cloned.b_root
    head = cloned.b.get("pop").head()
    with node(b_root, "--config", str(write_config(tmp_path / "b.yaml"))) as b_node:
        assert b_node.info is not None
        token = token_path(cloned.b.root).read_text().strip()
        request = urllib.request.Request(
            f"{b_node.info.http_url}/pop/ingest",
            data=MORE.encode(),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "text/csv"},
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=60)
        assert caught.value.code == 422
        body = json.loads(caught.value.read())
        assert "replica" in json.dumps(body) and cloned.did in json.dumps(body)
    assert cloned.b.get("pop").head() == head


def test_verify_reports_a_head_its_publisher_never_signed(tmp_path: Path) -> None:
    from fbs.model import AddData
    from fbs.timestamp import Timestamp
    from p2p.head_store import HeadStore
    from tests.node.test_replica_network import signed
    from tests.p2p.sync_helpers import make_dataset, new_workspace

    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    make_dataset(wa, "prices", tmp_path / "s", 2)
    did = wa.resolve("prices").id
    with node(wa.root.parent, "--config", str(write_config(tmp_path / "a.yaml"))) as a:
        assert a.info is not None
        signed(wa, did)
        ok(wb.root.parent, "pull", f"{a.info.http_url}/prices", "--no-progress")
    record = HeadStore.for_workspace(wb.root).get(did)
    assert record is not None and record.head == wb.get(did).head()
    assert "prices: OK" in ok(wb.root.parent, "verify", "--integrity")

    # A block made here, as an ingest into a replica once could: the chain is sound, but
    # its publisher never signed it.
    ds = wb.get(did)
    state = ds.state()
    assert state is not None
    event = AddData(prev_offset=state.last_offset, new_watermark=Timestamp.now())
    ds.commit(event, expected_head=state.head)
    proc = odf(wb.root.parent, "verify", "--integrity", "prices")
    assert proc.returncode == 5, proc
    assert "never signed" in proc.stdout and "1 block(s)" in proc.stdout, proc.stdout
    proc = odf(wb.root.parent, "verify", "prices")
    assert proc.returncode == 5 and "never signed" in proc.stdout, proc
