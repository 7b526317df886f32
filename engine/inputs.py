"""Reading a transform's inputs in offset order, and telling which queries keep that order.

See `engine.transform` for why partition order matters. This module decides, per input:

- which slices to read at all and which need the offset filter, from the slices' footer
  statistics (`offset_bounds`): a slice wholly inside the interval is read unfiltered, a
  slice wholly outside is skipped, anything else (or no statistics) is filtered;
- whether to read it on all cores (one scan per slice, concatenated in order) or as one
  partition; `read_input` does either.

`is_narrow` inspects a query's optimized plan: only then may inputs be read in parallel.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from engine.errors import EngineConfigError, EngineInternalError
from engine.sql import quote_identifier
from fbs.model.engine import TransformRequestInput

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "MAX_CACHED_SCHEMA_FILE_BYTES",
    "MAX_ORDERED_UNION_FILES",
    "NARROW_PLAN_NODES",
    "PARALLEL_MIN_BYTES",
    "PARALLEL_MIN_BYTES_CONF",
    "PARTITIONING_PLAN_NODES",
    "SCHEMA_CACHE_SIZE",
    "InputPlan",
    "SlicePlan",
    "is_narrow",
    "offset_bounds",
    "parallel_min_bytes",
    "plan_input",
    "plan_node_names",
    "read_input",
    "schema_of_file",
    "stateful_nodes",
]

#: Inputs with at most this many files are read as an ordered union (no sort); larger
#: ones are read in one scan and sorted (a union of thousands of scans plans slowly).
MAX_ORDERED_UNION_FILES: Final = 256
#: Inputs smaller than this are read as one partition even for narrow queries: splitting
#: them buys nothing and costs a task and a part file per slice. Overridden by the
#: engine session's `PARALLEL_MIN_BYTES_CONF` setting.
PARALLEL_MIN_BYTES: Final = 32 * 1024 * 1024
PARALLEL_MIN_BYTES_CONF: Final = "spark.odf.engine.parallelMinBytes"
#: Schema files up to this size are cached by content (`schema_of_file`).
MAX_CACHED_SCHEMA_FILE_BYTES: Final = 4 * 1024 * 1024
#: Most schemas kept by `schema_of_file`.
SCHEMA_CACHE_SIZE: Final = 256
_SCHEMA_CACHE: collections.OrderedDict[bytes, StructType] = collections.OrderedDict()
_SCHEMA_CACHE_LOCK: Final = threading.Lock()
#: Logical plan nodes that map each input row to output rows in the same partition, in
#: order. Anything else (Aggregate, Join, Window, Sort, limits, Repartition ...) makes the
#: query "wide".
NARROW_PLAN_NODES: Final = frozenset(
    {
        "Project",
        "Filter",
        "Union",
        "LogicalRelation",
        "LocalRelation",
        "Generate",
        # The scan of an input on S3 (`engine.s3io`).
        "DataSourceV2ScanRelation",
    }
)
#: Plan nodes that only move rows between partitions (``coalesce``, ``DISTRIBUTE BY``) or
#: read them from Spark's cache (the stateful executor's persisted input views).
PARTITIONING_PLAN_NODES: Final = frozenset(
    {"Repartition", "RepartitionByExpression", "InMemoryRelation"}
)


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """One data file of an input and whether its rows need the offset filter."""

    path: str
    needs_filter: bool


@dataclass(frozen=True, slots=True)
class InputPlan:
    """What to read of one input: the slices in order, and their total size in bytes."""

    slices: tuple[SlicePlan, ...]
    total_bytes: int

    def splittable(self, min_bytes: int) -> bool:
        """True if this input has ``min_bytes`` or more, and few enough files, to split."""
        return self.total_bytes >= min_bytes and 0 < len(self.slices) <= MAX_ORDERED_UNION_FILES


def parallel_min_bytes(session: SparkSession) -> int:
    """The session's `PARALLEL_MIN_BYTES_CONF`, else `PARALLEL_MIN_BYTES`.

    Raises:
        EngineConfigError: if the setting is not a non-negative integer.
    """
    value = session.conf.get(PARALLEL_MIN_BYTES_CONF, None)
    if value is None:
        return PARALLEL_MIN_BYTES
    try:
        parsed = int(value)
    except ValueError:
        parsed = -1
    if parsed < 0:
        raise EngineConfigError(f"{PARALLEL_MIN_BYTES_CONF} must be a byte count, got {value!r}")
    return parsed


def offset_bounds(path: str, offset_column: str) -> tuple[int, int] | None:
    """Min and max of ``offset_column`` from a Parquet footer, None if unknown or empty."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
    except (OSError, ValueError):
        return None  # Spark reports the unreadable file when it reads it
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if offset_column not in names or meta.num_row_groups == 0:
        return None
    index = names.index(offset_column)
    lo: int | None = None
    hi: int | None = None
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max or stats.physical_type != "INT64":
            return None
        lo = stats.min if lo is None else min(lo, stats.min)
        hi = stats.max if hi is None else max(hi, stats.max)
    if lo is None or hi is None:
        return None
    return int(lo), int(hi)


