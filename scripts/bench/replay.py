"""Replay verification time vs the original transform time, through one warm engine.

Usage: .venv/bin/python scripts/bench/replay.py [--rounds 5] [--rows 20000] [--master local[2]]

Builds a root dataset of ``--rounds`` AddData slices of ``--rows`` rows each and a
map/filter derivative pulled once per round (timing each pull: plan + engine + hashing +
commit), then times `node.validation.replay.verify_replay` of the derivative (integrity checks plus
one engine run per ExecuteTransform). Prints the per-transform times and the ratio
replay / original (both sides run the same number of engine calls on the same engine,
so the ratio is about the coordinator's overhead: integrity hashing vs committing).
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

import pyarrow as pa
import pyarrow.parquet as pq

from engine.client import EngineClient
from engine.process import start_engine_process
from fbs.arrow_schema import data_schema_from_arrow
from fbs.model import (
    AddData,
    DatasetKind,
    DatasetSnapshot,
    DataSlice,
    OffsetInterval,
    SetDataSchema,
    SetTransform,
    SqlQueryStep,
    TransformInput,
    TransformSql,
)
from node.transform import pull_derivative
from node.validation.replay import verify_replay
from storage.hashing import logical_hash_parquet, physical_hash_file
from storage.workspace import Workspace

TS = pa.timestamp("ms", tz="UTC")
QUERY = "SELECT event_time, city, population * 2 AS p FROM src WHERE population % 3 <> 0"


def append_root(ws: Workspace, tmp: Path, start: int, rows: int) -> None:
    ds = ws.get("src")
    state = ds.state()
    assert state is not None
    head = state.head
    now_ms = time.time_ns() // 1_000_000
    table = pa.table(
        {
            "offset": pa.array(range(start, start + rows), pa.int64()),
            "op": pa.array([0] * rows, pa.int32()),
            "system_time": pa.array([now_ms] * rows, TS),
            "event_time": pa.array([now_ms - rows + i for i in range(rows)], TS),
            "city": pa.array([f"c{i % 97}" for i in range(rows)], pa.string()),
            "population": pa.array(range(rows), pa.int64()),
        }
    )
    if state.data_schema is None:
        schema = SetDataSchema(schema=data_schema_from_arrow(table.schema))
        head = ds.commit(schema, expected_head=head).new_head
    path = tmp / f"slice-{start}.parquet"
    pq.write_table(table, path)
    physical, size = physical_hash_file(path)
    event = AddData(
        prev_offset=state.last_offset,
        new_data=DataSlice(
            logical_hash=logical_hash_parquet(path),
            physical_hash=physical,
            offset_interval=OffsetInterval(start=start, end=start + rows - 1),
            size=size,
        ),
    )
    ds.commit(event, expected_head=head, data_file=path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-bench-replay-") as tmp_name:
        tmp = Path(tmp_name)
        ws = Workspace.init(tmp / "project")
        ws.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=()))
        ws.add_snapshot(
            DatasetSnapshot(
                name="deriv",
                kind=DatasetKind.Derivative,
                metadata=(
                    SetTransform(
                        inputs=(TransformInput(dataset_ref="src"),),
                        transform=TransformSql(
                            engine="spark", queries=(SqlQueryStep(query=QUERY),)
                        ),
                    ),
                ),
            )
        )
        started = time.monotonic()
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
            t0 = time.perf_counter()
            report = verify_replay(ws, "deriv", engine=engine)
            replay = time.perf_counter() - t0
        assert report.ok, report
        original = sum(pulls)
        print(f"rounds: {args.rounds} x {args.rows} rows; transforms replayed: "
              f"{report.transforms_replayed}")  # fmt: skip
        print(f"original pulls: total {original:.2f} s, median {statistics.median(pulls):.2f} s "
              f"(first {pulls[0]:.2f} s)")  # fmt: skip
        print(f"replay verify:  total {replay:.2f} s, per transform "
              f"{replay / max(1, report.transforms_replayed):.2f} s")  # fmt: skip
        print(f"ratio replay / original: {replay / original:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
