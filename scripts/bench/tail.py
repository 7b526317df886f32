"""``odf tail`` on a long history: it reads the newest slices, not all of them.

Usage: .venv/bin/python scripts/bench/tail.py [--slices 200] [--rows 5000000] [--repeat 9]
       [--full]

Builds a workspace with one root dataset of ``--slices`` AddData slices holding ``--rows``
records in all (a few cheap columns: offset, op, system_time, event_time and an int64),
then times, in the same run:

* one slice: ``pyarrow.parquet.read_table`` of the newest slice file (the baseline: what
  showing the end of the dataset needs at least);
* ``DatasetView.tail(10)`` in-process, warm (slices remembered as verified) and cold (the
  slices it reads are hashed first: `storage.verified`), with the ratio to one slice;
* ``odf tail -n 10 DS`` as a whole process (median wall time; target <= 0.3 s on an idle
  machine at 200 slices and 50M rows), next to ``python -c "import pyarrow.parquet"``;
* for comparison, the whole-table read that ``tail`` did before (``to_arrow``), when the
  dataset has at most 10M rows.

``--full`` builds the target size: 200 slices of 50M rows in all (takes minutes: every
slice is hashed logically when committed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from benchdata import TS, build_root, system_schema

ALIAS = "bench.tail"


def build(root: Path, slices: int, rows: int) -> Path:
    """The workspace with the dataset; returns the newest slice's file."""
    from storage.workspace import Workspace

    schema = system_schema(pa.field("value", pa.int64()))
    per = rows // slices

    def make(s: int, start: int, clock: int) -> pa.Table:
        return pa.table(
            {
                "offset": pa.array(np.arange(start, start + per, dtype=np.int64)),
                "op": pa.array(np.zeros(per, dtype=np.int32)),
                "system_time": pa.array(np.full(per, clock + s, dtype=np.int64)).cast(TS),
                "event_time": pa.array(np.arange(per, dtype=np.int64) + clock - per).cast(TS),
                "value": pa.array(np.arange(per, dtype=np.int64) % 1000),
            },
            schema=schema,
        )

    ws = Workspace.init(root)
    ds, files = build_root(ws, ALIAS, schema, slices, per, make, root.parent)
    ds.flush_state_cache()
    return files[-1]


def median_of(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """Median, min and max wall time of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def row(name: str, t: tuple[float, float, float], base: float | None, note: str = "") -> None:
    ratio = f"{t[0] / base:8.2f}" if base else f"{'':8}"
    print(f"{name:<40} {t[0]:9.4f} {t[1]:7.4f}..{t[2]:7.4f} {ratio}  {note}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--slices", type=int, default=200)
    ap.add_argument("--rows", type=int, default=5_000_000, help="records in all")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--full", action="store_true", help="200 slices, 50M rows (slow to build)")
    args = ap.parse_args()
    if args.full:
        args.slices, args.rows = 200, 50_000_000
    import storage.verified as verified
    from node.api import open_workspace

    with tempfile.TemporaryDirectory(prefix="odf-bench-tail-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        t0 = time.perf_counter()
        newest = build(project, args.slices, args.rows)
        print(f"built {args.slices} slices, {args.rows:,} rows in {time.perf_counter() - t0:.0f} s")

        def tail() -> pa.Table:
            return open_workspace(project).dataset(ALIAS).tail(10)

        def tail_cold() -> pa.Table:
            verified.forget_all()
            for record in (project / ".odf" / "cache" / "verified").glob("*.json"):
                record.unlink()
            return tail()

        assert tail().num_rows == 10
        one = median_of(lambda: pq.read_table(newest), args.repeat)
        print(f"{'case':<40} {'median s':>9} {'min..max s':>16} {'x slice':>8}")
        row("read the newest slice (pyarrow)", one, one[0])
        row("DatasetView.tail(10), warm", median_of(tail, args.repeat), one[0])
        row("DatasetView.tail(10), cold (hashed)", median_of(tail_cold, args.repeat), one[0])
        env = {**os.environ, "ODF_WORKSPACE": str(project)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package runs from bytecode
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        odf = [sys.executable, "-m", "node.cli", "tail", "-n", "10", ALIAS]
        floor = [sys.executable, "-c", "import pyarrow.parquet"]
        for argv in (odf, floor):  # warm bytecode and page cache
            subprocess.run(argv, env=env, check=True, capture_output=True)

        def run(argv: list[str]) -> Callable[[], object]:
            return lambda: subprocess.run(argv, env=env, check=True, capture_output=True)

        row("python -c 'import pyarrow.parquet'", median_of(run(floor), args.repeat), None)
        row("odf tail -n 10 (process)", median_of(run(odf), args.repeat), None, "target 0.30")
        if args.rows <= 10_000_000:
            whole = median_of(lambda: open_workspace(project).dataset(ALIAS).to_arrow(), 3)
            row("whole table (tail before 15.4)", whole, one[0])


if __name__ == "__main__":
    main()
