"""Validator replay throughput vs the original transform's, and head-to-attestations latency.

Usage: .venv/bin/python scripts/bench/validate.py [--rounds 5] [--rows 20000]
       [--validators 2] [--master local[2]] [--network 2,4] [--heads 3] [--net-rows 5000]

Builds a root dataset of ``--rounds`` slices of ``--rows`` rows and a map/filter
derivative pulled once per round (timed: plan + engine + hashing + commit). Then
``--validators`` validator keys each run `node.validation.validator.Validator.validate` on the
derivative (per block: object checks incl. the logical hash, one engine replay, one
signature and a durable store write) and on the root (object checks only). Prints
input records/s of the original pulls and of each validator run, and the ratio.

Network (``--network N,...``; ``--network 0`` skips it): for each N, one publisher
node, N validator daemons (``validator: true``, follow all) and one plain node, all in
this process on loopback, every validator replaying on the same engine. The publisher
commits ``--heads`` new derivative heads (root slice + transform); for each, the time
from the derivative's new head (its commit) to N ``reproduced`` attestations of that
block held on *every* node (publisher, validators, plain node) is measured: the sum of
head gossip, verified pull of the root slice and the derivative slice, one replay per
validator (concurrent on one shared engine), signing and attestation gossip. Printed
next to the original transform time of the same head (the ratio is latency / original).

One Spark JVM at a time: the engine is started here and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

# This directory holds a ``multihash.py`` bench that would shadow the ``multihash``
# package py-libp2p imports: load ``replay.py`` by path and keep the directory off
# ``sys.path``.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parents[1]))


from engine.client import EngineClient  # noqa: E402
from engine.process import start_engine_process  # noqa: E402
from fbs.did import DatasetId  # noqa: E402
from fbs.keys import KeyPair  # noqa: E402
from fbs.model import (  # noqa: E402
    DatasetKind,
    DatasetSnapshot,
    SetTransform,
    SqlQueryStep,
    TransformInput,
    TransformSql,
)
from fbs.multiformats import Multihash  # noqa: E402
from node.daemon.config import NodeConfig  # noqa: E402
from node.daemon.service import NodeDaemon  # noqa: E402
from node.transform import pull_derivative  # noqa: E402
from node.validation.validator import Validator  # noqa: E402
from p2p.attestation import Verdict  # noqa: E402
from p2p.attestation_store import AttestationStore  # noqa: E402
from storage.errors import DatasetNotFound  # noqa: E402
from storage.workspace import Workspace  # noqa: E402


def _load_replay_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_replay", _HERE / "replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_replay = _load_replay_bench()
QUERY = _replay.QUERY
append_root = _replay.append_root

#: Bound on waiting for replication and attestations (seconds).
WAIT_S = 300.0
NET_CFG = NodeConfig(
    http_port=0, head_poll_interval_s=0.05, pull_retry_delay_s=0.1, log_level="warning"
)


def make_project(root: Path) -> Workspace:
    """A workspace with root ``src`` and the map/filter derivative ``deriv``."""
    ws = Workspace.init(root)
    ws.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=()))
    transform = TransformSql(engine="spark", queries=(SqlQueryStep(query=QUERY),))
    ws.add_snapshot(
        DatasetSnapshot(
            name="deriv",
            kind=DatasetKind.Derivative,
            metadata=(
                SetTransform(inputs=(TransformInput(dataset_ref="src"),), transform=transform),
            ),
        )
    )
    return ws


def reproduced_by(ws: Workspace, did: DatasetId, block: Multihash | None) -> int:
    """Distinct validators with a ``reproduced`` on ``block`` held in ``ws``."""
    if block is None:
        return 0
    store = AttestationStore.for_workspace(ws)
    try:
        ws.resolve(did)
    except DatasetNotFound:  # not replicated yet
        return 0
    found = store.attestations(did, block=block)
    return len({a.validator for a in found if a.verdict is Verdict.REPRODUCED})


def attested(ws: Workspace, did: DatasetId, block: Multihash | None, n: int) -> Callable[[], bool]:
    """A predicate: ``n`` validators' ``reproduced`` on ``block`` held in ``ws``."""
    return lambda: reproduced_by(ws, did, block) >= n


async def wait_until(cond: Callable[[], bool], what: str) -> float:
    """Poll ``cond`` every 20 ms; the time (perf_counter) it first held."""
    deadline = time.perf_counter() + WAIT_S
    while time.perf_counter() < deadline:
        if await asyncio.to_thread(cond):
            return time.perf_counter()
        await asyncio.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")


