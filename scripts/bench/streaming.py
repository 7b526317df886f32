"""Incremental tumbling-window aggregation (the engine's window mode) vs one-shot baselines.

Usage: .venv/bin/python scripts/bench/streaming.py [--rows 10000000] [--big]
       [--batches 10] [--keys 100] [--rows-per-hour 100000] [--master local[*]]
       [--driver-memory 1g] [--jit-scaling X] [--warm-runs 2]

The query (one input, one tumbling window over its event time: the engine's window mode)::

    SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, k,
           count(*) AS n, sum(v) AS s
    FROM input GROUP BY TUMBLE(event_time, INTERVAL '1' HOUR), k

Input: ``--rows`` ODF-shaped rows (offset int64, op int32, system_time and event_time
timestamp(ms, UTC), k string among ``--keys`` keys, v int64) with increasing event times
(``--rows-per-hour`` rows per hour of event time, so the rows of one open window do not
depend on ``--rows``), written as ``--batches`` Parquet slices by the ingest's own slice
writer (`node.ingest.writer.SliceWriter`, fed in the ingest pipeline's read batches of
``DEFAULT_BATCH_ROWS`` rows), so each slice has the row groups a root dataset ingesting one
batch at a time holds. Every phase below reads the same files.

Phases, all in one SparkSession (`engine.spark.create_session`) after a warm-up of every
phase (JIT, class loading): ``--warm-runs`` pulls of real-sized slices and as many plain
jobs (b) over one of them (default 2: a freshly started engine). The JIT keeps compiling
Spark's driver code for dozens of pulls (compiler threads: ~0.75 CPU s per 1M-row pull
after 5 pulls, ~0.35 after 15, ~0.2 after 35), so ``--warm-runs 40`` measures the engine
as a long-running one (the shared engine, a daemon) runs; both sides get the same warm-up:

1. incremental: one `engine.transform.execute_transform` run per slice, as a pull after
   every ingest does (`node.transform`): the new slice only, the input watermark = the
   max event time so far, the previous run's checkpoint. Per run: time, output rows,
   checkpoint size, retained input rows (the rows of open windows kept under ``state/``),
   JVM heap (peak during the run, and live after a full GC), JVM RSS (peak and current,
   from ``/proc``), the Java classes Spark's code generator compiled (0 when the run
   reused the code of earlier runs: new code is also JIT-compiled again, a large part of
   a pull's CPU), and where the run's time went;
2. baseline (a): the same query as ONE engine run over all slices (same final watermark);
3. baseline (b): the same query as a plain Spark batch job: ``spark.read.parquet`` of all
   slices, ``groupBy(window(event_time, '1 hour'), k).agg(...)``, written to Parquet;
4. baseline (c): (b)'s plain job run once per slice, stateless (its answer is not the
   query's: windows split by a slice boundary are counted in parts). It is the floor of
   any engine that runs one Spark job per pull: (b)/(c) is the best ratio vs (b) such an
   engine can reach on this machine, and (c)/incremental says how much the engine adds
   to Spark's own cost per job.

Prints the ratios baseline/incremental (target >= 0.5 vs the batch job (b)), the CPU
seconds (driver JVM + Python) of each phase (a figure the other load on a shared machine
disturbs less than wall time, which it stretches most for the phase with the most sequential
steps), the incremental runs' CPU by thread role (JIT compiler threads, Spark tasks, driver
calls, GC, Python: from /proc, per thread) and verifies
that the concatenated incremental output equals (a)'s output as a multiset, and (b)'s
windows that the watermark closed (OK / MISMATCH, exit status 1 on mismatch or when the
retained rows exceed one window's rows). With ``--big`` (or several ``--rows``) every size
runs in its own process (its own JVM, so memory figures are per size) and a comparison of
the sizes is printed last: the checkpoint size and memory must not grow with history.
``--jit-scaling`` sets the driver JVM's JIT threshold scaling (default: the engine's
`engine.spark.DEFAULT_JIT_THRESHOLD_SCALING`; 1: the JVM's own thresholds), to compare
values in separate, interleaved invocations.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fbs.did import DatasetId
from fbs.model.engine import (
    TransformRequest,
    TransformRequestInput,
    TransformResponseSuccess,
    Watermark,
)
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import TransformSql
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QUERY = (
    "SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, k, "
    "count(*) AS n, sum(v) AS s "
    "FROM input GROUP BY TUMBLE(event_time, INTERVAL '1' HOUR), k"
)
HOUR_MS = 3_600_000
BASE_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z
TS = pa.timestamp("ms", tz="UTC")
IN_ID = DatasetId.new_seeded(b"bench-stream-in")
OUT_ID = DatasetId.new_seeded(b"bench-stream-out")
SUMMARY_PREFIX = "SUMMARY "
BIG_ROWS = 40_000_000
DATA_COLUMNS = ("event_time", "k", "n", "s")


# -- input ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    path: Path
    start: int  # first offset
    end: int  # last offset
    max_event_ms: int
    system_ms: int


def write_slices(folder: Path, rows: int, batches: int, keys: int, per_hour: int) -> list[Slice]:
    """Write ``rows`` rows as ``batches`` slices, as ``odf ingest`` would; return them in order."""
    from node.ingest.pipeline import DEFAULT_BATCH_ROWS
    from node.ingest.writer import SliceWriter

    rng = np.random.default_rng(42)
    names = pa.array([f"k{i:03d}" for i in range(keys)])
    bounds = np.linspace(0, rows, batches + 1, dtype=np.int64)
    slices = []
    for i in range(batches):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        event_ms = BASE_MS + np.arange(lo, hi, dtype=np.int64) * HOUR_MS // per_hour
        system_ms = BASE_MS + (rows * HOUR_MS // per_hour) + (i + 1) * 60_000
        table = pa.table(
            {
                "event_time": pa.array(event_ms).cast(TS),
                "k": pc.take(names, pa.array(rng.integers(0, keys, hi - lo))),
                "v": pa.array(rng.integers(0, 1000, hi - lo, dtype=np.int64)),
            }
        )
        path = folder / f"slice-{i:03d}.parquet"
        writer = SliceWriter(path, table.schema, start_offset=lo, system_time=_ts(system_ms))
        with writer:
            for batch in table.to_batches(max_chunksize=DEFAULT_BATCH_ROWS):
                writer.write(batch)
        writer.close()
        slices.append(Slice(path, lo, hi - 1, int(event_ms[-1]), system_ms))
    pq.write_table(pq.read_schema(slices[0].path).empty_table(), folder / "schema.parquet")
    return slices


def _ts(ms: int) -> Timestamp:
    return Timestamp(ms * 1_000_000)


def make_request(
    slices: list[Slice], schema: Path, next_offset: int, prev: Path | None, work: Path
) -> TransformRequest:
    """An engine request over ``slices`` (consecutive), watermark = their last event time."""
    last = slices[-1]
    return TransformRequest(
        dataset_id=OUT_ID,
        dataset_alias="bench.windowed",
        system_time=_ts(last.system_ms + 1_000),
        vocab=DatasetVocabulary(),
        transform=TransformSql(engine="spark", query=QUERY),
        query_inputs=(
            TransformRequestInput(
                dataset_id=IN_ID,
                dataset_alias="bench.events",
                query_alias="input",
                vocab=DatasetVocabulary(),
                offset_interval=OffsetInterval(start=slices[0].start, end=last.end),
                data_paths=tuple(str(s.path) for s in slices),
                schema_file=str(schema),
                explicit_watermarks=(
                    Watermark(system_time=_ts(last.system_ms), event_time=_ts(last.max_event_ms)),
                ),
            ),
        ),
        next_offset=next_offset,
        prev_checkpoint_path=None if prev is None else str(prev),
        new_checkpoint_path=str(work / "checkpoint"),
        new_data_path=str(work / "data"),
    )


# -- measuring --------------------------------------------------------------------------------


class PhaseTimer:
    """Wraps engine functions (by module attribute) to add up the time spent in each."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = collections.defaultdict(float)
        self.missing: list[str] = []

    def wrap(self, module: ModuleType, name: str, label: str) -> None:
        fn = getattr(module, name, None)
        if fn is None:  # the engine was refactored: report, do not fail
            self.missing.append(f"{module.__name__}.{name}")
            return

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.totals[label] += time.perf_counter() - start

        setattr(module, name, timed)

    def take(self) -> dict[str, float]:
        out = dict(self.totals)
        self.totals.clear()
        return out


