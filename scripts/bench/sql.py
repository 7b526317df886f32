"""``odf sql`` latency: the embedded DataFusion engine vs bare DataFusion and DuckDB processes.

Usage: .venv/bin/python scripts/bench/sql.py [--rows 5000000] [--slices 5] [--repeat 7]
       [--spark] [--duckdb PYTHON] [--no-bytecode]

Builds a workspace with one root dataset of ``--rows`` rows in ``--slices`` AddData
slices (written through the storage API: offset, op, system_time, event_time, city with
1000 distinct values, population), then times, as whole processes, ``--repeat`` rounds
of (the runs alternate within a round, so load affects every side alike):

* baseline: a bare ``python -c`` that imports ``datafusion``, registers the same Parquet
  files (the dataset's slices) and runs the same GROUP BY, printing the result -- the
  "DataFusion process over the same files"; the same for ``count(*)`` and ``SELECT 1``;
* DuckDB: the same three queries in a ``python -c`` that imports ``duckdb`` and reads the
  same files with ``read_parquet``, printing the result -- the "DuckDB process". DuckDB is
  no dependency of the project: ``--duckdb PYTHON`` names an interpreter that has it (e.g.
  a scratch venv with ``pip install duckdb``); by default this interpreter if it has it,
  else the DuckDB rows are left out (said so);
* ``odf sql`` GROUP BY (the same query, tables named by alias), ``count(*)``, ``SELECT 1``;
* floors: ``python -c pass`` and ``odf --help`` (CLI start-up);
* with ``--spark``: ``odf sql --engine spark`` GROUP BY through the warm shared engine
  (started before timing; stopped at the end).

Python modules run from compiled bytecode, as an installed package does (see
``scripts/bench/cli.py``; ``--no-bytecode`` compiles them at each start instead).

Prints every median (with the runs) and the ratios measured in this run: baseline/odf for
the GROUP BY (target >= 0.5 of DuckDB: at most twice the process), and ``SELECT 1`` /
``count(*)`` against ``python -c pass`` and DuckDB (target for ``SELECT 1``: <= 0.15 s on
an idle machine, where ``python -c pass`` takes about 0.024 s: about 6x).
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
from cli import bytecode_env, children_cpu_s

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
DUCKDB = """
import sys
import duckdb
con = duckdb.connect()
con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{sys.argv[1]}/*.parquet')")
rows = con.execute(sys.argv[2]).fetchall()
print(len(rows), rows[:3])
"""
SELECT_1 = "SELECT 1"


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


def duckdb_python(given: str | None) -> str | None:
    """An interpreter that can import duckdb: ``given``, else this one if it can."""
    candidates = [given] if given else [sys.executable]
    for python in candidates:
        probe = subprocess.run([python, "-c", "import duckdb"], capture_output=True)
        if probe.returncode == 0:
            return python
        if given:
            raise SystemExit(f"{given} cannot import duckdb")
    return None


#: CPU seconds (user + system) of each timed run, by command (`timed` appends).
CPU: dict[str, list[float]] = {}


def timed(cmd: list[str], env: dict[str, str], name: str | None = None) -> float:
    """Wall seconds of one run of ``cmd``; its CPU seconds go to ``CPU[name]``."""
    c0, t0 = children_cpu_s(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if name is not None:
        CPU.setdefault(name, []).append(children_cpu_s() - c0)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}... exited {proc.returncode}: {proc.stderr}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--slices", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--spark", action="store_true", help="also time --engine spark (warm)")
    ap.add_argument("--duckdb", metavar="PYTHON", help="an interpreter that has duckdb")
    ap.add_argument("--no-bytecode", action="store_true", help="compile every module at each start")
    args = ap.parse_args()
    duck = duckdb_python(args.duckdb)
    if duck is None:
        print("duckdb is not importable here: DuckDB rows left out (see --duckdb)")

    with tempfile.TemporaryDirectory(prefix="odf-bench-sql-") as tmp:
        root = Path(tmp) / "ws"
        t0 = time.perf_counter()
        files = build(root, args.rows, args.slices)
        print(f"built {args.rows} rows in {args.slices} slices in {time.perf_counter() - t0:.1f} s")
        env = {**os.environ, "ODF_WORKSPACE": str(root)}
        if not args.no_bytecode:
            env = bytecode_env(env, Path(tmp) / "pycache")
        odf = odf_command()
        table = f"`{ALIAS}`"
        cases: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "odf --help": [*odf, "--help"],
        }
        queries = {"GROUP BY": GROUP_BY, "count(*)": COUNT, "SELECT 1": SELECT_1}
        for q, text in queries.items():
            cases[f"datafusion process {q}"] = [
                sys.executable, "-c", BASELINE, str(files), text.format(table="t")
            ]  # fmt: skip
            if duck is not None:
                cases[f"duckdb process {q}"] = [
                    duck, "-c", DUCKDB, str(files), text.format(table="t")
                ]  # fmt: skip
            cases[f"odf sql {q}"] = [*odf, "sql", text.format(table=table)]
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
                    times[name].append(timed(cmd, env, name))
        finally:
            if args.spark:
                subprocess.run([*odf, "engine", "stop"], env=env, capture_output=True)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    cpu = {name: statistics.median(ts) for name, ts in CPU.items()}
    print(f"\nmedians over {args.repeat} alternating rounds ({os.cpu_count()} cores):")
    for name, m in med.items():
        runs = " ".join(f"{t:.2f}" for t in times[name])
        print(f"  {name:40} {m:6.3f} s  cpu {cpu[name]:6.3f} s  [{runs}]")
    floor = med["python -c pass"]
    head = f"{'odf sql s':>10} {'x python':>9} {'datafusion/odf':>15} {'duckdb/odf':>11}"
    print(f"\n{'query':<10} {head} {'cpu: x python':>14} {'duckdb/odf':>11}")
    for q in ("GROUP BY", "count(*)", "SELECT 1"):
        odf_s, odf_cpu = med[f"odf sql {q}"], cpu[f"odf sql {q}"]
        fusion = med[f"datafusion process {q}"] / odf_s
        ducks = f"{med[f'duckdb process {q}'] / odf_s:.2f}" if duck is not None else "-"
        duck_cpu = f"{cpu[f'duckdb process {q}'] / odf_cpu:.2f}" if duck is not None else "-"
        print(
            f"{q:<10} {odf_s:10.3f} {odf_s / floor:9.1f} {fusion:15.2f} {ducks:>11}"
            f" {odf_cpu / cpu['python -c pass']:14.1f} {duck_cpu:>11}"
        )
    print(
        "(targets: GROUP BY process/odf >= 0.5; SELECT 1 <= 0.15 s on an idle machine, "
        f"about 6x python -c pass; python -c pass here {floor:.3f} s, "
        f"odf --help {med['odf --help']:.3f} s)"
    )
    if args.spark:
        spark = med["odf sql --engine spark GROUP BY"]
        base = med["datafusion process GROUP BY"]
        print(f"GROUP BY: datafusion process / odf sql --engine spark = {base / spark:.2f}")


if __name__ == "__main__":
    main()
