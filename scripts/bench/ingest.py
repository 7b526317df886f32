"""Ingest benchmarks. Ratios are against baselines measured in the same run.

1. End to end (``--e2e-rows``, default 1M and 10M): the CLI process ``odf
   ingest bench FILE.csv`` (Append, hashes, commit; a fresh workspace each run) vs a
   Python process doing bare pyarrow on the same file: read the CSV, write it with
   ``pq.write_table``'s defaults, SHA3-256 the file ("pyarrow read+write+SHA3"), and,
   when a Python with the ``duckdb`` module is given (``--duckdb-python``, default: this
   one if it has it), a DuckDB ``COPY ... TO (FORMAT parquet)`` process. The three run
   interleaved ``--e2e-repeat`` times. Printed: each one's range and median, the ratio
   baseline/ingest of each interleaved pair (target >= 0.7 at 1M rows, >= 0.8 at 10M),
   and the slice size against pyarrow's file for the same data columns (target <= 1.1).
   The CSV: 1M rows, ~75 MiB of mixed types. Every process runs from
   compiled bytecode, as an installed package does (`_process_env`: a bytecode cache in
   the bench's directory, filled by one untimed warm-up run of each; this tree is worked
   on with ``PYTHONDONTWRITEBYTECODE=1``, which makes every ``odf`` process compile its
   ~60 modules from source: ~0.12 CPU-s that no installed ``odf`` pays).
2. In-process Append ingest (``--rows``, default 5M) vs the in-process pyarrow pipeline
   (read CSV batches, write Parquet, SHA3), alternated ``--repeat`` times.
3. Snapshot merge of two ``--snapshot-rows`` (default 1M) snapshots differing in 1% of
   rows: seconds and peak RSS of the second ingest; then ``--snapshot-history`` more
   snapshots that each change every row: peak RSS of the last vs the second
   (the changelog grows, the live state does not).
4. Memory bounded by the batch size: peak RSS of an Append ingest of a file
   (``--memory-rows``) and of one 4x larger (ratio close to 1 means bounded).
5. Where the CPU goes (``--threads-rows``, default 10M): one in-process Append ingest,
   CPU seconds by thread (parse, logical hash, Parquet encoding, input key, the rest):
   the work a 2-core machine has to share, against pyarrow's whole run in part 1.

Every measurement runs in a fresh child process so peak RSS (``ru_maxrss``) is its own.

``--e2e-rows 1000`` measures the CLI's fixed cost (start, imports, commit) the same way.
``--baseline-rev REV`` adds to every end-to-end round an ``odf ingest`` of a ``git archive``
of REV (first on ``PYTHONPATH``, same venv), alternating which of the two trees runs first:
an A/B of a change against the tree before it, in the same run and load.

Usage: ``python scripts/bench/ingest.py [--e2e-rows N [N ...]] [--e2e-repeat K]
[--duckdb-python PY] [--rows N [N ...]] [--repeat K] [--memory-rows N] [--snapshot-rows N]
[--snapshot-history K] [--threads-rows N] [--skip e2e|append|memory|snapshot|threads ...]
[--baseline-rev REV] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from gittree import archive

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DDL = (
    "event_time TIMESTAMP",
    "id BIGINT",
    "name STRING",
    "price DOUBLE",
    "qty INT",
    "flag BOOLEAN",
    "day DATE",
)


def make_csv(path: Path, rows: int, *, seed: int = 0, change_every: int = 0) -> None:
    """Mixed-type CSV written in chunks with pyarrow (fast, bounded memory)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    chunk = 500_000
    with pcsv.CSVWriter(
        str(path),
        pa.schema(
            [
                ("event_time", pa.string()),
                ("id", pa.int64()),
                ("name", pa.string()),
                ("price", pa.float64()),
                ("qty", pa.int32()),
                ("flag", pa.bool_()),
                ("day", pa.string()),
            ]
        ),
    ) as w:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            ids = pa.array(range(start, start + n), pa.int64())
            qty_base = pc.cast(pc.add(pc.bit_wise_and(ids, 1023), seed), pa.int32())
            if change_every:
                changed = pa.array([i % change_every == 0 for i in range(start, start + n)])
                qty_base = pc.if_else(changed, pc.add(qty_base, 1), qty_base)
            w.write_table(
                pa.table(
                    {
                        "event_time": pa.array(["2024-01-01T00:00:00Z"] * n),
                        "id": ids,
                        "name": pc.binary_join_element_wise("n", pc.cast(ids, pa.string()), ""),
                        "price": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                        "qty": qty_base,
                        "flag": pc.equal(pc.bit_wise_and(ids, 1), 0),
                        "day": pa.array(["2024-01-02"] * n),
                    }
                )
            )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- child tasks ---------------------------------------------------------------------------------


