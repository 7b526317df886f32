"""Ingest benchmarks (issue 3). Ratios are against baselines measured in the same run.

1. Append ingest of a CSV with mixed types (``--rows``, default 5M; several counts may
   be given) into a root dataset, vs a bare pyarrow pipeline on the same file (read
   CSV, write Parquet, SHA3 the file). Ratio = baseline seconds / ingest seconds
   (target >= 0.5). The two alternate ``--repeat`` times (the machine may be shared):
   best and median are reported.
2. Snapshot merge of two ``--snapshot-rows`` (default 1M) snapshots differing in 1% of
   rows: seconds and peak RSS of the second ingest; then ``--snapshot-history`` more
   snapshots that each change every row: peak RSS of the last vs the second
   (the changelog grows, the live state does not).
3. Memory bounded by the batch size: peak RSS of an Append ingest of a file
   (``--memory-rows``) and of one 4x larger (ratio close to 1 means bounded).

Every measurement runs in a fresh child process so peak RSS (``ru_maxrss``) is its own.

Usage: ``python scripts/bench/ingest.py [--rows N [N ...]] [--repeat K] [--memory-rows N]
[--snapshot-rows N] [--snapshot-history K] [--skip append|memory|snapshot ...] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
        "--rows", type=int, nargs="+", default=[5_000_000], help="row counts of the Append runs"
    )
    p.add_argument("--repeat", type=int, default=3, help="alternated runs per row count")
    p.add_argument("--memory-rows", type=int, default=None, help="default: the first --rows")
    p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    p.add_argument(
        "--snapshot-history", type=int, default=4, help="further snapshots (history growth)"
    )
    p.add_argument("--skip", nargs="*", default=[], choices=["append", "memory", "snapshot"])
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--child", nargs=3, metavar=("TASK", "CSV", "WORK"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        task, csv, work = args.child
        print(json.dumps(CHILDREN[task](csv, work)))
        return
    base = Path(tempfile.mkdtemp(prefix="odf-bench-ingest-", dir=args.workdir))
    try:
        if "append" not in args.skip:
            for rows in args.rows:
                bench_append(base, rows, args.repeat)
        if "memory" not in args.skip:
            bench_memory(base, args.memory_rows or args.rows[0])
        if "snapshot" not in args.skip:
            bench_snapshot(base, args.snapshot_rows, args.snapshot_history)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
