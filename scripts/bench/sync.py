"""Sync benchmarks: verified pulls vs their limits, 3 peers vs 1, propagation.

Usage: .venv/bin/python scripts/bench/sync.py [--mb 1024] [--runs 3] [--nodes 10]
       [--skip-propagation]

Measured in one run (ratios against baselines measured in the same run). Every transfer
figure is measured ``--runs`` times, interleaved with its baseline (sha3, bare stream),
and reported as best and median; ratios are best/best and median/median. The load
average before and after is printed: on a small shared machine, other processes take
cores away from the parallel parts (hashing threads, the peers' processes).

1. **sha3**: SHA3-256 of the dataset's object bytes in memory (every received byte must
   be hashed: the ceiling of a verified pull).
2. **HTTP pull**: `p2p.sync.pull_dataset` over `p2p.http.source.HttpSource` from an
   ``odf node run`` subprocess (clone into a fresh workspace, everything verified,
   fsync'd, renamed into place); from 1 node and from 3 nodes holding the dataset.
   Target: HTTP >= 0.6 of sha3.
3. **libp2p pull** from the same node subprocesses (`Libp2pSource`, client host in
   this process), 1 vs 3 peers.
4. **bare stream vs exchange pull**, two `P2PHost` s in this process: a bare py-libp2p
   stream of the same bytes (no framing, hashing or files) and the verified libp2p pull
   of the dataset from an in-process `ExchangeServer`. Target: >= 0.8. The bare stream
   is measured twice: with 1 MiB writes (the usual baseline) and with writes of
   `p2p.libp2p.exchange.STREAM_WRITE_BYTES` (one yamux frame per noise message, as the
   exchange server writes); the pull is compared with both.
5. **propagation**: ``--nodes`` node subprocesses in a binary tree, every one following
   all; the owner commits a new slice (``--slice-mb``); time until every node heard
   the signed head (gossip) and until every node replicated the data (from the
   nodes' JSON logs).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# This directory holds ``multihash.py`` (another benchmark), which would shadow the
# ``multihash`` package libp2p imports: drop it from the path, add the repository root.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
REPO = _HERE.parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
from libp2p.network.stream.exceptions import StreamEOF  # noqa: E402

from fbs.did import DatasetId  # noqa: E402
from node.runfile import RunInfo, read_run_info  # noqa: E402
from p2p.http.source import HttpSource, dataset_base_url  # noqa: E402
from p2p.libp2p.exchange import STREAM_WRITE_BYTES, ExchangeClient, ExchangeServer  # noqa: E402
from p2p.libp2p.host import P2PHost  # noqa: E402
from p2p.libp2p.source import Libp2pSource  # noqa: E402
from p2p.sync import ObjectSource, pull_dataset  # noqa: E402
from storage.workspace import Workspace  # noqa: E402
from tests.p2p.sync_helpers import add_slices, make_dataset  # noqa: E402

ODF = (sys.executable, "-m", "node.cli")
BARE = "/odf/bench-bare/1.0.0"
BARE_SMALL = "/odf/bench-bare-noise-sized/1.0.0"
WRITE = 1 << 20
MIB = float(1 << 20)
START_TIMEOUT_S = 60.0
PROPAGATION_TIMEOUT_S = 300.0


def config(path: Path, **extra: Any) -> Path:
    settings: dict[str, Any] = {
        "head_poll_interval_s": 0.05,
        "pull_retry_delay_s": 0.1,
        "reannounce_interval_s": 600,
        **extra,
    }
    lines = ["http: {host: 127.0.0.1, port: 0}"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in settings.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class NodeProc:
    def __init__(self, root: Path, cfg: Path) -> None:
        self.root = root
        self.ws = Workspace.open(root)
        self.log_path = root / "node.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*ODF, "--workspace", str(root), "node", "run", "-q", "--config", str(cfg)],
                cwd=REPO,
                stdout=log,
                stderr=log,
            )
        self.info: RunInfo | None = None

    def wait(self) -> RunInfo:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"node {self.root} exited:\n{self.log_path.read_text()[-2000:]}")
            info = read_run_info(self.ws)
            if info is not None and info.pid == self.proc.pid:
                self.info = info
                return info
            time.sleep(0.05)
        raise SystemExit(f"node {self.root} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def events(self, msg: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if doc.get("msg") == msg:
                    out.append(doc)
        return out


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / MIB / seconds


def copy_replica(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("node.log", "run", "p2p", "keys"))


async def timed_pull(dest_root: Path, sources: list[ObjectSource], did: DatasetId) -> float:
    ws = Workspace.init(dest_root)
    t = time.perf_counter()
    result = await pull_dataset(ws, sources, dataset_id=did, require_signed=False)
    seconds = time.perf_counter() - t
    assert result.new_head is not None
    shutil.rmtree(dest_root)
    return seconds


async def bare_vs_exchange(
    ws: Workspace, did: DatasetId, size: int, root: Path, runs: int
) -> tuple[list[float], list[float], list[float]]:
    """Seconds of the bare streams (1 MiB writes, noise-sized writes) and of the verified
    pull, alternating, ``runs`` each."""
    data = os.urandom(size)

    def handler(write_size: int) -> Any:
        async def bare_handler(stream: Any) -> None:
            view = memoryview(data)
            for i in range(0, size, write_size):
                await stream.write(bytes(view[i : i + write_size]))
            await stream.close()

        return bare_handler

    server, client_host = P2PHost(), P2PHost()
    server.set_stream_handler(BARE, handler(WRITE))
    server.set_stream_handler(BARE_SMALL, handler(STREAM_WRITE_BYTES))
    ExchangeServer(ws).register(server)
    async with server, client_host:
        await client_host.connect(server.addrs[0])
        client = ExchangeClient(client_host)

        async def bare_fetch(protocol: str) -> int:
            stream = await client_host.new_stream_trio(server.peer_id, protocol)
            got = 0
            while True:
                try:
                    got += len(await stream.read(WRITE))
                except StreamEOF:
                    break
            await stream.close()
            return got

        bare_s: list[float] = []
        small_s: list[float] = []
        ex_s: list[float] = []
        for _ in range(runs):
            for protocol, out in ((BARE, bare_s), (BARE_SMALL, small_s)):
                t = time.perf_counter()
                got = await client_host.run_trio(bare_fetch, protocol)
                out.append(time.perf_counter() - t)
                assert got == size
            src: list[ObjectSource] = [Libp2pSource(client_host, client, server.peer_id, did)]
            ex_s.append(await timed_pull(root / "inproc", src, did))
    return bare_s, small_s, ex_s


def sha3_seconds(paths: list[Path]) -> float:
    """Seconds to SHA3-256 the files' bytes in memory (reading them is not timed)."""
    total = 0.0
    for p in paths:
        buf = p.read_bytes()
        t = time.perf_counter()
        hashlib.sha3_256(buf).digest()
        total += time.perf_counter() - t
        del buf
    return total


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