async def network(n: int, engine: EngineClient, tmp: Path, heads: int, rows: int) -> None:
    """One publisher, ``n`` validators, one plain node: head-to-attestations latency."""
    base = tmp / f"net{n}"
    pub_ws = make_project(base / "pub")
    append_root(pub_ws, base, 0, rows)
    pull_derivative(pub_ws, "deriv", engine=engine)
    did = pub_ws.resolve("deriv").id
    nodes: list[NodeDaemon] = []
    async with contextlib.AsyncExitStack() as stack:

        async def start(ws: Workspace, cfg: NodeConfig) -> NodeDaemon:
            d = NodeDaemon(ws, cfg, engine=engine)
            await d.start()
            stack.push_async_callback(d.stop)
            nodes.append(d)
            return d

        pub = await start(pub_ws, NET_CFG)
        validators = []
        for i in range(n):
            cfg = NodeConfig(
                **{
                    **{f: getattr(NET_CFG, f) for f in ("http_port", "head_poll_interval_s",
                                                         "pull_retry_delay_s", "log_level")},
                    "bootstrap": (pub.host.addrs[0],),
                    "validator": True,
                    "follow": ("all",),
                }
            )  # fmt: skip
            validators.append(await start(Workspace.init(base / f"v{i}"), cfg))
        plain_cfg = NodeConfig(
            http_port=0,
            head_poll_interval_s=0.05,
            log_level="warning",
            bootstrap=(validators[0].host.addrs[0],),
            follow=("all",),
        )
        await start(Workspace.init(base / "plain"), plain_cfg)
        first = pub_ws.get("deriv").head()
        t0 = time.perf_counter()
        await asyncio.gather(*(wait_until(attested(d.ws, did, first, n), "warm-up") for d in nodes))
        print(f"  N={n}: network of {len(nodes)} nodes warm after {time.perf_counter() - t0:.1f} s")
        latencies: list[float] = []
        ratios: list[float] = []
        for k in range(heads):
            append_root(pub_ws, base, (k + 1) * rows, rows)
            t_start = time.perf_counter()
            await asyncio.to_thread(pull_derivative, pub_ws, "deriv", engine=engine)
            t_head = time.perf_counter()
            original = t_head - t_start
            head = pub_ws.get("deriv").head()
            done = await asyncio.gather(
                *(wait_until(attested(d.ws, did, head, n), "attestations") for d in nodes)
            )
            latency = max(done) - t_head
            latencies.append(latency)
            ratios.append(latency / original)
            first_s = min(done) - t_head
            print(f"  N={n} head {k + 1}: original transform {original:.2f} s; "
                  f"{n} attestations on all {len(nodes)} nodes after {latency:.2f} s "
                  f"(first node {first_s:.2f} s; ratio {latency / original:.1f}x)")  # fmt: skip
        backlog = sum(v.status_info()["validator"]["backlog"] for v in validators)
        print(f"  N={n}: median head -> {n} attestations everywhere "
              f"{statistics.median(latencies):.2f} s (x{statistics.median(ratios):.1f} the "
              f"original transform); validators' backlog at the end: {backlog}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--validators", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--network", default="2,4", help="validator counts (0: skip)")
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--net-rows", type=int, default=5_000)
    args = ap.parse_args()
    sizes = [int(x) for x in args.network.split(",") if int(x) > 0]
    with tempfile.TemporaryDirectory(prefix="odf-bench-validate-") as tmp_name:
        tmp = Path(tmp_name)
        ws = make_project(tmp / "project")
        started = time.monotonic()
        records = args.rounds * args.rows
        with (
            start_engine_process(master=args.master, log_path=tmp / "engine.log") as proc,
            EngineClient(proc.address) as engine,
        ):
            print(f"engine start-up: {time.monotonic() - started:.1f} s")
            pulls: list[float] = []
            for r in range(args.rounds):
                append_root(ws, tmp, r * args.rows, args.rows)
                t0 = time.perf_counter()
                pull_derivative(ws, "deriv", engine=engine)
                pulls.append(time.perf_counter() - t0)
            original = sum(pulls)
            print(f"rounds: {args.rounds} x {args.rows} rows = {records} input records")
            median = statistics.median(pulls)
            print(f"original pulls: total {original:.2f} s, median {median:.2f} s, "
                  f"{records / original:,.0f} records/s")  # fmt: skip
            derived: list[float] = []
            for i in range(args.validators):
                validator = Validator(ws, KeyPair.generate(), engine=engine)
                t0 = time.perf_counter()
                run = validator.validate("deriv")
                elapsed = time.perf_counter() - t0
                assert run.count(Verdict.REPRODUCED) == args.rounds, run
                t0 = time.perf_counter()
                root = validator.validate("src")
                root_s = time.perf_counter() - t0
                assert root.count(Verdict.REPRODUCED) == args.rounds, root
                derived.append(elapsed)
                print(f"validator {i + 1}: derivative {elapsed:.2f} s "
                      f"({records / elapsed:,.0f} records/s, "
                      f"{elapsed / args.rounds:.2f} s per block); root objects {root_s:.2f} s "
                      f"({records / root_s:,.0f} records/s)")  # fmt: skip
            best = min(derived)
            print(f"ratio validator / original throughput: {original / best:.2f} "
                  f"(best of {len(derived)} validators)")  # fmt: skip
            if sizes:
                print(f"network: {args.heads} new heads of {args.net_rows} rows each")
            for n in sizes:
                asyncio.run(network(n, engine, tmp, args.heads, args.net_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