def child_baseline(csv: str, work: str) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from fbs.arrow_schema import parse_ddl_schema

    schema = parse_ddl_schema(DDL)
    t0 = time.perf_counter()
    out = Path(work) / "baseline.parquet"
    reader = pcsv.open_csv(
        csv, convert_options=pcsv.ConvertOptions(column_types={f.name: f.type for f in schema})
    )
    writer: pq.ParquetWriter | None = None
    for batch in reader:
        if writer is None:
            writer = pq.ParquetWriter(str(out), batch.schema, compression="snappy")
        writer.write_table(pa.Table.from_batches([batch]))
    assert writer is not None
    writer.close()
    h = hashlib.sha3_256()
    with out.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return {"seconds": time.perf_counter() - t0, "rss_mb": peak_rss_mb()}


def _dataset(work: str, merge: Any) -> Any:
    from fbs.model import AddPushSource, DatasetKind, DatasetSnapshot, ReadStepCsv
    from storage.workspace import Workspace

    ws = Workspace.init(Path(work), exist_ok=True)
    src = AddPushSource(
        source_name="default", read=ReadStepCsv(header=True, ddl_schema=DDL), merge=merge
    )
    try:
        return ws.get("bench")
    except Exception:
        return ws.add_snapshot(
            DatasetSnapshot(name="bench", kind=DatasetKind.Root, metadata=(src,))
        )


def child_append(csv: str, work: str) -> dict[str, Any]:
    from fbs.model import MergeStrategyAppend
    from node.ingest.pipeline import ingest

    ds = _dataset(work, MergeStrategyAppend())
    t0 = time.perf_counter()
    res = ingest(ds, [Path(csv)], workdir=Path(work))
    return {
        "seconds": time.perf_counter() - t0,
        "rss_mb": peak_rss_mb(),
        "records": res.num_records,
    }


def child_snapshot(csv: str, work: str) -> dict[str, Any]:
    from fbs.model import MergeStrategySnapshot
    from node.ingest.pipeline import ingest

    ds = _dataset(work, MergeStrategySnapshot(primary_key=("id",)))
    t0 = time.perf_counter()
    res = ingest(ds, [Path(csv)], workdir=Path(work))
    return {
        "seconds": time.perf_counter() - t0,
        "rss_mb": peak_rss_mb(),
        "records": res.num_records,
    }


CHILDREN = {"baseline": child_baseline, "append": child_append, "snapshot": child_snapshot}

# -- end to end: processes as a user runs them ---------------------------------------------------

#: The bare pyarrow pipeline, as a process: read the CSV whole, write pyarrow's default
#: Parquet, SHA3-256 the file. argv: csv, out, then name=type pairs.
BASELINE_SCRIPT = """
import hashlib, sys
import pyarrow as pa, pyarrow.csv as pcsv, pyarrow.parquet as pq
csv, out = sys.argv[1], sys.argv[2]
def arrow_type(name):
    return pa.timestamp("ms", "UTC") if name == "timestamp_ms_utc" else pa.type_for_alias(name)
types = {n: arrow_type(t) for n, t in (a.split("=", 1) for a in sys.argv[3:])}
table = pcsv.read_csv(csv, convert_options=pcsv.ConvertOptions(column_types=types))
pq.write_table(table, out)
h = hashlib.sha3_256()
with open(out, "rb") as f:
    while chunk := f.read(1 << 20):
        h.update(chunk)
"""

