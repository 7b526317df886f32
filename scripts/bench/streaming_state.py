"""State a GROUP BY and a global aggregate keep in their checkpoints, pull after pull.

Usage: .venv/bin/python scripts/bench/streaming_state.py [--batches 20] [--rows 2000000]
       [--keys 128] [--shapes group_by,global] [--retract 0.0] [--master local[2]]
       [--driver-memory 2g]

Writes ``--batches`` slices of ``--rows`` rows each (ODF-shaped: offset, op, system_time,
event_time increasing one second per row, ``k`` among ``--keys`` keys, ``v`` an integer)
with pyarrow (``--retract P``: in every slice the last P of its rows take back, ``-R``, its
first P, so the input retracts from the first pull and each ``min``/``max`` keeps its
values), then for each shape runs, with the engine in this process
(`engine.transform.execute_transform`, the previous pull's checkpoint carried over as
`node.transform` does):

1. incremental: one pull after each slice. Per pull: its time, the state mode its
   checkpoint records, the newest checkpoint's size and the output rows;
2. baseline (a): the same query as one engine run over all slices;
3. baseline (b): a plain Spark batch job over all slices (``groupBy(k).agg(...)`` or
   ``agg(...)``, written to Parquet);
4. baseline (c): (b)'s plain job once per slice, the floor of any engine that runs one
   Spark job per pull.

Shapes (``--shapes``)::

    group_by:  SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s,
               min(v) AS lo FROM ev GROUP BY k
    global:    SELECT max(event_time) AS event_time, count(*) AS n, sum(v) AS s,
               min(v) AS lo, max(v) AS hi FROM ev
    changelog: group_by with ``HAVING count(*) > 0`` (not decomposable: it keeps every
               input row, as every GROUP BY did before accumulators; for comparison at
               small sizes)

Prints per shape the ratios a bounded state must meet: checkpoint at the last pull vs
pull 2 (target <= 1.2; under 1 MB for 128 keys), the median time of the last 3 pulls vs
the median of pulls 2-4 (target <= 1.2), all checkpoints' bytes vs the input's bytes
(target < 5%), and (b)/incremental and (b)/(c) (the floor). Checks that the folded
incremental output equals (a)'s output (OK / MISMATCH, exit 1 on mismatch).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engine.streaming_helpers import InputStream, StreamRunner, fold, state_mode

SHAPES = {
    "group_by": "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s, "
    "min(v) AS lo FROM ev GROUP BY k",
    "global": "SELECT max(event_time) AS event_time, count(*) AS n, sum(v) AS s, "
    "min(v) AS lo, max(v) AS hi FROM ev",
    "changelog": "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s, "
    "min(v) AS lo FROM ev GROUP BY k HAVING count(*) > 0",
}
TS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([("event_time", TS), ("k", pa.string()), ("v", pa.int64())])
T0_MS = 1_577_836_800_000  # 2020-01-01


def write_slices(
    folder: Path, batches: int, rows: int, keys: int, retract: float = 0.0
) -> list[Path]:
    """The input's slices, ODF-shaped, written with pyarrow; the last ``retract`` of each
    slice's rows take back its first rows (same data, ``op`` 1)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    names = np.array([f"key-{i:04d}" for i in range(keys)], dtype=object)
    paths = []
    for b in range(batches):
        start = b * rows
        offsets = np.arange(start, start + rows, dtype=np.int64)
        times, ks = T0_MS + offsets * 1000, rng.integers(0, keys, rows)
        vs, ops = rng.integers(-1000, 1001, rows, dtype=np.int64), np.zeros(rows, np.int32)
        m = int(rows * retract)
        if m:
            times[rows - m :], ks[rows - m :], vs[rows - m :] = times[:m], ks[:m], vs[:m]
            ops[rows - m :] = 1
        table = pa.table(
            {
                "offset": offsets,
                "op": pa.array(ops),
                "system_time": pa.array(np.zeros(rows, dtype=np.int64)).cast(TS),
                "event_time": pa.array(times).cast(TS),
                "k": pa.array(names[ks], pa.string()),
                "v": pa.array(vs),
            }
        )
        path = folder / f"slice-{b:03d}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def feed(ev: InputStream, path: Path) -> None:
    """Give ``ev`` one more slice (as `InputStream.append` does, from a written file)."""
    meta = pq.read_metadata(path)
    n = meta.num_rows
    last = pq.read_table(path, columns=["event_time"]).column(0)[-1].value
    ev.slices.append(path)
    start = ev.pending[0] if ev.pending else ev.next_offset
    ev.pending = (start, ev.next_offset + n - 1)
    ev.next_offset += n
    ev.watermark_ms = int(last)
    ev._new_watermark = True  # type: ignore[attr-defined]


