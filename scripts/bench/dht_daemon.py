"""What content routing costs a node daemon: ``odf node run`` with the DHT on, then off.

Usage: .venv/bin/python scripts/bench/dht_daemon.py [--nodes 5] [--idle 60]

Each round starts ``--nodes`` real ``odf node run`` processes in a line (each bootstrapped
to the one before; the first owns a small dataset), waits until every node is up (and,
with the DHT, until the owner's provider record is taken), then measures over ``--idle``
seconds of idling the CPU time (user + system, from ``/proc/PID/stat``) and the resident
memory of every process. With the DHT on, it then has the last node follow the dataset by
DID and times until the dataset is there (lookup, dial, verified pull); with the DHT off
that follow never completes (no connected peer holds it), so it is not timed. Every
process is stopped at the end of its round. Figures are per node: the mean of the line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from node.runfile import read_run_info  # noqa: E402
from storage.workspace import Workspace  # noqa: E402
from tests.p2p.sync_helpers import make_dataset, new_workspace  # noqa: E402

WAIT_S = 120.0


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class _Node:
    def __init__(self, root: Path, cfg: Path, bootstrap: str | None, dht: bool) -> None:
        self.root = root
        args = ["--config", str(cfg), "--dht" if dht else "--no-dht"]
        if bootstrap:
            args += ["--bootstrap", bootstrap]
        self.log = open(root / "node.log", "ab")  # noqa: SIM115 (closed in stop)
        cmd = [sys.executable, "-m", "node.cli", "--workspace", str(root), "node", "run", "-q"]
        self.proc = subprocess.Popen(
            [*cmd, *args],
            cwd=REPO,
            stdout=self.log,
            stderr=self.log,
        )
        ws = Workspace.open(root)
        _wait(lambda: (i := read_run_info(ws)) is not None and i.pid == self.proc.pid, "a node")
        info = read_run_info(ws)
        assert info is not None
        self.addr, self.http = info.addrs[0], info.http_url

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.http + "/api/status", timeout=10) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def _line(tmp: Path, n: int, dht: bool) -> Iterator[tuple[list[_Node], str]]:
    roots = [tmp / f"{'on' if dht else 'off'}{i}" for i in range(n)]
    workspaces = [new_workspace(r) for r in roots]
    ds = make_dataset(workspaces[0], "bench", tmp / f"slices-{dht}", slices=3)
    state = ds.state()
    assert state is not None
    cfg = tmp / "node.yaml"
    cfg.write_text("http: {host: 127.0.0.1, port: 0}\nlog_level: warning\n")
    nodes: list[_Node] = []
    try:
        for root in roots:
            nodes.append(_Node(root, cfg, nodes[-1].addr if nodes else None, dht))
        yield nodes, state.dataset_id.to_did_odf()
    finally:
        for node in nodes:
            node.stop()


def _round(tmp: Path, n: int, idle_s: float, dht: bool) -> dict[str, float]:
    with _line(tmp, n, dht) as (nodes, did):
        if dht:
            _wait(lambda: nodes[0].status()["dht"]["published"] >= 1, "the provider record")
        before = [_cpu_s(x.proc.pid) for x in nodes]
        time.sleep(idle_s)  # the measured idle window, not a wait for a condition
        cpu = [_cpu_s(x.proc.pid) - b for x, b in zip(nodes, before, strict=True)]
        out = {
            "cpu_s_per_node_per_min": sum(cpu) / n * 60 / idle_s,
            "rss_mib_per_node": sum(_rss_mib(x.proc.pid) for x in nodes) / n,
        }
        if dht:
            last = nodes[-1]
            t0 = time.monotonic()
            body = json.dumps({"dataset": did}).encode()
            token = (last.root / ".odf/p2p/http-token").read_text().strip()
            req = urllib.request.Request(
                last.http + "/api/follow",
                data=body,
                method="POST",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            urllib.request.urlopen(req, timeout=30).read()
            ws = Workspace.open(last.root)
            _wait(lambda: _held(ws, did), "the followed dataset")
            out["follow_by_did_s"] = time.monotonic() - t0
            out["routing_table_last"] = float(last.status()["dht"]["routingTableSize"])
        return out


def _held(ws: Workspace, did: str) -> bool:
    from fbs.did import DatasetId

    try:
        return ws.get(DatasetId.from_did(did)).head() is not None
    except Exception:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--idle", type=float, default=60.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-dht-bench-") as d:
        for dht in (True, False):
            got = _round(Path(d), args.nodes, args.idle, dht)
            figures = ", ".join(f"{k} {v:.3g}" for k, v in got.items())
            print(f"dht {'on ' if dht else 'off'}: {args.nodes} nodes: {figures}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