#: DuckDB's CSV-to-Parquet copy, as a process. argv: csv, out, then name=type pairs.
DUCKDB_SCRIPT = """
import sys, duckdb
csv, out = sys.argv[1], sys.argv[2]
cols = ", ".join(f"'{n}': '{t}'" for n, t in (a.split("=", 1) for a in sys.argv[3:]))
duckdb.sql(
    f"COPY (SELECT * FROM read_csv('{csv}', header=true, columns={{{cols}}})) "
    f"TO '{out}' (FORMAT parquet)"
)
"""

#: Column types of the bench CSV for the baselines (pyarrow names / DuckDB names).
ARROW_TYPES = (
    "event_time=timestamp_ms_utc",
    "id=int64",
    "name=string",
    "price=double",
    "qty=int32",
    "flag=bool",
    "day=date32",
)
DUCKDB_TYPES = (
    "event_time=TIMESTAMPTZ",
    "id=BIGINT",
    "name=VARCHAR",
    "price=DOUBLE",
    "qty=INTEGER",
    "flag=BOOLEAN",
    "day=DATE",
)


#: CPU seconds (user + system) of every timed process, by label: less disturbed than wall
#: time by other load on a shared machine.
CPU: dict[str, list[float]] = {}


#: The ``git archive`` of ``--baseline-rev`` (None: no A/B), and that revision's name.
BASELINE: dict[str, Path | str] = {}