async def transfers(args: argparse.Namespace, root: Path) -> None:
    mb = args.mb
    per_slice = max(1, min(64, mb // 8))
    slices = max(1, mb // per_slice)
    owner_root = root / "owner"
    owner_root.mkdir()
    ws = Workspace.init(owner_root)
    print(f"building a dataset of {slices} slices x {per_slice} MiB ...", flush=True)
    ds = make_dataset(ws, "bench", root / "slices", slices=slices, pad=per_slice << 20)
    shutil.rmtree(root / "slices")
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    total = state.data_size

    load_before = loadavg()
    data_files = sorted(ds.layout.data_dir.iterdir())
    runs = max(1, args.runs)
    times: dict[str, list[float]] = {}

    def record(name: str, seconds: float) -> None:
        times.setdefault(name, []).append(seconds)

    # 1.-3. from node subprocesses, each run next to its own sha3 baseline
    roots = [owner_root]
    for i in (2, 3):
        r = root / f"replica{i}"
        copy_replica(owner_root, r)
        roots.append(r)
    # The nodes' default head watcher period: nothing is committed during transfers.
    nodes = [
        NodeProc(r, config(root / f"n{i}.yaml", head_poll_interval_s=1.0))
        for i, r in enumerate(roots)
    ]
    try:
        infos = [n.wait() for n in nodes]
        client_host = P2PHost()
        async with aiohttp.ClientSession() as session, client_host:
            client = ExchangeClient(client_host)
            peers = [await client_host.connect(i.addrs[0]) for i in infos]
            for run in range(runs):
                print(f"run {run + 1} of {runs} ...", flush=True)
                record("sha3", sha3_seconds(data_files))
                for k in (1, 3):
                    srcs: list[ObjectSource] = [
                        HttpSource(dataset_base_url(i.http_url, "bench"), session)
                        for i in infos[:k]
                    ]
                    record(f"http x{k}", await timed_pull(root / f"http{k}", srcs, did))
                for k in (1, 3):
                    srcs = [Libp2pSource(client_host, client, p, did) for p in peers[:k]]
                    record(f"libp2p x{k}", await timed_pull(root / f"p2p{k}", srcs, did))
    finally:
        for n in nodes:
            n.stop()
    for r in roots[1:]:
        shutil.rmtree(r)

    # 4. bare stream vs exchange pull, same process, alternating
    bare_s, small_s, ex_s = await bare_vs_exchange(ws, did, total, root, runs)
    times["bare py-libp2p stream"] = bare_s
    times["bare stream, 64K writes"] = small_s
    times["libp2p pull, same process"] = ex_s

    def best(name: str) -> float:
        return min(times[name])

    def med(name: str) -> float:
        return statistics.median(times[name])

    def ratio(base: str, name: str) -> str:
        # A ratio of rates: baseline seconds over measured seconds.
        return f"{best(base) / best(name):.2f} best, {med(base) / med(name):.2f} median"

    print(f"\nverified pull of {total / MIB:.0f} MiB ({slices} objects), TCP loopback, {runs} runs")
    print(f"load average before / after: {load_before} / {loadavg()}")
    print(f"  {'MiB/s':<28}  {'best':>8} {'median':>8}   runs")
    for name, secs in times.items():
        runs_txt = ", ".join(f"{rate(total, x):.0f}" for x in secs)
        print(
            f"  {name:<28}: {rate(total, best(name)):8.1f} {rate(total, med(name)):8.1f}"
            f"   [{runs_txt}]"
        )
    print("ratios (best/best, median/median)")
    print(f"  HTTP x1 / sha3              : {ratio('sha3', 'http x1')}  (target >= 0.6)")
    print(f"  HTTP x3 / sha3              : {ratio('sha3', 'http x3')}")
    bare, inproc = "bare py-libp2p stream", "libp2p pull, same process"
    print(f"  libp2p (same process) / bare: {ratio(bare, inproc)}  (target >= 0.8)")
    print(f"  same, / bare with 64K writes: {ratio('bare stream, 64K writes', inproc)}")
    print(f"  libp2p x1 (node) / bare     : {ratio(bare, 'libp2p x1')}")
    print(f"  HTTP x3 / HTTP x1           : {ratio('http x1', 'http x3')}")
    print(f"  libp2p x3 / libp2p x1       : {ratio('libp2p x1', 'libp2p x3')}")


def propagation(args: argparse.Namespace, root: Path) -> None:
    n = args.nodes
    owner_root = root / "prop0"
    owner_root.mkdir()
    ws = Workspace.init(owner_root)
    ds = make_dataset(ws, "prop", root / "pslices", slices=1)
    state = ds.state()
    assert state is not None
    did = state.dataset_id.to_did_odf()
    nodes: list[NodeProc] = []
    try:
        nodes.append(NodeProc(owner_root, config(root / "p0.yaml")))
        infos = [nodes[0].wait()]
        for k in range(1, n):
            r = root / f"prop{k}"
            r.mkdir()
            Workspace.init(r)
            parent = infos[(k - 1) // 2]  # a binary tree: most nodes are hops away
            cfg = config(root / f"p{k}.yaml", follow=["all"], bootstrap=[parent.addrs[0]])
            nodes.append(NodeProc(r, cfg))
            infos.append(nodes[-1].wait())
        seq0 = state.sequence_number
        deadline = time.monotonic() + PROPAGATION_TIMEOUT_S
        while time.monotonic() < deadline:  # the first head replicated everywhere
            if all(
                any(e["sequenceNumber"] == seq0 for e in x.events("pull done")) for x in nodes[1:]
            ):
                break
            time.sleep(0.2)
        else:
            raise SystemExit("the initial head did not replicate on every node")
        time.sleep(1.0)
        t0 = time.time()
        add_slices(ds, root / "pslices2", 1, pad=args.slice_mb << 20)
        new = ds.state()
        assert new is not None
        seq = new.sequence_number
        heard: dict[int, float] = {}
        done: dict[int, float] = {}
        while time.monotonic() < deadline and len(done) < n - 1:
            for k, x in enumerate(nodes[1:], 1):
                for e in x.events("head heard"):
                    if e.get("dataset") == did and e.get("seq") == seq:
                        heard.setdefault(k, e["ts"])
                for e in x.events("pull done"):
                    if e.get("dataset") == did and e.get("sequenceNumber") == seq and e.get("ok"):
                        done.setdefault(k, e["ts"])
            time.sleep(0.2)
        if len(done) < n - 1:
            raise SystemExit(f"only {len(done)} of {n - 1} nodes replicated the new head")
    finally:
        for x in nodes:
            x.stop()
    print(f"\npropagation to {n - 1} followers (binary tree, {args.slice_mb} MiB slice)")
    print(f"  signed head heard by all    : {max(heard.values()) - t0:6.2f} s after the commit")
    print(f"  data replicated on all      : {max(done.values()) - t0:6.2f} s after the commit")
    print(
        f"  median heard / replicated   : {sorted(heard.values())[len(heard) // 2] - t0:6.2f} s"
        f" / {sorted(done.values())[len(done) // 2] - t0:6.2f} s"
    )


def main() -> None:
    """Parse arguments and run the benchmarks."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=1024, help="dataset size in MiB (default 1024)")
    p.add_argument("--runs", type=int, default=3, help="runs of each transfer (default 3)")
    p.add_argument("--nodes", type=int, default=10, help="nodes for propagation (default 10)")
    p.add_argument("--slice-mb", type=int, default=16, help="propagated slice size (MiB)")
    p.add_argument("--skip-transfers", action="store_true")
    p.add_argument("--skip-propagation", action="store_true")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="odf-bench-sync-", dir=args.dir))
    try:
        if not args.skip_transfers:
            asyncio.run(transfers(args, root))
        if not args.skip_propagation:
            propagation(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
