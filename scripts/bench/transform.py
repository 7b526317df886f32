"""Transform latency through the warm engine vs a cold one-shot ``spark-submit`` (kamu's model).

Usage: .venv/bin/python scripts/bench/transform.py [--runs 5] [--cold-runs 2]
       [--rows 0] [--big-runs 5] [--master local[2]]

Phases:

1. start the engine server (``engine.process``), time start-up, then time ``--runs``
   small map/filter transforms over gRPC (median);
2. with ``--rows N``: map/filter throughput over N rows through the warm engine vs the
   same Spark SQL run directly (read Parquet, filter/map, write Parquet) in a SparkSession
   of this process with the same settings. Both driver JVMs are up during this phase but
   only one works at a time: the runs alternate engine, direct, engine, direct ... for
   ``--big-runs`` rounds, so both sides are equally warm; the ratio uses the median of the
   rounds after the first (the first pays JIT/class loading). Also timed: the direct SQL
   written as one file (``coalesce(1)``), which is what the engine must produce, to show
   how much of the gap is the single output file vs the ODF columns (offsets in order);
3. stop the engine and time ``--cold-runs`` one-shot ``spark-submit`` runs of the small
   transform (the same request file and executor code, in a fresh JVM each time, like
   kamu's Spark adapter).

Prints the warm/cold latency ratio (target <= 0.2) and the throughput ratio
engine/direct in rows/s (target >= 0.8), with every run's time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyarrow as pa
import pyarrow.parquet as pq

from engine.client import EngineClient, raise_for_result
from engine.process import start_engine_process
from fbs.codec import encode_table
from fbs.did import DatasetId
from fbs.model.engine import TransformRequest, TransformRequestInput
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import TransformSql
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]
QUERY = "SELECT event_time, city, population * 2 AS p FROM input WHERE population % 3 <> 0"

# The one-shot app run by spark-submit: decode the request, run it, print the result.
ONE_SHOT_APP = """
import sys
from pathlib import Path
from engine.spark import SparkSettings, create_session
from engine.transform import execute_transform
from fbs.codec import decode_table
from fbs.model.engine import TransformRequest