def instrument() -> PhaseTimer:
    """Time the steps of a stateful run (see `engine.transform._execute`, `run_stateful`)."""
    import engine.collected_output as co
    import engine.sql as sq
    import engine.streaming.execute as ex
    import engine.transform as tr

    timer = PhaseTimer()
    timer.wrap(tr, "extract_state", "checkpoint extract")
    timer.wrap(tr, "run_stateful", "stateful run")
    timer.wrap(tr, "write_checkpoint", "checkpoint write")
    timer.wrap(ex, "_input_views", "input views")
    timer.wrap(ex, "run_steps", "plan query")
    timer.wrap(ex, "write_output", "aggregate + write output")
    timer.wrap(co, "_write_part", COLLECT_LABEL)
    timer.wrap(sq, "merge_parts", MERGE_LABEL)
    timer.wrap(co, "merge_parts", MERGE_LABEL)
    timer.wrap(ex, "_save_inputs", RETAIN_LABEL)
    return timer


#: The output's phases (`engine.collected_output`: collected and written with pyarrow; or
#: Spark's writer, then the merge).
COLLECT_LABEL = "  of which: collect + write"
MERGE_LABEL = "  of which: merge parts"
#: The retained rows are written on a thread while Spark writes the output: indented, so
#: that their time is not subtracted again from the run's total.
RETAIN_LABEL = "  retained rows (overlapped)"
PHASES = (
    "checkpoint extract",
    "input views",
    "plan query",
    "aggregate + write output",
    COLLECT_LABEL,
    MERGE_LABEL,
    RETAIN_LABEL,
    "checkpoint write",
)