def plan_input(inp: TransformRequestInput) -> InputPlan:
    """Which slices of ``inp`` to read, with or without the offset filter."""
    from storage.s3.url import is_s3_url

    iv = inp.offset_interval
    if iv is None:
        return InputPlan(slices=(), total_bytes=0)
    if any(is_s3_url(p) for p in inp.data_paths):
        from engine.s3io.read import plan_s3_input

        return plan_s3_input(inp)
    if len(inp.data_paths) > MAX_ORDERED_UNION_FILES:
        # Read in one scan and sorted anyway; footers of thousands of files cost more
        # than the filter saves.
        return InputPlan(
            slices=tuple(SlicePlan(p, needs_filter=True) for p in inp.data_paths),
            total_bytes=0,
        )
    slices = []
    total = 0
    for path in inp.data_paths:
        bounds = offset_bounds(path, inp.vocab.offset_column)
        if bounds is not None and (bounds[1] < iv.start or bounds[0] > iv.end):
            continue
        inside = bounds is not None and iv.start <= bounds[0] and bounds[1] <= iv.end
        slices.append(SlicePlan(path, needs_filter=not inside))
        with contextlib.suppress(OSError):  # Spark reports a missing file when reading
            total += os.stat(path).st_size
    return InputPlan(slices=tuple(slices), total_bytes=total)


def read_input(
    session: SparkSession, inp: TransformRequestInput, plan: InputPlan, *, parallel: bool
) -> DataFrame:
    """The input's rows in offset order: partitions in index order are offset order.

    With ``parallel`` the slices keep Spark's own splits (several partitions); otherwise
    the input is one partition.

    Raises:
        EngineInternalError: if the schema file is missing and there is no data.
    """
    from pyspark.sql import functions as F

    from engine.s3io.settings import staging_of
    from storage.s3.url import is_s3_url

    # Slices on S3, or no slice on an engine whose executors may not see the schema file.
    paths = inp.data_paths
    if is_s3_url(paths[0]) if paths else staging_of(session) is not None:
        from engine.s3io.read import read_s3_input

        return read_s3_input(session, inp, plan, parallel=parallel)
    iv = inp.offset_interval
    schema_file = Path(inp.schema_file) if inp.schema_file else None
    if schema_file is not None and schema_file.is_file():
        schema = schema_of_file(session, schema_file)
    elif inp.data_paths:
        schema = session.read.parquet(*inp.data_paths).schema
    else:
        raise EngineInternalError(
            f"input {inp.query_alias!r}: schema file {inp.schema_file!r} not found and no data"
        )
    if iv is None or not plan.slices:
        # Reading the schema file itself keeps the exact column types of the input.
        source = list(inp.data_paths[:1]) or [str(schema_file)]
        return session.read.schema(schema).parquet(*source).where(F.lit(False))

    def offset() -> Column:
        # Built only when needed: a PySpark column costs a dozen py4j calls.
        return F.col(quote_identifier(inp.vocab.offset_column))

    def in_interval() -> Column:
        return (offset() >= F.lit(iv.start)) & (offset() <= F.lit(iv.end))

    if len(plan.slices) > MAX_ORDERED_UNION_FILES:
        df = session.read.schema(schema).parquet(*(s.path for s in plan.slices))
        df = df.where(in_interval())
        # With one partition a local sort is a total order: no range-partitioning shuffle.
        return df.coalesce(1).sortWithinPartitions(offset())

    def one(s: SlicePlan) -> DataFrame:
        df = session.read.schema(schema).parquet(s.path)
        return df.where(in_interval()) if s.needs_filter else df

    # ODF slices are stored ordered by offset and the coordinator lists them oldest
    # first, so concatenating per-file scans in that order is the offset order.
    # Unordered slices break an ODF invariant that `storage.verify` reports.
    df = functools.reduce(lambda a, b: a.union(b), (one(s) for s in plan.slices))
    return df if parallel else df.coalesce(1)