def _process_env(base: Path) -> dict[str, str]:
    """The environment of every timed process: bytecode cached under ``base``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    return env


def _timed(
    cmd: list[str], cwd: Path | None = None, label: str = "", env: dict[str, str] | None = None
) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=cwd, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU.setdefault(label, []).append(cpu)
    return wall


def _odf() -> str:
    exe = Path(sys.executable).parent / "odf"
    if not exe.exists():
        raise SystemExit(f"no odf executable next to {sys.executable}")
    return str(exe)


def _duckdb_python(given: str | None) -> str | None:
    candidate = given or sys.executable
    probe = subprocess.run([candidate, "-c", "import duckdb"], capture_output=True)
    if probe.returncode == 0:
        return candidate
    if given:
        raise SystemExit(f"{given} cannot import duckdb")
    return None


def _slice_bytes(work: Path) -> int:
    files = [p for p in work.glob(".odf/datasets/*/data/*") if p.is_file()]
    assert len(files) == 1, files
    return files[0].stat().st_size


def _span(values: list[float], unit: str = " s") -> str:
    return (
        f"{min(values):.2f}-{max(values):.2f}{unit} (median {statistics.median(values):.2f}{unit})"
    )


def _e2e_round(
    base: Path,
    csv: Path,
    tag: str,
    env: dict[str, str],
    duckdb_python: str | None,
    before_first: bool = False,
) -> dict[str, tuple[float, int]]:
    """One pyarrow, odf (the tree before, DuckDB) process on ``csv``: wall seconds and bytes."""
    rows = tag.split("-")[0]
    out: dict[str, tuple[float, int]] = {}
    parquet = base / f"bl-{tag}.parquet"
    cmd = [sys.executable, "-c", BASELINE_SCRIPT, str(csv), str(parquet), *ARROW_TYPES]
    out["pyarrow"] = (_timed(cmd, label=f"pyarrow-{rows}", env=env), parquet.stat().st_size)
    parquet.unlink()
    work = base / f"ws-{tag}"
    trees = [("odf", env)]
    tree = BASELINE.get("tree")
    if tree is not None:
        # The tree before first in every other round: neither always runs second.
        before = ("odf-before", {**env, "PYTHONPATH": str(tree)})
        trees = [before, *trees] if before_first else [*trees, before]
    for name, tree_env in trees:
        _setup_workspace(work, csv, env)
        cmd = [_odf(), "ingest", "bench", str(csv), "--no-progress"]
        wall = _timed(cmd, cwd=work, label=f"{name}-{rows}", env=tree_env)
        out[name] = (wall, _slice_bytes(work))
        shutil.rmtree(work, ignore_errors=True)
    if duckdb_python is not None:
        parquet = base / f"duck-{tag}.parquet"
        cmd = [duckdb_python, "-c", DUCKDB_SCRIPT, str(csv), str(parquet), *DUCKDB_TYPES]
        out["duckdb"] = (_timed(cmd, label=f"duckdb-{rows}", env=env), parquet.stat().st_size)
        parquet.unlink()
    return out


def _setup_workspace(work: Path, csv: Path, env: dict[str, str]) -> None:
    """A fresh workspace with the dataset ``bench`` at ``work`` (untimed)."""
    work.mkdir()
    subprocess.run(
        [sys.executable, __file__, "--child", "setup", str(csv), str(work)],
        check=True,
        capture_output=True,
        env=env,
    )


def _warm_up(base: Path, env: dict[str, str], duckdb_python: str | None) -> None:
    """One untimed run of every process on a small CSV: fills the bytecode cache."""
    csv = base / "warm-up.csv"
    make_csv(csv, 1000)
    _e2e_round(base, csv, "warm-up", env, duckdb_python)
    csv.unlink()
    for label in list(CPU):
        del CPU[label]


#: Row counts below this measure the CLI's fixed cost (start, imports, commit): no target.
SMALL_E2E_ROWS: Final = 100_000


def _load() -> str:
    """The 1-minute load average (other work on the machine skews the wall times)."""
    return f"{os.getloadavg()[0]:.1f}"


def bench_e2e(base: Path, rows: int, repeat: int, duckdb_python: str | None) -> None:
    """The CLI ingest vs bare pyarrow (and DuckDB) processes, interleaved."""
    env = _process_env(base)
    _warm_up(base, env, duckdb_python)
    csv = base / f"e2e-{rows}.csv"
    make_csv(csv, rows)
    size_mb = csv.stat().st_size / 2**20
    load_before = _load()
    base_s: list[float] = []
    odf_s: list[float] = []
    duck_s: list[float] = []
    before_s: list[float] = []
    sizes: dict[str, int] = {}
    for i in range(repeat):
        got = _e2e_round(base, csv, f"{rows}-{i}", env, duckdb_python, before_first=i % 2 == 1)
        base_s.append(got["pyarrow"][0])
        odf_s.append(got["odf"][0])
        if "duckdb" in got:
            duck_s.append(got["duckdb"][0])
        if "odf-before" in got:
            before_s.append(got["odf-before"][0])
        sizes = {k: v[1] for k, v in got.items()}
    csv.unlink()
    load_after = _load()
    ratios = [b / o for b, o in zip(base_s, odf_s, strict=True)]
    target = "0.7" if rows <= 1_000_000 else "0.8"
    if rows < SMALL_E2E_ROWS:
        target = "none: the CLI's fixed cost"
    print(
        f"[e2e] {rows:,} rows, {size_mb:.0f} MiB CSV, {repeat} interleaved runs (processes), "
        f"load average {load_before} -> {load_after}"
    )
    print(f"  pyarrow read+write+SHA3:  {_span(base_s)}")
    print(f"  odf ingest (CLI):         {_span(odf_s)}")
    if duck_s:
        duck_ratios = [d / o for d, o in zip(duck_s, odf_s, strict=True)]
        print(f"  DuckDB COPY:              {_span(duck_s)}")
    print(
        f"  ratio pyarrow/odf: {_span(ratios, '')} (target >= {target})"
        + (f"; DuckDB/odf {_span(duck_ratios, '')}" if duck_s else "")
    )
    cpu_b, cpu_o = CPU[f"pyarrow-{rows}"], CPU[f"odf-{rows}"]
    print(
        f"  CPU seconds: pyarrow {_span(cpu_b)}, odf {_span(cpu_o)}; ratio "
        f"{_span([b / o for b, o in zip(cpu_b, cpu_o, strict=True)], '')}"
    )
    if before_s:
        _print_before(rows, base_s, odf_s, before_s)
    mib = {k: v / 2**20 for k, v in sizes.items()}
    print(
        f"  size: slice {mib['odf']:.1f} MiB, pyarrow {mib['pyarrow']:.1f} MiB"
        + (f", DuckDB {mib['duckdb']:.1f} MiB" if "duckdb" in mib else "")
        + f"; slice/pyarrow {sizes['odf'] / sizes['pyarrow']:.2f} (target <= 1.1)"
    )


def _print_before(
    rows: int, base_s: list[float], odf_s: list[float], before_s: list[float]
) -> None:
    """The tree of ``--baseline-rev`` in the same rounds: its ratios, and this tree's vs it."""
    cpu_b, cpu_o = CPU[f"pyarrow-{rows}"], CPU[f"odf-{rows}"]
    cpu_r = CPU[f"odf-before-{rows}"]
    ratios = [b / r for b, r in zip(base_s, before_s, strict=True)]
    print(f"  odf ingest, tree at {BASELINE['rev']}: {_span(before_s)}")
    print(
        f"    ratio pyarrow/odf {_span(ratios, '')}; CPU {_span(cpu_r)}, ratio "
        f"{_span([b / r for b, r in zip(cpu_b, cpu_r, strict=True)], '')}"
    )
    print(
        f"    this tree / tree before, pair by pair: wall "
        f"{_span([o / r for o, r in zip(odf_s, before_s, strict=True)], '')}, CPU "
        f"{_span([o / r for o, r in zip(cpu_o, cpu_r, strict=True)], '')}"
    )


