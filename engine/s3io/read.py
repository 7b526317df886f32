"""An input whose slices are on S3, read through ``odf_s3`` in offset order.

As for slices on disk (`engine.inputs`): slices wholly outside the offset interval are
not read, the input's partitions in index order are its offset order, and a read that
is not ``parallel`` is one partition. With ``parallel`` a slice is split by row groups
across the cluster's cores (each task fetches and checks the whole object).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from engine.errors import EngineInternalError
from engine.inputs import InputPlan, SlicePlan
from engine.s3io.objects import InputObject, input_object, offset_bounds
from fbs.model.engine import TransformRequestInput

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["SPLIT_MIN_BYTES", "plan_s3_input", "read_s3_input", "s3_schema"]

#: A slice is split only into parts of at least this many bytes.
SPLIT_MIN_BYTES: Final = 16 * 1024 * 1024


def plan_s3_input(inp: TransformRequestInput) -> InputPlan:
    """Which slices of ``inp`` to read, from their checked footers."""
    iv = inp.offset_interval
    if iv is None:
        return InputPlan(slices=(), total_bytes=0)
    slices = []
    total = 0
    for path in inp.data_paths:
        obj = input_object(path)
        bounds = offset_bounds(obj, inp.vocab.offset_column)
        if bounds is not None and (bounds[1] < iv.start or bounds[0] > iv.end):
            continue
        inside = bounds is not None and iv.start <= bounds[0] and bounds[1] <= iv.end
        slices.append(SlicePlan(path, needs_filter=not inside))
        total += obj.size
    return InputPlan(slices=tuple(slices), total_bytes=total)


def s3_schema(inp: TransformRequestInput) -> StructType:
    """The input's Spark schema, from its schema file read on the driver (Spark's own
    inference runs a job, and executors cannot read the node's files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(pq.read_schema(inp.schema_file))
    except (OSError, pa.ArrowException, TypeError) as e:
        raise EngineInternalError(
            f"input {inp.query_alias!r}: cannot read schema file {inp.schema_file!r}: {e}"
        ) from None


def _splits(obj: InputObject, cores: int, parallel: bool) -> int:
    if not parallel:
        return 1
    by_size = max(1, obj.size // SPLIT_MIN_BYTES)
    groups: int = obj.metadata.num_row_groups
    return max(1, min(groups, cores, by_size))


def read_s3_input(
    session: SparkSession, inp: TransformRequestInput, plan: InputPlan, *, parallel: bool
) -> DataFrame:
    """The input's rows in offset order (see the module docstring)."""
    from engine.s3io.register import register_source

    schema = s3_schema(inp)
    iv = inp.offset_interval
    if iv is None or not plan.slices:
        return session.createDataFrame([], schema)
    source = register_source(session)
    cores = session.sparkContext.defaultParallelism
    objects = []
    for s in plan.slices:
        obj = input_object(s.path)
        splits = _splits(obj, cores, parallel)
        objects.append([obj.endpoint or "", obj.bucket, obj.key, obj.digest_hex, splits])
    df = (
        session.read.format(source)
        .schema(schema)
        .option("objects", json.dumps(objects))
        .option("offset_column", inp.vocab.offset_column)
        .option("start", str(iv.start))
        .option("end", str(iv.end))
        .load()
    )
    return df if parallel else df.coalesce(1)
