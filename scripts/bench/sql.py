"""``odf sql`` latency: the embedded DataFusion engine vs a bare DataFusion process.

Usage: .venv/bin/python scripts/bench/sql.py [--rows 5000000] [--slices 5] [--repeat 7]
       [--spark]

Builds a workspace with one root dataset of ``--rows`` rows in ``--slices`` AddData
slices (written through the storage API: offset, op, system_time, event_time, city with
1000 distinct values, population), then times, as whole processes, ``--repeat`` rounds
of (the runs alternate within a round, so load affects every side alike):

* baseline: a bare ``python -c`` that imports ``datafusion``, registers the same Parquet
  files (the dataset's slices) and runs the same GROUP BY, printing the result -- the
  "DataFusion process over the same files" (DuckDB is not installed here);
* ``odf sql`` GROUP BY (the same query, tables named by alias), ``count(*)``, ``SELECT 1``;
* floors: ``python -c pass`` and ``odf --help`` (CLI start-up);
* with ``--spark``: ``odf sql --engine spark`` GROUP BY through the warm shared engine
  (started before timing; stopped at the end).

Prints every median and the ratios measured in this run: baseline/odf for the GROUP BY
(target >= 0.5: at most twice the bare process), and ``SELECT 1`` (target <= 0.15 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyarrow as pa
import pyarrow.parquet as pq

ALIAS = "bench.cities"
GROUP_BY = (
    "SELECT city, count(*) AS n, sum(population) AS total, max(event_time) AS latest "
    "FROM {table} GROUP BY city ORDER BY city"
)
COUNT = "SELECT count(*) AS n FROM {table}"
BASELINE = """
import sys
import datafusion
ctx = datafusion.SessionContext()
ctx.register_parquet("t", sys.argv[1], file_extension=".parquet")
table = ctx.sql(sys.argv[2]).to_arrow_table()
print(table.num_rows, table.slice(0, 3).to_pylist())
"""


def odf_command() -> list[str]:
    script = Path(sys.executable).parent / "odf"
    return [str(script)] if script.exists() else [sys.executable, "-m", "node.cli"]


def build(root: Path, rows: int, slices: int) -> Path:
    """A workspace with the dataset; returns a folder linking exactly its slices."""
    from fbs.arrow_schema import data_schema_from_arrow
    from fbs.model import (
        AddData,
        DatasetKind,
        DatasetSnapshot,
        DataSlice,
        OffsetInterval,
        SetDataSchema,
    )
    from fbs.timestamp import Timestamp
    from storage.hashing import logical_hash_parquet, physical_hash_file
    from storage.workspace import Workspace

    ts = pa.timestamp("ms", tz="UTC")
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("system_time", ts, nullable=False),
            pa.field("event_time", ts),
            pa.field("city", pa.string()),
            pa.field("population", pa.int64()),
        ]
    )
    ws = Workspace.init(root)
    ds = ws.add_snapshot(DatasetSnapshot(name=ALIAS, kind=DatasetKind.Root, metadata=()))
    clock = int(time.time() * 1000)
    head = ds.commit(
        SetDataSchema(schema=data_schema_from_arrow(schema)),
        system_time=Timestamp(clock * 1_000_000),
        expected_head=ds.head(),
    ).new_head
    cities = pa.array([f"city-{i:04}" for i in range(1000)])
    files = root.parent / "files"
    files.mkdir()
    per = rows // slices
    prev = None
    for s in range(slices):
        start = s * per
        idx = pa.array(range(start, start + per), pa.int64())
        table = pa.table(
            {
                "offset": idx,
                "op": pa.array([0] * per, pa.int32()),
                "system_time": pa.array([clock + s] * per, ts),
                "event_time": pa.array(range(clock - per, clock), pa.int64()).cast(ts),
                "city": cities.take(pa.array([i % 1000 for i in range(start, start + per)])),
                "population": idx,
            },
            schema=schema,
        )
        path = root.parent / f"slice-{s}.parquet"
        pq.write_table(table, path)
        physical, size = physical_hash_file(path)
        event = AddData(
            prev_offset=prev,
            new_data=DataSlice(
                logical_hash=logical_hash_parquet(path),
                physical_hash=physical,
                offset_interval=OffsetInterval(start=start, end=start + per - 1),
                size=size,
            ),
        )
        when = Timestamp((clock + s + 1) * 1_000_000)
        head = ds.commit(event, system_time=when, expected_head=head, data_file=path).new_head
        os.link(ds.layout.data.path_of(physical), files / f"{physical.to_multibase()}.parquet")
        path.unlink()
        prev = start + per - 1
    return files


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}... exited {proc.returncode}: {proc.stderr}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--slices", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--spark", action="store_true", help="also time --engine spark (warm)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="odf-bench-sql-") as tmp:
        root = Path(tmp) / "ws"
        t0 = time.perf_counter()
        files = build(root, args.rows, args.slices)
        print(f"built {args.rows} rows in {args.slices} slices in {time.perf_counter() - t0:.1f} s")
        env = {**os.environ, "ODF_WORKSPACE": str(root)}
        odf = odf_command()
        table = f"`{ALIAS}`"
        cases: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "odf --help": [*odf, "--help"],
            "baseline: datafusion process GROUP BY": [
                sys.executable,
                "-c",
                BASELINE,
                str(files),
                GROUP_BY.format(table="t"),
            ],
            "odf sql GROUP BY": [*odf, "sql", GROUP_BY.format(table=table)],
            "odf sql count(*)": [*odf, "sql", COUNT.format(table=table)],
            "odf sql SELECT 1": [*odf, "sql", "SELECT 1"],
        }
        if args.spark:
            cases["odf sql --engine spark GROUP BY"] = [
                *odf,
                "sql",
                "--engine",
                "spark",
                GROUP_BY.format(table=table),
            ]
            print("starting the shared Spark engine (one warm-up query) ...")
            timed(cases["odf sql --engine spark GROUP BY"], env)
        try:
            for cmd in cases.values():  # warm the page cache and .pyc files
                timed(cmd, env)
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.repeat):
                for name, cmd in cases.items():
                    times[name].append(timed(cmd, env))
        finally:
            if args.spark:
                subprocess.run([*odf, "engine", "stop"], env=env, capture_output=True)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"\nmedians over {args.repeat} alternating rounds ({os.cpu_count()} cores):")
    for name, m in med.items():
        runs = " ".join(f"{t:.2f}" for t in times[name])
        print(f"  {name:40} {m:6.3f} s   [{runs}]")
    base = med["baseline: datafusion process GROUP BY"]
    ratio = base / med["odf sql GROUP BY"]
    print(f"\nGROUP BY: baseline / odf sql = {ratio:.2f} (target >= 0.5)")
    if args.spark:
        spark = med["odf sql --engine spark GROUP BY"]
        print(f"GROUP BY: baseline / odf sql --engine spark = {base / spark:.2f}")
    s1 = med["odf sql SELECT 1"]
    print(
        f"SELECT 1: {s1:.3f} s (target <= 0.15 s); odf --help {med['odf --help']:.3f} s, "
        f"python -c pass {med['python -c pass']:.3f} s"
    )


if __name__ == "__main__":
    main()