def child_setup(csv: str, work: str) -> dict[str, Any]:
    """A workspace with the Append dataset ``bench`` (untimed part of the e2e runs)."""
    from fbs.model import MergeStrategyAppend

    del csv
    _dataset(work, MergeStrategyAppend())
    return {}


CHILDREN["setup"] = child_setup

#: Seconds between two samples of the threads' CPU times (`child_threads`).
THREAD_SAMPLE_S = 0.02


def _thread_cpu(tid: str) -> float | None:
    """User + system CPU seconds of one thread of this process (None: it is gone)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_threads(csv: str, work: str) -> dict[str, Any]:
    """An in-process Append ingest (as the CLI runs it) and its CPU seconds by thread.

    Threads are sampled every `THREAD_SAMPLE_S` (a thread's last sample counts); Python
    threads by name (``ingest-read``: parse and convert; ``slice-hash``: logical hash;
    ``slice-encode``: Parquet and SHA3 of the file; ``input-key``: SHA-256 of the input),
    the rest (Arrow's thread pool, jemalloc) as ``arrow pool/other``.
    """
    import threading

    from fbs.model import MergeStrategyAppend
    from node.ingest.memory import use_ingest_memory_pool
    from node.ingest.pipeline import ingest

    use_ingest_memory_pool()
    ds = _dataset(work, MergeStrategyAppend())
    names: dict[str, str] = {}
    last: dict[str, float] = {}
    done = threading.Event()

    def sample() -> None:
        while True:
            for t in threading.enumerate():
                if t.native_id is not None:
                    names.setdefault(str(t.native_id), t.name.split("_")[0])
            for tid in os.listdir("/proc/self/task"):
                cpu = _thread_cpu(tid)
                if cpu is not None:
                    last[tid] = cpu
            if done.wait(THREAD_SAMPLE_S):
                return

    sampler = threading.Thread(target=sample, name="sampler")
    before = {tid: _thread_cpu(tid) or 0.0 for tid in os.listdir("/proc/self/task")}
    sampler.start()
    t0, c0 = time.perf_counter(), time.process_time()
    ingest(ds, [Path(csv)], workdir=Path(work))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    done.set()
    sampler.join()
    by_thread: dict[str, float] = {}
    for tid, seconds in last.items():
        name = names.get(tid, "arrow pool/other")
        if name == "sampler":
            continue
        by_thread[name] = by_thread.get(name, 0.0) + seconds - before.get(tid, 0.0)
    return {"seconds": wall, "cpu": cpu, "threads": by_thread}


CHILDREN["threads"] = child_threads


def bench_threads(base: Path, rows: int) -> None:
    """Where an Append ingest's CPU goes, by thread (one in-process run)."""
    csv = base / f"threads-{rows}.csv"
    make_csv(csv, rows)
    r = run_child("threads", csv, base / f"threads-{rows}")
    csv.unlink()
    shutil.rmtree(base / f"threads-{rows}", ignore_errors=True)
    split = ", ".join(
        f"{k} {v:.2f}" for k, v in sorted(r["threads"].items(), key=lambda kv: -kv[1])
    )
    print(
        f"[threads] {rows:,}-row Append ingest in process: {r['seconds']:.2f} s wall, "
        f"{r['cpu']:.2f} CPU-s"
    )
    print(f"  CPU-s by thread: {split}")


def run_child(task: str, csv: Path, work: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", task, str(csv), str(work)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _stats(values: list[float]) -> str:
    return f"best {min(values):.2f} s, median {statistics.median(values):.2f} s"


def bench_append(base: Path, rows: int, repeat: int) -> dict[str, Any]:
    """Baseline and Append ingest of one file, alternated ``repeat`` times."""
    csv = base / f"data-{rows}.csv"
    make_csv(csv, rows)
    size_mb = csv.stat().st_size / 2**20
    bl: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for i in range(repeat):
        (base / f"bl-{rows}-{i}").mkdir()
        bl.append(run_child("baseline", csv, base / f"bl-{rows}-{i}"))
        ours.append(run_child("append", csv, base / f"append-{rows}-{i}"))
        shutil.rmtree(base / f"bl-{rows}-{i}", ignore_errors=True)
        shutil.rmtree(base / f"append-{rows}-{i}", ignore_errors=True)
    csv.unlink()
    b = [r["seconds"] for r in bl]
    o = [r["seconds"] for r in ours]
    ratios = [x / y for x, y in zip(b, o, strict=True)]
    print(f"[append] {rows:,} rows, {size_mb:.0f} MiB CSV, {repeat} alternated runs")
    print(f"  baseline (pyarrow read CSV + write Parquet + SHA3): {_stats(b)}")
    print(f"  odf ingest (Append, hashes, commit):              {_stats(o)}")
    print(
        f"  ratio baseline/ingest: best-vs-best {min(b) / min(o):.2f}, median of runs "
        f"{statistics.median(ratios):.2f} (target >= 0.5)"
    )
    print(
        f"  peak RSS: ingest {max(r['rss_mb'] for r in ours):.0f} MiB, "
        f"baseline {max(r['rss_mb'] for r in bl):.0f} MiB"
    )
    return {"rss_mb": max(r["rss_mb"] for r in ours)}


def bench_memory(base: Path, rows: int) -> None:
    """Peak RSS of an Append ingest of a file and of one 4x larger."""
    figures = []
    for n in (rows, rows * 4):
        csv = base / f"mem-{n}.csv"
        make_csv(csv, n)
        r = run_child("append", csv, base / f"mem-{n}")
        csv.unlink()
        shutil.rmtree(base / f"mem-{n}", ignore_errors=True)
        figures.append(r)
    small, big = figures
    print("[memory] peak RSS of Append ingest")
    print(
        f"  {rows:,} rows: {small['rss_mb']:.0f} MiB ({small['seconds']:.2f} s); "
        f"{rows * 4:,} rows: {big['rss_mb']:.0f} MiB ({big['seconds']:.2f} s); "
        f"ratio {big['rss_mb'] / small['rss_mb']:.2f} (1.0 = bounded)"
    )


def bench_snapshot(base: Path, rows: int, history: int) -> None:
    s1, s2 = base / "snap1.csv", base / "snap2.csv"
    make_csv(s1, rows)
    make_csv(s2, rows, change_every=100)  # 1% of rows changed
    work = base / "snap"
    first = run_child("snapshot", s1, work)
    second = run_child("snapshot", s2, work)
    print(f"[snapshot] two {rows:,}-row snapshots, ~1% changed")
    print(f"  first ingest: {first['seconds']:.2f} s, {first['records']:,} records")
    print(
        f"  second ingest (merge): {second['seconds']:.2f} s, {second['records']:,} records, "
        f"peak RSS {second['rss_mb']:.0f} MiB"
    )
    # History growth: every further snapshot changes every row (another qty seed), so the
    # changelog grows by twice the state per round while the live state keeps its size.
    # Peak RSS of the last of these rounds vs the first: ~1 when memory follows the live
    # state and one slice (slices folded one by one), growing when it follows the history.
    rounds = []
    for i in range(history):
        snap = base / f"snap-h{i}.csv"
        make_csv(snap, rows, seed=i + 1)
        rounds.append(run_child("snapshot", snap, work))
        snap.unlink()
    if len(rounds) >= 2:
        first_h, last = rounds[0], rounds[-1]
        rss = ", ".join(f"{r['rss_mb']:.0f}" for r in rounds)
        print(
            f"  {history} more snapshots, every row changed each time (slices of "
            f"{first_h['records']:,} records; changelog ~"
            f"{rows + second['records'] + sum(r['records'] for r in rounds):,} records): "
            f"peak RSS per ingest {rss} MiB, "
            f"last {last['seconds']:.2f} s"
        )
        print(
            f"  ratio peak RSS last / first of them: {last['rss_mb'] / first_h['rss_mb']:.2f} "
            "(1.0 = bounded by live state + one slice, not by the history)"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--e2e-rows",
        type=int,
        nargs="+",
        default=[1_000_000, 10_000_000],
        help="row counts of the end-to-end runs",
    )
    p.add_argument("--e2e-repeat", type=int, default=5, help="interleaved end-to-end runs")
    p.add_argument("--duckdb-python", default=None, help="a Python that can import duckdb")
    p.add_argument(
        "--rows", type=int, nargs="+", default=[5_000_000], help="row counts of the Append runs"
    )
    p.add_argument("--repeat", type=int, default=3, help="alternated runs per row count")
    p.add_argument("--memory-rows", type=int, default=None, help="default: the first --rows")
    p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    p.add_argument(
        "--snapshot-history", type=int, default=4, help="further snapshots (history growth)"
    )
    p.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["e2e", "append", "memory", "snapshot", "threads"],
    )
    p.add_argument(
        "--threads-rows", type=int, default=10_000_000, help="rows of the CPU-by-thread run"
    )
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument(
        "--baseline-rev", default=None, help="also time odf from a git archive of REV (A/B)"
    )
    p.add_argument("--child", nargs=3, metavar=("TASK", "CSV", "WORK"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        task, csv, work = args.child
        print(json.dumps(CHILDREN[task](csv, work)))
        return
    base = Path(tempfile.mkdtemp(prefix="odf-bench-ingest-", dir=args.workdir))
    try:
        if args.baseline_rev is not None:
            BASELINE["rev"] = args.baseline_rev
            BASELINE["tree"] = archive(args.baseline_rev, base)
        if "e2e" not in args.skip:
            duckdb_python = _duckdb_python(args.duckdb_python)
            for rows in args.e2e_rows:
                bench_e2e(base, rows, args.e2e_repeat, duckdb_python)
        if "append" not in args.skip:
            for rows in args.rows:
                bench_append(base, rows, args.repeat)
        if "memory" not in args.skip:
            bench_memory(base, args.memory_rows or args.rows[0])
        if "snapshot" not in args.skip:
            bench_snapshot(base, args.snapshot_rows, args.snapshot_history)
        if "threads" not in args.skip:
            bench_threads(base, args.threads_rows)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