class Memory:
    """JVM heap (MemoryMXBeans) and RSS (/proc) of the driver JVM."""

    def __init__(self, spark: SparkSession) -> None:
        jvm: Any = spark._jvm  # a py4j view of the driver JVM
        self.jvm: Any = jvm
        self.runtime = jvm.java.lang.Runtime.getRuntime()
        pools = list(jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans())
        self.pools = [p for p in pools if p.getType().name() == "HEAP"]
        self.non_heap_pools = [p for p in pools if p.getType().name() != "HEAP"]
        try:
            self.pid: int | None = int(jvm.java.lang.ProcessHandle.current().pid())
        except Exception:
            self.pid = None
        self.status = Path(f"/proc/{self.pid}/status") if self.pid else None

    def max_heap(self) -> int:
        return int(self.runtime.maxMemory())

    def reset_peaks(self) -> None:
        for p in self.pools:
            p.resetPeakUsage()
        if self.pid:  # "5": reset the peak RSS (VmHWM) to the current RSS
            with contextlib.suppress(OSError):
                Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def heap_peak(self) -> int:
        """Sum of the heap pools' peak usage since `reset_peaks` (an upper bound)."""
        return sum(int(p.getPeakUsage().getUsed()) for p in self.pools)

    def heap_live(self) -> int:
        """Heap used after a full GC: what the engine keeps between runs."""
        self.jvm.java.lang.System.gc()
        return int(self.runtime.totalMemory() - self.runtime.freeMemory())

    def non_heap(self) -> int:
        """Non-heap used (Metaspace, code cache): grows with generated classes."""
        return sum(int(p.getUsage().getUsed()) for p in self.non_heap_pools)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the driver JVM and of this Python process so far.

        Other processes on the machine slow every wall-clock phase, the more so the more
        sequential steps a phase has; CPU time shows the work a phase did whatever the load.
        """
        own = os.times()
        jvm = 0.0
        stat = Path(f"/proc/{self.pid}/stat") if self.pid else None
        if stat is not None and stat.exists():
            fields = stat.read_text().rsplit(")", 1)[1].split()
            jvm = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return jvm + own.user + own.system

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds so far of the driver JVM's threads by role (from /proc: the JIT
        compiler threads are not Java threads, no JVM API reports their CPU), and of
        this Python process."""
        out: dict[str, float] = collections.defaultdict(float)
        tasks = Path(f"/proc/{self.pid}/task") if self.pid else None
        if tasks is not None and tasks.is_dir():
            tick = os.sysconf("SC_CLK_TCK")
            for task in tasks.iterdir():
                try:
                    stat = (task / "stat").read_text()
                except OSError:  # the thread ended
                    continue
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat.rsplit(")", 1)[1].split()
                out[_thread_role(name)] += (int(fields[11]) + int(fields[12])) / tick
        own = os.times()
        out["Python"] = own.user + own.system
        return dict(out)

    def codegen_compiles(self) -> int:
        """Java classes Spark's code generator has compiled (Janino) so far: a query whose
        generated code changes from run to run is compiled, and JIT-compiled, again."""
        try:
            metrics = self.jvm.org.apache.spark.metrics.source.CodegenMetrics
            return int(metrics.METRIC_COMPILATION_TIME().getCount())
        except Exception:
            return -1

    def rss(self) -> tuple[int, int]:
        """(current RSS, peak RSS) of the JVM in bytes; (0, 0) without /proc."""
        if self.status is None or not self.status.exists():
            return 0, 0
        vals = {}
        for line in self.status.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                vals[key] = int(rest.split()[0]) * 1024
        return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def _thread_role(name: str) -> str:
    """The role of a JVM thread by its (15-character) Linux name."""
    if "Compiler" in name:
        return "JIT compiler threads"
    if name.startswith(("VM Thread", "GC Thread", "VM Periodic")):
        return "GC + VM threads"
    if name.startswith("Executor task"):
        return "Spark tasks"
    if name.startswith("Thread-"):  # py4j's call threads: planning, scheduling calls
        return "driver (py4j calls)"
    return "other JVM threads"