def schema_of_file(session: SparkSession, path: Path) -> StructType:
    """Spark's schema of the Parquet file ``path``, cached by the file's content.

    Spark infers a Parquet schema with a job (~0.1 s, a quarter of a small transform);
    the coordinator writes the same schema file for an input on every request, so the
    cache keyed by a digest of its (small) bytes makes later requests skip the job.
    """
    try:
        if path.stat().st_size > MAX_CACHED_SCHEMA_FILE_BYTES:
            return session.read.parquet(str(path)).schema
        key = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return session.read.parquet(str(path)).schema  # Spark reports the error
    with _SCHEMA_CACHE_LOCK:
        cached = _SCHEMA_CACHE.get(key)
        if cached is not None:
            _SCHEMA_CACHE.move_to_end(key)
            return cached
    schema = session.read.parquet(str(path)).schema
    with _SCHEMA_CACHE_LOCK:
        _SCHEMA_CACHE[key] = schema
        while len(_SCHEMA_CACHE) > SCHEMA_CACHE_SIZE:
            _SCHEMA_CACHE.popitem(last=False)
    return schema


def is_narrow(df: DataFrame) -> bool:
    """True if every node of ``df``'s optimized plan is in `NARROW_PLAN_NODES` and the
    plan is deterministic: output partitions then follow input partitions row by row."""
    plan: Any = df._jdf.queryExecution().optimizedPlan()
    return bool(plan.deterministic()) and not _wide_nodes(plan)


def stateful_nodes(df: DataFrame) -> list[str]:
    """Names of the nodes of ``df``'s optimized plan that make a query stateful across
    runs (aggregations, joins, windows, sorts, limits ...), one entry per node.
    Repartitioning is not state: it changes partitions, not results."""
    plan: Any = df._jdf.queryExecution().optimizedPlan()
    return [n for n in _wide_nodes(plan) if n not in PARTITIONING_PLAN_NODES]


def plan_node_names(df: DataFrame) -> list[str]:
    """Names of every node of ``df``'s optimized plan, one entry per node."""
    names = []
    stack: list[Any] = [df._jdf.queryExecution().optimizedPlan()]
    while stack:
        node = stack.pop()
        names.append(str(node.nodeName()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return names


def _wide_nodes(plan: Any) -> list[str]:
    found = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.nodeName() not in NARROW_PLAN_NODES:
            found.append(str(node.nodeName()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
        # A subquery in an expression (``WHERE v > (SELECT avg(v) FROM t)``) is a plan
        # of its own, not a child: its aggregate makes the query stateful all the same.
        subqueries = node.subqueries()
        stack.extend(subqueries.apply(i) for i in range(subqueries.size()))
    return found
