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
from benchdata import TS, build_root, system_schema

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
    from storage.workspace import Workspace

    schema = system_schema(pa.field("city", pa.string()), pa.field("population", pa.int64()))
    cities = pa.array([f"city-{i:04}" for i in range(1000)])
    per = rows // slices

    def make(s: int, start: int, clock: int) -> pa.Table:
        idx = pa.array(range(start, start + per), pa.int64())
        return pa.table(
            {
                "offset": idx,
                "op": pa.array([0] * per, pa.int32()),
                "system_time": pa.array([clock + s] * per, TS),
                "event_time": pa.array(range(clock - per, clock), pa.int64()).cast(TS),
                "city": cities.take(pa.array([i % 1000 for i in range(start, start + per)])),
                "population": idx,
            },
            schema=schema,
        )

    _ds, slice_files = build_root(
        Workspace.init(root), ALIAS, schema, slices, per, make, root.parent
    )
    files = root.parent / "files"
    files.mkdir()
    for f in slice_files:
        os.link(f, files / f"{f.name}.parquet")
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