@dataclass
class RunStats:
    seconds: float
    cpu_seconds: float
    out_rows: int
    checkpoint_bytes: int
    retained_rows: int
    mode: str
    heap_peak: int
    heap_live: int
    non_heap: int
    rss: int
    rss_peak: int
    spark_jobs: int
    spark_stages: int
    compiles: int
    phases: dict[str, float] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)


def checkpoint_contents(path: Path) -> tuple[int, str]:
    """(retained input rows, stream-state mode) of a checkpoint archive."""
    rows, mode = 0, "?"
    with tarfile.open(path) as tar:
        for member in tar:
            f = tar.extractfile(member) if member.isfile() else None
            if f is None:
                continue
            if member.name.startswith("state/input-") and member.name.endswith(".parquet"):
                rows += pq.ParquetFile(io.BytesIO(f.read())).metadata.num_rows
            elif member.name == "state/state.json":
                mode = str(json.loads(f.read()).get("mode"))
    return rows, mode


def last_job_id(spark: SparkSession) -> int:
    """The highest Spark job ID so far (-1: none): job IDs are consecutive."""
    ids = spark.sparkContext.statusTracker().getJobIdsForGroup()
    return max(ids, default=-1)


def stage_count(spark: SparkSession, job_ids: range) -> int:
    """Stages of the jobs ``job_ids`` (as Spark's status tracker lists them)."""
    tracker = spark.sparkContext.statusTracker()
    stages: set[int] = set()
    for job in job_ids:
        info = tracker.getJobInfo(job)
        stages.update(info.stageIds if info is not None else ())
    return len(stages)


def _mb(n: float) -> str:
    return f"{n / 1024**2:,.1f} MB"


# -- phases -----------------------------------------------------------------------------------


def engine_run(
    spark: SparkSession,
    slices: list[Slice],
    schema: Path,
    next_offset: int,
    prev: Path | None,
    work: Path,
    memory: Memory,
    timer: PhaseTimer,
) -> tuple[pa.Table, RunStats]:
    from engine.transform import execute_transform

    work.mkdir(parents=True)
    memory.reset_peaks()
    timer.take()
    first_job = last_job_id(spark)
    compiles = memory.codegen_compiles()
    cpu = memory.cpu_seconds()
    threads = memory.thread_cpu()
    start = time.perf_counter()
    result = execute_transform(spark, make_request(slices, schema, next_offset, prev, work))
    elapsed = time.perf_counter() - start
    cpu = memory.cpu_seconds() - cpu
    after = memory.thread_cpu()
    threads = {k: after[k] - threads.get(k, 0.0) for k in after}
    phases = timer.take()
    jobs = last_job_id(spark) - first_job
    stages = stage_count(spark, range(first_job + 1, first_job + 1 + jobs))
    compiles = memory.codegen_compiles() - compiles
    if not isinstance(result, TransformResponseSuccess):
        raise SystemExit(f"engine run failed: {result}")
    table = pq.read_table(work / "data")
    iv = result.new_offset_interval
    expected = 0 if iv is None else iv.end - iv.start + 1
    if table.num_rows != expected or (iv is not None and iv.start != next_offset):
        raise SystemExit(f"output interval {iv} does not match {table.num_rows} rows")
    checkpoint = work / "checkpoint"
    retained, mode = checkpoint_contents(checkpoint)
    heap_peak = memory.heap_peak()
    rss, rss_peak = memory.rss()
    stats = RunStats(
        seconds=elapsed,
        cpu_seconds=cpu,
        out_rows=table.num_rows,
        checkpoint_bytes=checkpoint.stat().st_size,
        retained_rows=retained,
        mode=mode,
        heap_peak=heap_peak,
        heap_live=memory.heap_live(),
        non_heap=memory.non_heap(),
        rss=rss,
        rss_peak=rss_peak,
        spark_jobs=jobs,
        spark_stages=stages,
        compiles=compiles,
        phases=phases,
        threads=threads,
    )
    return table, stats


