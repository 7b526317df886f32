"""``odf verify --integrity`` against the I/O floor: SHA3 of the same files.

Usage: .venv/bin/python scripts/bench/verify.py [--datasets 2] [--slices 6]
       [--rows 1000000] [--repeat 3]

Builds a workspace of ``--datasets`` root datasets, each with ``--slices`` AddData slices
of ``--rows`` records (columns like the ingest benchmark's CSV: event_time, a city name,
a population; about 15 MiB of Parquet per million rows), then times, alternating within
each round so load hits every side alike:

* the floor: SHA3-256 of every slice file, read and hashed one after the other (what
  ``sha3sum`` does; the baseline), and the same on every core for reference;
* `storage.verify.verify_integrity` of every dataset in-process: cold (no record of
  slices found sound: every slice is decoded for its logical hash and offsets) on one
  thread (``workers=1``) and on every core (the default), and warm (each slice read and
  SHA3-hashed; those found sound before are not decoded again);
* ``odf verify --integrity`` as a whole process, cold and warm, from compiled bytecode
  (a cache filled by one untimed run first). It checks sizes and physical
  hashes only (kamu's integrity check), so cold and warm do the same work; the logical
  hashes are the in-process rows' (``--logical-hashes``, a full verify, validators).

and, for reference, what any verify that checks logical hashes must at least do on one
thread: SHA3 of the files plus SHA3 of their decoded column buffers (the logical hash
SHA3s every value: here ~2.9x the bytes of the compressed file).

Prints medians with min..max and the ratio floor / verify (target >= 0.5), in wall time
and in CPU time (user + system of this process's threads, or of the child process: less
disturbed by other load than wall time on a shared machine). Verification checks more
than SHA3 (the logical hash decodes every value of every slice), so the ratio also
depends on how fast the logical hash is.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pyarrow as pa
from benchdata import TS, build_root, system_schema


def build(root: Path, datasets: int, slices: int, rows: int) -> list[Path]:
    """The workspace; returns every slice file."""
    from storage.workspace import Workspace

    schema = system_schema(pa.field("city", pa.string()), pa.field("population", pa.int64()))
    ws = Workspace.init(root)
    rng = np.random.default_rng(15)
    cities = pa.array([f"city-{i}" for i in range(5000)])

    def make(s: int, start: int, clock: int) -> pa.Table:
        return pa.table(
            {
                "offset": pa.array(np.arange(start, start + rows, dtype=np.int64)),
                "op": pa.array(np.zeros(rows, dtype=np.int32)),
                "system_time": pa.array(np.full(rows, clock + s, dtype=np.int64)).cast(TS),
                "event_time": pa.array(rng.integers(0, 10**12, rows)).cast(TS),
                "city": cities.take(pa.array(rng.integers(0, 5000, rows))),
                "population": pa.array(rng.integers(0, 10**7, rows)),
            },
            schema=schema,
        )

    files: list[Path] = []
    for k in range(datasets):
        _ds, made = build_root(ws, f"bench.verify{k}", schema, slices, rows, make, root.parent)
        files += made
    return files


def sha3_file(path: Path) -> bytes:
    h = hashlib.sha3_256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


def sha3_file_and_values(path: Path) -> None:
    """SHA3 of the file and of every buffer of its decoded columns (one read)."""
    import pyarrow.parquet as pq

    data = path.read_bytes()
    hashlib.sha3_256(data).digest()
    table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    for column in table.columns:
        h = hashlib.sha3_256()
        for chunk in column.chunks:
            for buf in chunk.buffers():
                if buf is not None:
                    h.update(buf)
        h.digest()


def cpu_seconds() -> float:
    """User + system seconds of this process (all threads) and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--datasets", type=int, default=2)
    ap.add_argument("--slices", type=int, default=6)
    ap.add_argument("--rows", type=int, default=1_000_000, help="records per slice")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from storage.verify import verify_integrity
    from storage.workspace import Workspace

    with tempfile.TemporaryDirectory(prefix="odf-bench-verify-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        t0 = time.perf_counter()
        files = build(project, args.datasets, args.slices, args.rows)
        mib = sum(f.stat().st_size for f in files) / 2**20
        print(
            f"built {len(files)} slices, {mib:.0f} MiB, in {time.perf_counter() - t0:.0f} s "
            f"({os.cpu_count()} cores)"
        )
        ws = Workspace.open(project)
        # The process runs from compiled bytecode, as an installed odf does (this tree may
        # be worked on with PYTHONDONTWRITEBYTECODE=1: every run would compile the modules).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["ODF_WORKSPACE"] = str(project)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        odf = [sys.executable, "-m", "node.cli", "verify", "--integrity"]

        # An older checkout (PYTHONPATH) has no `workers`: it then runs its own way.
        takes_workers = "workers" in inspect.signature(verify_integrity).parameters

        def verify(workers: int | None) -> Callable[[], object]:
            def run() -> object:
                kw = {"workers": workers} if takes_workers else {}
                reports = [
                    verify_integrity(ws.get(e.id), require_head=True, **kw)  # type: ignore[arg-type]
                    for e in ws.list()
                ]
                assert all(r.ok for r in reports)
                return reports

            return run

        def cold(fn: Callable[[], object]) -> Callable[[], object]:
            def run() -> object:
                shutil.rmtree(project / ".odf" / "cache" / "sound-slices", ignore_errors=True)
                return fn()

            return run

        def process() -> object:
            return subprocess.run(odf, env=env, check=True, stdout=subprocess.DEVNULL)

        process()  # untimed: fills the bytecode cache

        def sha3_parallel() -> object:
            with ThreadPoolExecutor(os.cpu_count()) as pool:
                return list(pool.map(sha3_file, files))

        cases: list[tuple[str, Callable[[], object]]] = [
            ("SHA3 of the files (1 thread)", lambda: [sha3_file(f) for f in files]),
            ("SHA3 of the files (every core)", sha3_parallel),
            ("SHA3 of files + decoded values", lambda: [sha3_file_and_values(f) for f in files]),
            ("verify_integrity, cold, workers=1", cold(verify(1))),
            ("verify_integrity, cold, every core", cold(verify(None))),
            ("verify_integrity, warm, every core", verify(None)),
            ("odf verify --integrity, cold", cold(process)),
            ("odf verify --integrity, warm", process),
        ]
        times: dict[str, list[float]] = {name: [] for name, _ in cases}
        cpus: dict[str, list[float]] = {name: [] for name, _ in cases}
        for _ in range(args.repeat):
            for name, fn in cases:
                t0, c0 = time.perf_counter(), cpu_seconds()
                fn()
                times[name].append(time.perf_counter() - t0)
                cpus[name].append(cpu_seconds() - c0)
        floor = statistics.median(times[cases[0][0]])
        floor_cpu = statistics.median(cpus[cases[0][0]])
        print(
            f"{'case':<36} {'median s':>9} {'min..max s':>15} {'floor/this':>10}"
            f" {'CPU s':>6} {'CPU floor/this':>14}"
        )
        for name, _ in cases:
            t = times[name]
            m = statistics.median(t)
            c = statistics.median(cpus[name])
            print(
                f"{name:<36} {m:9.2f} {min(t):7.2f}..{max(t):6.2f} {floor / m:10.2f}"
                f" {c:6.2f} {floor_cpu / c:14.2f}"
            )
        print("(target: odf verify --integrity >= 0.5 of SHA3 of the files, 1 thread)")


if __name__ == "__main__":
    main()