req = decode_table(TransformRequest, Path(sys.argv[1]).read_bytes())
session = create_session(SparkSettings(master=sys.argv[2]))
print(execute_transform(session, req))
session.stop()
"""


def write_input(path: Path, rows: int) -> tuple[Path, Path]:
    """Write an ODF-shaped input of ``rows`` rows plus its schema file."""
    import numpy as np
    import pyarrow.compute as pc

    ts = pa.timestamp("ms", tz="UTC")
    base = 1_577_836_800_000
    idx = np.arange(rows, dtype=np.int64)
    names = pa.array([f"city{i}" for i in range(100)])
    table = pa.table(
        {
            "offset": pa.array(idx),
            "op": pa.array(np.zeros(rows, dtype=np.int32)),
            "system_time": pa.array(np.full(rows, base, dtype=np.int64)).cast(ts),
            "event_time": pa.array(idx + base).cast(ts),
            "city": pc.take(names, pa.array(idx % 100)),
            "population": pa.array(idx),
        }
    )
    data, schema = path / f"in-{rows}.parquet", path / f"schema-{rows}.parquet"
    pq.write_table(table, data)
    pq.write_table(table.slice(0, 0), schema)
    return data, schema


def make_request(data: Path, schema: Path, rows: int, out: Path) -> TransformRequest:
    return TransformRequest(
        dataset_id=DatasetId.new_seeded(b"bench-out"),
        dataset_alias="bench-out",
        system_time=Timestamp.now(),
        vocab=DatasetVocabulary(),
        transform=TransformSql(engine="spark", query=QUERY),
        query_inputs=(
            TransformRequestInput(
                dataset_id=DatasetId.new_seeded(b"bench-in"),
                dataset_alias="bench-in",
                query_alias="input",
                vocab=DatasetVocabulary(),
                offset_interval=OffsetInterval(start=0, end=rows - 1),
                data_paths=(str(data),),
                schema_file=str(schema),
                explicit_watermarks=(),
            ),
        ),
        next_offset=0,
        new_checkpoint_path=str(out / "checkpoint"),
        new_data_path=str(out / "data"),
    )


def time_engine(client: EngineClient, req: TransformRequest) -> float:
    start = time.perf_counter()
    raise_for_result(client.execute_transform(req))
    return time.perf_counter() - start


def time_cold(req: TransformRequest, tmp: Path, master: str) -> float:
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    (tmp / "req.bin").write_bytes(encode_table(req))
    (tmp / "app.py").write_text(ONE_SHOT_APP)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    start = time.perf_counter()
    proc = subprocess.run(
        [str(submit), "--master", master, str(tmp / "app.py"), str(tmp / "req.bin"), master],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or "TransformResponseSuccess" not in proc.stdout:
        raise SystemExit(f"cold run failed:\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return elapsed


def time_direct(session: SparkSession, data: Path, out: Path, *, single_file: bool) -> float:
    """The same SQL in a plain SparkSession (no offsets/ordering): read -> write Parquet."""
    start = time.perf_counter()
    session.read.parquet(str(data)).createOrReplaceTempView("input")
    df = session.sql(QUERY)
    if single_file:
        df = df.coalesce(1)
    df.write.mode("errorifexists").parquet(str(out))
    return time.perf_counter() - start


def _ms(values: list[float], digits: int = 2) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def bench_throughput(
    client: EngineClient, big: tuple[Path, Path], rows: int, tmp: Path, master: str, runs: int
) -> None:
    """Alternate engine and direct runs over ``rows`` rows; print times and ratios."""
    from engine.spark import SparkSettings, create_session

    session = create_session(SparkSettings(master=master))
    engine_t: list[float] = []
    direct_t: list[float] = []
    single_t: list[float] = []
    try:
        for i in range(runs):
            engine_t.append(time_engine(client, make_request(*big, rows, tmp / f"big{i}")))
            direct_t.append(time_direct(session, big[0], tmp / f"direct{i}", single_file=False))
            single_t.append(time_direct(session, big[0], tmp / f"single{i}", single_file=True))
            for out in (tmp / f"big{i}", tmp / f"direct{i}", tmp / f"single{i}"):
                shutil.rmtree(out, ignore_errors=True)
            print(
                f"  round {i + 1}: engine {engine_t[-1]:.2f} s, direct {direct_t[-1]:.2f} s, "
                f"direct one file {single_t[-1]:.2f} s",
                flush=True,
            )
    finally:
        session.stop()

    def steady(values: list[float]) -> float:
        return statistics.median(values[1:] if len(values) > 1 else values)

    e, d, s1 = steady(engine_t), steady(direct_t), steady(single_t)
    print(f"throughput {rows:,} rows map/filter (steady = median of rounds after the first):")
    print(f"  engine (gRPC transform): {rows / e:,.0f} rows/s, {e:.2f} s (runs: {_ms(engine_t)})")
    print(f"  direct Spark SQL:        {rows / d:,.0f} rows/s, {d:.2f} s (runs: {_ms(direct_t)})")
    print(f"  direct SQL, one file:    {rows / s1:,.0f} rows/s, {s1:.2f} s (runs: {_ms(single_t)})")
    print(f"ratio throughput engine/direct: {d / e:.3f} (target >= 0.8)")
    print(f"ratio throughput engine/direct-one-file: {s1 / e:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5, help="warm transforms timed (median)")
    ap.add_argument("--cold-runs", type=int, default=2, help="cold spark-submit runs (median)")
    ap.add_argument("--small-rows", type=int, default=100, help="rows of the latency input")
    ap.add_argument("--rows", type=int, default=0, help="rows of the throughput input (0 = skip)")
    ap.add_argument("--big-runs", type=int, default=5, help="alternating throughput rounds")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-transform-"))
    try:
        small = write_input(tmp, args.small_rows)
        if args.rows:
            start = time.perf_counter()
            big = write_input(tmp, args.rows)
            print(f"wrote {args.rows:,} input rows in {time.perf_counter() - start:.1f} s")

        start = time.perf_counter()
        proc = start_engine_process(master=args.master, log_path=tmp / "engine.log")
        startup = time.perf_counter() - start
        print(f"engine start-up (JVM + warm-up, until port open): {startup:.2f} s", flush=True)
        try:
            with EngineClient(proc.address) as client:
                warm = [
                    time_engine(client, make_request(*small, args.small_rows, tmp / f"w{i}"))
                    for i in range(args.runs)
                ]
                warm_med = statistics.median(warm)
                print(
                    f"warm transform via gRPC, {args.small_rows} rows: median "
                    f"{warm_med * 1000:.0f} ms (runs: {_ms(warm, 3)} s)",
                    flush=True,
                )
                if args.rows:
                    bench_throughput(client, big, args.rows, tmp, args.master, args.big_runs)
        finally:
            proc.stop()

        cold = [
            time_cold(make_request(*small, args.small_rows, tmp / f"c{i}"), tmp, args.master)
            for i in range(args.cold_runs)
        ]
        cold_med = statistics.median(cold)
        print(
            f"cold spark-submit one-shot, same transform: median {cold_med:.2f} s "
            f"(runs: {_ms(cold)} s)"
        )
        print(f"ratio latency warm/cold: {warm_med / cold_med:.3f} (target <= 0.2)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