def run_incremental(
    spark: SparkSession,
    slices: list[Slice],
    schema: Path,
    tmp: Path,
    memory: Memory,
    timer: PhaseTimer,
    *,
    verbose: bool = True,
) -> tuple[list[pa.Table], list[RunStats]]:
    """One engine run per slice, each with the previous run's checkpoint."""
    outputs: list[pa.Table] = []
    stats: list[RunStats] = []
    prev: Path | None = None
    next_offset = 0
    for i, s in enumerate(slices):
        work = tmp / f"run-{i:03d}"
        table, st = engine_run(spark, [s], schema, next_offset, prev, work, memory, timer)
        next_offset += table.num_rows
        outputs.append(table)
        stats.append(st)
        if prev is not None:
            shutil.rmtree(prev.parent)  # keep only the latest checkpoint on disk
        prev = work / "checkpoint"
        if verbose:
            print(
                f"  run {i + 1:2d}: {st.seconds:6.2f} s, +{s.end - s.start + 1:,} rows -> "
                f"{st.out_rows:,} out, checkpoint {_mb(st.checkpoint_bytes)}, "
                f"retained {st.retained_rows:,} rows ({st.mode} mode), heap peak "
                f"{_mb(st.heap_peak)} / live {_mb(st.heap_live)}, RSS {_mb(st.rss)} "
                f"(peak {_mb(st.rss_peak)})",
                flush=True,
            )
    return outputs, stats


def run_batch_job(spark: SparkSession, slices: list[Slice], out: Path) -> float:
    """The query as a plain Spark job: read all slices, window aggregate, write Parquet."""
    from pyspark.sql import functions as F

    start = time.perf_counter()
    df = spark.read.parquet(*(str(s.path) for s in slices))
    agg = df.groupBy(F.window("event_time", "1 hour"), "k").agg(
        F.count(F.lit(1)).alias("n"), F.sum("v").alias("s")
    )
    agg.select(F.col("window.start").alias("event_time"), "k", "n", "s").write.mode(
        "errorifexists"
    ).parquet(str(out))
    return time.perf_counter() - start


def rows_of(tables: list[pa.Table]) -> collections.Counter[tuple[Any, ...]]:
    """The multiset of (event_time ms, k, n, s) rows of ``tables``."""
    rows: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for t in tables:
        cols = [
            t.column(c).cast(pa.int64()).to_pylist()
            if c == "event_time"
            else t.column(c).to_pylist()
            for c in DATA_COLUMNS
        ]
        rows.update(zip(*cols, strict=True))
    return rows


def check_appends(tables: list[pa.Table]) -> bool:
    return all(pc.all(pc.equal(t.column("op"), 0)).as_py() in (True, None) for t in tables)


# -- one size ---------------------------------------------------------------------------------


