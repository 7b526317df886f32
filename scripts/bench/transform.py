"""Transform latency through the warm engine vs a cold one-shot ``spark-submit`` (kamu's model).

Usage: .venv/bin/python scripts/bench/transform.py [--runs 5] [--cold-runs 2] [--rows 0]
       [--master local[2]]

Phases run one after the other so that at most one Spark JVM exists at a time:

1. start the engine server (``engine.process``), time start-up, then time ``--runs``
   small map/filter transforms over gRPC (median);
2. time ``--cold-runs`` one-shot ``spark-submit`` runs of the same transform (the same
   request file and executor code, in a fresh JVM each time, like kamu's Spark adapter);
3. with ``--rows N``: map/filter throughput over N rows through the warm engine vs the
   same Spark SQL (read, filter, write Parquet) run directly in this process.

Prints the warm/cold latency ratio (target <= 0.2) and the throughput ratio.
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
    ts = pa.timestamp("ms", tz="UTC")
    base = 1_577_836_800_000
    table = pa.table(
        {
            "offset": pa.array(range(rows), pa.int64()),
            "op": pa.array([0] * rows, pa.int32()),
            "system_time": pa.array([base] * rows, ts),
            "event_time": pa.array([base + i for i in range(rows)], ts),
            "city": pa.array([f"city{i % 100}" for i in range(rows)]),
            "population": pa.array(range(rows), pa.int64()),
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


def time_direct(data: Path, out: Path, master: str) -> float:
    """The same SQL in a plain SparkSession (no offsets/ordering), read -> write Parquet."""
    from engine.spark import SparkSettings, create_session

    session = create_session(SparkSettings(master=master))
    try:
        session.read.parquet(str(data)).createOrReplaceTempView("input")
        session.sql(QUERY).write.mode("overwrite").parquet(str(out / "warm"))  # warm-up
        start = time.perf_counter()
        session.read.parquet(str(data)).createOrReplaceTempView("input")
        session.sql(QUERY).write.mode("overwrite").parquet(str(out / "direct"))
        return time.perf_counter() - start
    finally:
        session.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5, help="warm transforms timed (median)")
    ap.add_argument("--cold-runs", type=int, default=2, help="cold spark-submit runs (median)")
    ap.add_argument("--small-rows", type=int, default=100, help="rows of the latency input")
    ap.add_argument("--rows", type=int, default=0, help="rows of the throughput input (0 = skip)")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-transform-"))
    try:
        small = write_input(tmp, args.small_rows)
        big = write_input(tmp, args.rows) if args.rows else None

        start = time.perf_counter()
        proc = start_engine_process(master=args.master, log_path=tmp / "engine.log")
        startup = time.perf_counter() - start
        try:
            with EngineClient(proc.address) as client:
                warm = [
                    time_engine(client, make_request(*small, args.small_rows, tmp / f"w{i}"))
                    for i in range(args.runs)
                ]
                engine_big = (
                    time_engine(client, make_request(*big, args.rows, tmp / "big"))
                    if big is not None
                    else None
                )
        finally:
            proc.stop()

        cold = [
            time_cold(make_request(*small, args.small_rows, tmp / f"c{i}"), tmp, args.master)
            for i in range(args.cold_runs)
        ]
        warm_med, cold_med = statistics.median(warm), statistics.median(cold)
        print(f"engine start-up (JVM + warm-up, until port open): {startup:.2f} s")
        print(
            f"warm transform via gRPC, {args.small_rows} rows: median {warm_med * 1000:.0f} ms "
            f"(runs: {', '.join(f'{w * 1000:.0f}' for w in warm)})"
        )
        print(
            f"cold spark-submit one-shot, same transform: median {cold_med:.2f} s "
            f"(runs: {', '.join(f'{c:.2f}' for c in cold)})"
        )
        print(f"ratio warm/cold: {warm_med / cold_med:.3f} (target <= 0.2)")

        if big is not None and engine_big is not None:
            direct = time_direct(big[0], tmp, args.master)
            print(
                f"throughput {args.rows} rows map/filter: "
                f"engine {args.rows / engine_big:,.0f} rows/s "
                f"({engine_big:.2f} s), direct Spark SQL {args.rows / direct:,.0f} rows/s "
                f"({direct:.2f} s), ratio engine/direct time {engine_big / direct:.2f}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
