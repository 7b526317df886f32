"""Ingest benchmarks (issue 3). Ratios are against baselines measured in the same run.

1. Append ingest of a CSV with mixed types (``--rows``, default 5M) into a root dataset,
   vs a bare pyarrow pipeline on the same file (read CSV, write Parquet, SHA3 the file).
   Ratio = baseline seconds / ingest seconds (target >= 0.5).
2. Snapshot merge of two ``--snapshot-rows`` (default 1M) snapshots differing in 1% of
   rows: seconds and peak RSS of the second ingest.
3. Memory bounded by the batch size: peak RSS of an Append ingest of a file and of one
   4x larger (ratio close to 1 means bounded).

Every measurement runs in a fresh child process so peak RSS (``ru_maxrss``) is its own.

Usage: ``python scripts/bench/ingest.py [--rows N] [--snapshot-rows N] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--child", nargs=3, metavar=("TASK", "CSV", "WORK"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        task, csv, work = args.child
        print(json.dumps(CHILDREN[task](csv, work)))
        return
    base = Path(tempfile.mkdtemp(prefix="odf-bench-ingest-", dir=args.workdir))
    try:
        # 1. Append vs bare pyarrow.
        csv = base / "data.csv"
        make_csv(csv, args.rows)
        size_mb = csv.stat().st_size / 2**20
        (base / "bl").mkdir()
        bl = run_child("baseline", csv, base / "bl")
        ours = run_child("append", csv, base / "append")
        print(f"[append] {args.rows:,} rows, {size_mb:.0f} MiB CSV")
        print(f"  baseline (pyarrow read CSV + write Parquet + SHA3): {bl['seconds']:.2f} s")
        print(f"  odf ingest (Append, hashes, commit):              {ours['seconds']:.2f} s")
        print(f"  ratio baseline/ingest = {bl['seconds'] / ours['seconds']:.2f} (target >= 0.5)")

        # 3. Memory vs file size.
        big = base / "big.csv"
        make_csv(big, args.rows * 4)
        ours_big = run_child("append", big, base / "append-big")
        print("[memory] peak RSS of Append ingest")
        print(
            f"  {args.rows:,} rows: {ours['rss_mb']:.0f} MiB; "
            f"{args.rows * 4:,} rows: {ours_big['rss_mb']:.0f} MiB; "
            f"ratio {ours_big['rss_mb'] / ours['rss_mb']:.2f} (1.0 = bounded)"
        )
        print(f"  baseline pyarrow pipeline peak RSS: {bl['rss_mb']:.0f} MiB")

        # 2. Snapshot merge.
        s1, s2 = base / "snap1.csv", base / "snap2.csv"
        make_csv(s1, args.snapshot_rows)
        make_csv(s2, args.snapshot_rows, change_every=100)  # 1% of rows changed
        work = base / "snap"
        first = run_child("snapshot", s1, work)
        second = run_child("snapshot", s2, work)
        print(f"[snapshot] two {args.snapshot_rows:,}-row snapshots, ~1% changed")
        print(f"  first ingest: {first['seconds']:.2f} s, {first['records']:,} records")
        print(
            f"  second ingest (merge): {second['seconds']:.2f} s, {second['records']:,} records, "
            f"peak RSS {second['rss_mb']:.0f} MiB"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