def bench(args: argparse.Namespace, rows: int) -> dict[str, Any]:
    from engine.spark import SparkSettings, create_session

    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-streaming-"))
    try:
        start = time.perf_counter()
        data = tmp / "data"
        data.mkdir()
        slices = write_slices(data, rows, args.batches, args.keys, args.rows_per_hour)
        schema = data / "schema.parquet"
        size = sum(s.path.stat().st_size for s in slices)
        hours = rows / args.rows_per_hour
        print(
            f"wrote {rows:,} rows ({hours:,.0f} h of event time, {args.keys} keys) as "
            f"{len(slices)} slices, {_mb(size)}, in {time.perf_counter() - start:.1f} s",
            flush=True,
        )

        warm_dir = tmp / "warm"
        warm_dir.mkdir()
        # Slices of the real slice size (at most 1M rows): JIT at realistic sizes.
        runs = max(2, args.warm_runs)
        warm_rows = runs * min(rows // args.batches, 1_000_000)
        warm = write_slices(warm_dir, warm_rows, runs, args.keys, args.rows_per_hour)

        start = time.perf_counter()
        settings = SparkSettings(master=args.master, driver_memory=args.driver_memory)
        if args.jit_scaling is not None:
            settings = dataclasses.replace(settings, jit_threshold_scaling=args.jit_scaling)
        spark = create_session(settings)
        print(
            f"SparkSession start-up: {time.perf_counter() - start:.1f} s (JIT threshold "
            f"scaling {settings.jit_threshold_scaling:g})",
            flush=True,
        )
        try:
            return bench_session(args, spark, slices, schema, warm, tmp, rows)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_session(
    args: argparse.Namespace,
    spark: SparkSession,
    slices: list[Slice],
    schema: Path,
    warm: list[Slice],
    tmp: Path,
    rows: int,
) -> dict[str, Any]:
    memory = Memory(spark)
    timer = instrument()
    if timer.missing:
        print(f"(not timed, not found in the engine: {', '.join(timer.missing)})")
    print(
        f"driver JVM: pid {memory.pid}, max heap {_mb(memory.max_heap())}, "
        f"master {spark.sparkContext.master}, {os.cpu_count()} cores",
        flush=True,
    )

    # Warm-up of every phase (JIT, class loading), not timed.
    start = time.perf_counter()
    warm_schema = warm[0].path.parent / "schema.parquet"
    run_incremental(spark, warm, warm_schema, tmp / "warm-inc", memory, timer, verbose=False)
    engine_run(spark, warm[:2], warm_schema, 0, None, tmp / "warm-one", memory, timer)
    run_batch_job(spark, warm[:2], tmp / "warm-batch")
    for i, s in enumerate(warm[1:]):  # as many plain jobs as pulls: (b) and (c) warm too
        run_batch_job(spark, [s], tmp / f"warm-batch-{i}")
    print(
        f"warm-up (every phase on {sum(s.end - s.start + 1 for s in warm):,} rows): "
        f"{time.perf_counter() - start:.1f} s; load average (1 min) {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rss_before, _ = memory.rss()
    heap_before = memory.heap_live()
    non_heap_before = memory.non_heap()

    print(f"incremental: {len(slices)} engine runs, one per slice, with the last checkpoint:")
    outputs, stats = run_incremental(spark, slices, schema, tmp / "inc", memory, timer)
    inc_total = sum(s.seconds for s in stats)

    memory.reset_peaks()
    one_table, one = engine_run(spark, slices, schema, 0, None, tmp / "one", memory, timer)
    print(
        f"baseline (a) one engine run over all {len(slices)} slices: {one.seconds:.2f} s, "
        f"{one.out_rows:,} rows out, checkpoint {_mb(one.checkpoint_bytes)}, retained "
        f"{one.retained_rows:,} rows, heap peak {_mb(one.heap_peak)}, RSS peak "
        f"{_mb(one.rss_peak)}",
        flush=True,
    )

    memory.heap_live()
    memory.reset_peaks()
    batch_cpu = memory.cpu_seconds()
    batch_seconds = run_batch_job(spark, slices, tmp / "batch")
    batch_cpu = memory.cpu_seconds() - batch_cpu
    batch_heap = memory.heap_peak()
    _, batch_rss = memory.rss()
    print(
        f"baseline (b) plain Spark batch job (read all, groupBy(window, k), write): "
        f"{batch_seconds:.2f} s, heap peak {_mb(batch_heap)}, RSS peak {_mb(batch_rss)}",
        flush=True,
    )

    # (c) The floor of any engine that runs one Spark job per pull: the plain job of (b),
    # stateless (so its answer is not the query's), once per slice.
    per_slice = [run_batch_job(spark, [s], tmp / f"per-slice-{i}") for i, s in enumerate(slices)]
    floor_seconds = sum(per_slice)
    print(
        f"baseline (c) the plain job of (b) once per slice (stateless: the per-job floor): "
        f"{floor_seconds:.2f} s (runs: {', '.join(f'{x:.2f}' for x in per_slice)})",
        flush=True,
    )

    # Correctness: incremental == one run (multiset); both == the batch job's closed windows.
    watermark = slices[-1].max_event_ms
    inc_rows = rows_of(outputs)
    one_rows = rows_of([one_table])
    batch = pq.read_table(tmp / "batch")
    closed = batch.filter(
        pc.less_equal(pc.add(batch.column("event_time").cast(pa.int64()), HOUR_MS), watermark)
    )
    batch_rows = rows_of([closed])
    offsets = pa.concat_arrays([c for t in outputs for c in t.column("offset").chunks]).to_numpy()
    contiguous = bool((offsets == np.arange(len(offsets))).all())
    ok_one = inc_rows == one_rows and check_appends(outputs) and contiguous
    ok_batch = inc_rows == batch_rows
    open_limit = args.rows_per_hour  # a tumbling window's rows: the most window mode retains
    max_retained = max(s.retained_rows for s in stats)
    bounded = max_retained <= open_limit and all(s.mode == "window" for s in stats)

    print("summary:")
    print(
        "  load average (1 min) at the end: "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (timings are noisy when > cores)"
    )
    print(
        f"  incremental total ({len(stats)} runs): {inc_total:.2f} s "
        f"(runs: {', '.join(f'{s.seconds:.2f}' for s in stats)})"
    )
    print(f"  baseline (a) one engine run:         {one.seconds:.2f} s")
    print(f"  baseline (b) plain Spark batch job:  {batch_seconds:.2f} s")
    print(f"  baseline (c) (b)'s job per slice:    {floor_seconds:.2f} s")
    print(f"ratio baseline/incremental, (a) one engine run: {one.seconds / inc_total:.3f}")
    print(
        f"ratio baseline/incremental, (b) batch job: {batch_seconds / inc_total:.3f} "
        f"(target >= 0.5)"
    )
    print(
        f"  floor: (b)/(c) {batch_seconds / floor_seconds:.3f} (the best (b) ratio any engine "
        f"running one Spark job per pull can reach here); incremental vs (c) "
        f"{floor_seconds / inc_total:.3f} (1.0: no cost beyond Spark's own per job)"
    )
    inc_cpu = sum(s.cpu_seconds for s in stats)
    print(
        f"  CPU seconds (driver JVM + Python): incremental {inc_cpu:.2f}, (a) "
        f"{one.cpu_seconds:.2f}, (b) {batch_cpu:.2f}; CPU ratio (b)/incremental "
        f"{batch_cpu / inc_cpu:.3f}"
    )
    print("  checkpoint after each run: " + ", ".join(_mb(s.checkpoint_bytes) for s in stats))
    print(
        "  retained input rows after each run: " + ", ".join(f"{s.retained_rows:,}" for s in stats)
    )
    print(
        f"  state bounded by the open window ({open_limit:,} rows/window, max retained "
        f"{max_retained:,}): {'yes' if bounded else 'NO'}"
    )
    print(
        "  JVM heap live after each run (after GC): "
        + ", ".join(_mb(s.heap_live) for s in stats)
        + f" (before: {_mb(heap_before)})"
    )
    print(
        "  JVM non-heap (Metaspace, code cache) after each run: "
        + ", ".join(_mb(s.non_heap) for s in stats)
        + f" (before: {_mb(non_heap_before)})"
    )
    heap_peak = max(s.heap_peak for s in stats)
    rss_peak = max(s.rss_peak for s in stats)
    print(
        f"  peak engine memory over the incremental runs: heap {_mb(heap_peak)} of "
        f"{_mb(memory.max_heap())}, JVM RSS {_mb(rss_peak)} (RSS before: {_mb(rss_before)})"
    )
    print_phases(stats, one)
    print_thread_cpu(stats, one)
    jobs = sum(s.spark_jobs for s in stats) / len(stats)
    stages = sum(s.spark_stages for s in stats) / len(stats)
    print(
        f"  Spark jobs (stages) per incremental run: {jobs:.1f} ({stages:.1f}); one engine run "
        f"(a): {one.spark_jobs} ({one.spark_stages})"
    )
    print(
        "  generated classes compiled per incremental run (0: the run reused the code of "
        "the previous ones): " + ", ".join(str(s.compiles) for s in stats)
    )
    print(
        f"correctness: incremental ({sum(inc_rows.values()):,} rows) vs one run "
        f"({sum(one_rows.values()):,} rows): {'OK' if ok_one else 'MISMATCH'}; vs batch job "
        f"closed windows ({sum(batch_rows.values()):,} rows): {'OK' if ok_batch else 'MISMATCH'}",
        flush=True,
    )
    return {
        "rows": rows,
        "incremental_s": inc_total,
        "one_run_s": one.seconds,
        "batch_s": batch_seconds,
        "per_slice_jobs_s": floor_seconds,
        "incremental_cpu_s": inc_cpu,
        "batch_cpu_s": batch_cpu,
        "runs": [asdict(s) for s in stats],
        "max_checkpoint_bytes": max(s.checkpoint_bytes for s in stats),
        "max_retained_rows": max_retained,
        "heap_peak": heap_peak,
        "heap_live": max(s.heap_live for s in stats),
        "rss_peak": rss_peak,
        "non_heap_growth": stats[-1].non_heap - stats[0].non_heap,
        "ok": ok_one and ok_batch and bounded,
    }


def print_phases(stats: list[RunStats], one: RunStats) -> None:
    """Where the time goes: mean and sum over the incremental runs, and baseline (a)."""
    top = [label for label in PHASES if not label.startswith(" ")]

    def rest(s: RunStats) -> float:
        return s.seconds - sum(s.phases.get(label, 0.0) for label in top)

    print(
        f"  where the time goes:{'':10s} {'incr mean':>10s} {'incr sum':>9s} {'(a) one run':>12s}"
    )
    rows = [(label, [s.phases.get(label, 0.0) for s in stats], one.phases.get(label, 0.0))
            for label in PHASES]  # fmt: skip
    rows.append(("other (watermarks etc.)", [rest(s) for s in stats], rest(one)))
    rows.append(("total", [s.seconds for s in stats], one.seconds))
    for label, values, single in rows:
        print(
            f"    {label:26s} {sum(values) / len(values):8.3f} s {sum(values):7.2f} s "
            f"{single:10.2f} s"
        )


def print_thread_cpu(stats: list[RunStats], one: RunStats) -> None:
    """Where the CPU goes, by thread role: mean over the incremental runs, and (a)."""
    roles = sorted({r for s in [*stats, one] for r in s.threads})
    print(f"  CPU by thread:{'':16s} {'incr mean':>10s} {'(a) one run':>12s}")
    for role in roles:
        mean = sum(s.threads.get(role, 0.0) for s in stats) / len(stats)
        print(f"    {role:26s} {mean:8.3f} s {one.threads.get(role, 0.0):10.2f} s")


# -- several sizes ----------------------------------------------------------------------------


def run_children(args: argparse.Namespace, sizes: list[int]) -> list[dict[str, Any]]:
    """Each size in its own process (own JVM); collect their summaries."""
    results = []
    for rows in sizes:
        print(f"=== {rows:,} rows ===", flush=True)
        cmd = [
            sys.executable, __file__, "--rows", str(rows), "--batches", str(args.batches),
            "--keys", str(args.keys), "--rows-per-hour", str(args.rows_per_hour),
            "--master", args.master, "--driver-memory", args.driver_memory, "--summary",
        ]  # fmt: skip
        if args.jit_scaling is not None:
            cmd += ["--jit-scaling", str(args.jit_scaling)]
        cmd += ["--warm-runs", str(args.warm_runs)]
        summary = None
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None
            for line in _lines(proc.stdout):
                if line.startswith(SUMMARY_PREFIX):
                    summary = json.loads(line[len(SUMMARY_PREFIX) :])
                else:
                    print(line, end="", flush=True)
        if summary is None:
            raise SystemExit(f"the {rows:,}-row run failed (exit status {proc.returncode})")
        results.append(summary)
    return results


def _lines(stream: Any) -> Iterator[str]:
    yield from iter(stream.readline, "")


def compare_sizes(results: list[dict[str, Any]]) -> None:
    print("=== history growth (same event-time rate, so the same open windows) ===")
    print(
        f"  {'rows':>12s} {'incr s':>8s} {'(a) s':>8s} {'(b) s':>8s} {'b/incr':>7s} "
        f"{'max ckpt':>10s} {'retained':>9s} {'heap peak':>10s} {'heap live':>10s} "
        f"{'RSS peak':>10s}"
    )
    for r in results:
        print(
            f"  {r['rows']:>12,} {r['incremental_s']:8.2f} {r['one_run_s']:8.2f} "
            f"{r['batch_s']:8.2f} {r['batch_s'] / r['incremental_s']:7.3f} "
            f"{_mb(r['max_checkpoint_bytes']):>10s} {r['max_retained_rows']:>9,} "
            f"{_mb(r['heap_peak']):>10s} {_mb(r['heap_live']):>10s} {_mb(r['rss_peak']):>10s}"
        )
    first, last = results[0], results[-1]
    scale = last["rows"] / first["rows"]
    for key, label in (
        ("max_checkpoint_bytes", "max checkpoint"),
        ("heap_live", "heap live"),
        ("heap_peak", "heap peak"),
        ("rss_peak", "RSS peak"),
    ):
        print(
            f"  {label} {last['rows']:,} / {first['rows']:,} rows: "
            f"{last[key] / max(first[key], 1):.2f}x (history grew {scale:.0f}x)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rows", type=int, action="append", help="input rows (repeatable); default 10M"
    )
    ap.add_argument("--big", action="store_true", help=f"also run {BIG_ROWS:,} rows")
    ap.add_argument("--batches", type=int, default=10, help="slices = engine runs")
    ap.add_argument("--keys", type=int, default=100, help="distinct values of k")
    ap.add_argument("--rows-per-hour", type=int, default=100_000, help="event-time rate")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--driver-memory", default="1g", help="the engine's default heap")
    ap.add_argument(
        "--jit-scaling", type=float, help="driver JVM JIT threshold scaling (1: JVM default)"
    )
    ap.add_argument(
        "--warm-runs", type=int, default=2, help="warm-up pulls and plain jobs (at least 2)"
    )
    ap.add_argument("--summary", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = list(args.rows or [10_000_000])
    if args.big and BIG_ROWS not in sizes:
        sizes.append(BIG_ROWS)
    if len(sizes) > 1:
        results = run_children(args, sizes)
        compare_sizes(results)
        ok = all(r["ok"] for r in results)
    else:
        result = bench(args, sizes[0])
        if args.summary:
            print(SUMMARY_PREFIX + json.dumps(result), flush=True)
        ok = result["ok"]
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