def incremental(
    session: Any, query: str, slices: list[Path], work: Path
) -> tuple[StreamRunner, list[tuple[float, str, int, int]]]:
    """One pull per slice; per pull (seconds, mode, checkpoint bytes, rows out)."""
    ev = InputStream("ev", SCHEMA, work / "unused")
    runner = StreamRunner(session, [ev], [(None, query)], work / "out")
    pulls = []
    for path in slices:
        feed(ev, path)
        started = time.perf_counter()
        out = runner.run()
        seconds = time.perf_counter() - started
        assert runner.checkpoint is not None
        size = runner.checkpoint.stat().st_size
        pulls.append((seconds, state_mode(runner.checkpoint), size, out.num_rows))
    return runner, pulls


def plain_job(session: Any, shape: str, paths: list[Path], out: Path) -> float:
    """The query as a plain Spark batch job over ``paths``, written to Parquet."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    df = session.read.parquet(*(str(p) for p in paths))
    aggs = [F.max("event_time"), F.count(F.lit(1)), F.sum("v"), F.min("v")]
    df = df.agg(*aggs, F.max("v")) if shape == "global" else df.groupBy("k").agg(*aggs)
    df.coalesce(1).write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - started


def bench_shape(session: Any, shape: str, slices: list[Path], work: Path) -> bool:
    query = SHAPES[shape]
    runner, pulls = incremental(session, query, slices, work / "inc")
    print(f"\n== {shape}: {query}")
    print(f"{'pull':>4} {'seconds':>8} {'mode':>11} {'checkpoint':>12} {'rows out':>9}")
    for i, (seconds, mode, size, rows) in enumerate(pulls):
        print(f"{i + 1:>4} {seconds:>8.2f} {mode:>11} {size:>12,} {rows:>9}")
    started = time.perf_counter()
    single, _ = _one_run(session, query, slices, work / "one")
    one_seconds = time.perf_counter() - started
    batch = plain_job(session, shape, slices, work / "batch")
    floor = [plain_job(session, shape, [p], work / f"floor-{i}") for i, p in enumerate(slices)]
    times = [p[0] for p in pulls]
    sizes = [p[2] for p in pulls]
    input_bytes = sum(p.stat().st_size for p in slices)
    ok = fold(runner.outputs) == fold(single.outputs)
    total = sum(times)
    print(f"checkpoint pull {len(sizes)} / pull 2: {sizes[-1] / sizes[1]:.2f} (target <= 1.2)")
    print(f"checkpoint pull {len(sizes)}: {sizes[-1]:,} bytes (target < 1 MB for 128 keys)")
    print(
        f"time median of last 3 / median of pulls 2-4: "
        f"{statistics.median(times[-3:]) / statistics.median(times[1:4]):.2f} (target <= 1.2)"
    )
    print(
        f"all checkpoints / input: {sum(sizes):,} / {input_bytes:,} bytes = "
        f"{sum(sizes) / input_bytes:.4%} (target < 5%)"
    )
    print(
        f"incremental total {total:.2f} s; (a) one engine run over all slices {one_seconds:.2f} s"
    )
    print(f"(b) plain batch job {batch:.2f} s; (c) plain job per slice {sum(floor):.2f} s")
    print(
        f"(b)/incremental {batch / total:.3f}; floor (b)/(c) {batch / sum(floor):.3f}; "
        f"(c)/incremental {sum(floor) / total:.3f}"
    )
    print("folded output vs one run over all slices:", "OK" if ok else "MISMATCH")
    return ok


def _one_run(session: Any, query: str, slices: list[Path], work: Path) -> tuple[StreamRunner, None]:
    """Baseline (a): one engine run over every slice."""
    ev = InputStream("ev", SCHEMA, work / "unused")
    runner = StreamRunner(session, [ev], [(None, query)], work / "out")
    for path in slices:
        feed(ev, path)
    runner.run()
    return runner, None


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per batch")
    parser.add_argument("--keys", type=int, default=128)
    parser.add_argument("--shapes", default="group_by,global")
    parser.add_argument("--retract", type=float, default=0.0, help="share of rows taken back")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    args = parser.parse_args()

    from engine.spark import SparkSettings, create_session

    session = create_session(SparkSettings(master=args.master, driver_memory=args.driver_memory))
    print(
        f"{args.batches} batches x {args.rows:,} rows, {args.keys} keys, "
        f"{args.retract:.0%} retracted, master {args.master}"
    )
    results: dict[str, bool] = collections.OrderedDict()
    with tempfile.TemporaryDirectory(prefix="odf-bench-state-") as tmp:
        slices = write_slices(Path(tmp) / "in", args.batches, args.rows, args.keys, args.retract)
        # Warm-up (class loading, JIT), not measured: a few pulls and plain jobs.
        for shape in args.shapes.split(","):
            incremental(session, SHAPES[shape], slices[:3], Path(tmp) / f"warm-{shape}")
            plain_job(session, shape, slices[:1], Path(tmp) / f"warm-{shape}-job")
        for shape in args.shapes.split(","):
            results[shape] = bench_shape(session, shape, slices, Path(tmp) / shape)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
