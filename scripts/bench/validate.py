"""Validator replay throughput (records/s) vs the original transform's, on one warm engine.

Usage: .venv/bin/python scripts/bench/validate.py [--rounds 5] [--rows 20000]
       [--validators 2] [--master local[2]]

Builds a root dataset of ``--rounds`` slices of ``--rows`` rows and a map/filter
derivative pulled once per round (timed: plan + engine + hashing + commit). Then
``--validators`` validator keys each run `node.validator.Validator.validate` on the
derivative (per block: object checks incl. the logical hash, one engine replay, one
signature and a durable store write) and on the root (object checks only). Prints
input records/s of the original pulls and of each validator run, and the ratio.

Not measured yet: time from a new head to N attestations on every node (needs the
daemon's gossip wiring).
One Spark JVM at a time: the engine is started here and stopped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import QUERY, append_root  # scripts/bench/replay.py

from engine.client import EngineClient
from engine.process import start_engine_process
from fbs.keys import KeyPair
from fbs.model import (
    DatasetKind,
    DatasetSnapshot,
    SetTransform,
    SqlQueryStep,
    TransformInput,
    TransformSql,
)
from node.transform import pull_derivative
from node.validator import Validator
from p2p.attestation import Verdict
from storage.workspace import Workspace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--validators", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-bench-validate-") as tmp_name:
        tmp = Path(tmp_name)
        ws = Workspace.init(tmp / "project")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
