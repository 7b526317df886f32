#!/usr/bin/env python3
"""A transform over a 4M-row root held on S3, run by a sandboxed Spark worker, vs the local run.

    python scripts/bench/spark_remote.py [--rows 4000000] [--runs 3]

Starts SeaweedFS (`tests.storage.s3.seaweed`), writes one root slice of ``--rows`` rows
(``offset``, ``op``, ``system_time``, ``event_time``, ``city`` of 1024 values,
``population``) and stores it on S3 under its hash. Then the same map/filter transform
request (one system time, so one logical hash) runs ``--runs`` times after one unmeasured
run on each of:

- local: an engine on ``local[2]`` reading the slice from the local disk (the baseline);
- remote: an engine whose master is a standalone cluster (`tests.engine.spark_cluster`:
  one worker, 2 cores, in its own mount namespace without the node's files), reading the
  slice from S3 and writing the output through an S3 staging prefix.

Prints each run's wall time, the warm medians, their ratio (target <= 4) and whether both
outputs have the same logical hash. The engines run one after the other.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.client import EngineClient, raise_for_result  # noqa: E402
from engine.process import start_engine_process  # noqa: E402
from engine.s3io.remote import on_s3  # noqa: E402
from engine.s3io.settings import STAGING_CONF  # noqa: E402
from fbs.did import DatasetId  # noqa: E402
from fbs.model.engine import TransformRequest, TransformRequestInput  # noqa: E402
from fbs.model.events import DatasetVocabulary, OffsetInterval  # noqa: E402
from fbs.model.source import TransformSql  # noqa: E402
from fbs.timestamp import Timestamp  # noqa: E402
from storage.hashing import logical_hash_parquet, physical_hash_file  # noqa: E402
from storage.s3.client import connect  # noqa: E402
from storage.s3.objects import S3ObjectStore  # noqa: E402
from storage.s3.url import S3Location, parse_s3_url  # noqa: E402
from tests.engine.spark_cluster import namespaces_available, start_cluster  # noqa: E402
from tests.storage.s3.seaweed import start_seaweed  # noqa: E402

QUERY = "SELECT event_time, city, population * 2 AS p FROM input WHERE population % 3 <> 0"
INPUT_ID = DatasetId.new_seeded(b"bench-remote-in")
ENGINE_CONF = {"spark.executor.memory": "1g", "spark.executor.cores": "2"}


def write_root(folder: Path, rows: int) -> tuple[Path, Path]:
    """One ODF root slice of ``rows`` rows and its schema file."""
    ts = pa.timestamp("ms", tz="UTC")
    base = 1_577_836_800_000
    idx = np.arange(rows, dtype=np.int64)
    cities = pa.array([f"city{i:04d}" for i in range(1024)])
    table = pa.table(
        {
            "offset": pa.array(idx),
            "op": pa.array(np.zeros(rows, dtype=np.int32)),
            "system_time": pa.array(np.full(rows, base, dtype=np.int64)).cast(ts),
            "event_time": pa.array(idx * 1000 + base).cast(ts),
            "city": pc.take(cities, pa.array(idx % 1024)),
            "population": pa.array((idx * 7919) % 1_000_003),
        }
    )
    written, schema = folder / "root.parquet", folder / "schema.parquet"
    pq.write_table(table, written, compression="snappy", row_group_size=512 * 1024)
    pq.write_table(table.slice(0, 0), schema)
    # Named by its hash, as in a dataset's object store.
    data = folder / physical_hash_file(written)[0].to_multibase()
    written.rename(data)
    return data, schema


def request(data: Path, schema: Path, rows: int, out: Path, now: Timestamp) -> TransformRequest:
    """The transform request over the slice, its output in ``out``."""
    return TransformRequest(
        dataset_id=DatasetId.new_seeded(b"bench-remote-out"),
        dataset_alias="bench-remote-out",
        system_time=now,
        vocab=DatasetVocabulary(),
        transform=TransformSql(engine="spark", query=QUERY),
        query_inputs=(
            TransformRequestInput(
                dataset_id=INPUT_ID,
                dataset_alias="root",
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


def timed_runs(address: str, make: object, runs: int, label: str) -> tuple[list[float], str]:
    """One unmeasured run, then ``runs`` measured; returns times and the output's hash."""
    times: list[float] = []
    digest = ""
    with EngineClient(address) as client:
        for i in range(runs + 1):
            req: TransformRequest = make(i)  # type: ignore[operator]
            started = time.perf_counter()
            raise_for_result(client.execute_transform(req))
            took = time.perf_counter() - started
            digest = logical_hash_parquet(Path(req.new_data_path)).to_multibase()
            os.unlink(req.new_data_path)
            print(f"  {label} run {i}{' (unmeasured)' if i == 0 else ''}: {took:.2f} s", flush=True)
            if i:
                times.append(took)
    return times, digest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    reason = namespaces_available()
    if reason is not None:
        print(f"spark_remote: cannot sandbox a worker here: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="odf-bench-remote-") as tmp_name:
        tmp = Path(tmp_name)
        return bench(tmp, args.rows, args.runs)


def bench(tmp: Path, rows: int, runs: int) -> int:
    data, schema = write_root(tmp, rows)
    size = data.stat().st_size
    print(f"root: {rows:,} rows, one slice of {size / 2**20:.1f} MiB")
    now = Timestamp.now()
    server = start_seaweed(tmp / "s3")
    os.environ.update(server.env())
    try:
        location = parse_s3_url(server.url("repo/root"))
        h, _ = physical_hash_file(data)
        S3ObjectStore(connect(location), location.key("data")).put_file(h, data)

        def local(i: int) -> TransformRequest:
            return request(data, schema, rows, tmp / f"local{i}", now)

        with start_engine_process(master="local[2]") as engine:
            local_t, local_hash = timed_runs(engine.address, local, runs, "local")
        remote_t, remote_hash = _remote(tmp, server.url("staging"), location, local, runs)
    finally:
        server.stop()
    lm, rm = statistics.median(local_t), statistics.median(remote_t)
    print(f"local  (local[2], slice on disk):              median {lm:.2f} s")
    print(f"remote (sandboxed worker, slice and output on S3): median {rm:.2f} s")
    print(f"remote / local: {rm / lm:.2f} (target <= 4)")
    print(f"same logical hash: {'yes' if local_hash == remote_hash else 'NO'} ({remote_hash})")
    return 0 if local_hash == remote_hash else 1


def _remote(
    tmp: Path, staging: str, location: S3Location, local: object, runs: int
) -> tuple[list[float], str]:
    cluster = start_cluster(tmp / "cluster", [ROOT.parent])
    try:
        conf = {**ENGINE_CONF, STAGING_CONF: staging}
        with start_engine_process(master=cluster.master_url, extra_conf=conf) as engine:

            def remote(i: int) -> TransformRequest:
                req: TransformRequest = local(i)  # type: ignore[operator]
                req = req.replace(new_data_path=str(tmp / f"remote{i}" / "data"))
                return on_s3(req, {INPUT_ID: location})

            return timed_runs(engine.address, remote, runs, "remote")
    finally:
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
