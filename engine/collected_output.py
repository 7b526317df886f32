"""Write a small output from Arrow batches collected to the driver, without Spark's writer.

Spark's Parquet writer goes through Hadoop's output committer: a task commit, a job commit,
a folder listing and (on local disks) a ``chmod`` process per file, about 0.3 s of a 1 s
plain job over 1M rows (`scripts/bench/streaming.py`). An output known to be small (a
window aggregation's closed windows) is collected instead (Spark's Arrow collection: one
job, batches in partition order) and written here with pyarrow into one part file, which
`engine.parquet_merge.merge_parts` completes exactly as it completes Spark's parts.

The file has what Spark's writer gives it (`engine.output.finish_output`'s layout), so its
rows, their types and their logical hash do not depend on which writer ran: the same
columns and order, ``REQUIRED`` where the Spark field is not nullable, timestamps as
``INT64 TIMESTAMP(MILLIS, UTC)`` floored from Spark's microseconds (as Spark's
``TIMESTAMP_MILLIS`` writer floors), Spark's footer keys (the version, which tells Spark's
reader the file needs no calendar rebase, and the row schema). Only flat columns of the
types in `_ROW_SIZES` are collected; anything else (nested, decimal, timestamp without
time zone, intervals) goes to Spark's writer, as does an output whose size bound
(`collectable`) exceeds `MAX_COLLECTED_OUTPUT_BYTES`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from engine.parquet_merge import SequenceColumn, write_merged
from engine.sql import write_single_parquet

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "MAX_COLLECTED_OUTPUT_BYTES",
    "SPARK_ROOT_NAME",
    "SPARK_VERSION_KEY",
    "collectable",
    "write_arrow_output",
    "write_output",
]

#: Largest output (its row bound times Spark's estimate of a row's size) collected to
#: the driver: the driver JVM holds the serialized batches, this process the table.
MAX_COLLECTED_OUTPUT_BYTES: Final = 128 * 1024 * 1024
#: Name of the schema's root in the files Spark writes (pyarrow's is ``schema``).
SPARK_ROOT_NAME: Final = "spark_schema"
#: Footer key of the Spark version that wrote a file (Spark's reader decides calendar
#: rebasing by it: without it, dates before 1582 fail to read under the default mode).
SPARK_VERSION_KEY: Final = "org.apache.spark.version"


#: Spark SQL types collected (by class name) -> Spark's own estimate of a value's size
#: (``DataType.defaultSize``: strings 20, binaries 100 bytes).
_ROW_SIZES: Final = {
    "BooleanType": 1,
    "ByteType": 1,
    "ShortType": 2,
    "IntegerType": 4,
    "LongType": 8,
    "FloatType": 4,
    "DoubleType": 8,
    "StringType": 20,
    "BinaryType": 100,
    "DateType": 4,
    "TimestampType": 8,
}


def _arrow_type(spark_type: str) -> pa.DataType:
    """The Arrow type of a column of Spark type ``spark_type`` (a `_ROW_SIZES` key)."""
    import pyarrow as pa

    types: dict[str, pa.DataType] = {
        "BooleanType": pa.bool_(),
        "ByteType": pa.int8(),
        "ShortType": pa.int16(),
        "IntegerType": pa.int32(),
        "LongType": pa.int64(),
        "FloatType": pa.float32(),
        "DoubleType": pa.float64(),
        "StringType": pa.string(),
        "BinaryType": pa.binary(),
        "DateType": pa.date32(),
        "TimestampType": pa.timestamp("ms", tz="UTC"),
    }
    return types[spark_type]


def collectable(schema: StructType, max_rows: int | None) -> bool:
    """True if an output of ``schema`` with at most ``max_rows`` rows (None: unknown) is
    written from collected batches: every column flat and of a type in `_ROW_SIZES`,
    names distinct, and ``max_rows`` times Spark's row size estimate within
    `MAX_COLLECTED_OUTPUT_BYTES`."""
    if max_rows is None:
        return False
    names = [f.name.lower() for f in schema.fields]
    if len(set(names)) != len(names):
        return False
    kinds = [type(f.dataType).__name__ for f in schema.fields]
    if any(kind not in _ROW_SIZES for kind in kinds):
        return False
    row_bytes = sum(_ROW_SIZES[kind] for kind in kinds)
    return max_rows * max(row_bytes, 1) <= MAX_COLLECTED_OUTPUT_BYTES


def write_output(
    df: DataFrame,
    target: str | os.PathLike[str],
    columns: Sequence[SequenceColumn | int],
    *,
    spark_schema: StructType,
    max_rows: int | None,
) -> int:
    """Write ``df`` as the one output file at ``target``; return its number of rows.

    From collected batches when `collectable` (``max_rows``: a bound on ``df``'s rows),
    else with Spark's writer (`engine.sql.write_single_parquet`). Same file either way
    (see the module docstring); ``columns`` and ``spark_schema`` as for `merge_parts`.

    Raises:
        EngineInternalError: if the file cannot be written or merged.
    """
    if not collectable(df.schema, max_rows):
        return write_single_parquet(df, target, columns, spark_schema=spark_schema)

    def write_parts(tmp_dir: Path) -> list[Path]:
        tmp_dir.mkdir()
        part = tmp_dir / "part-00000.parquet"
        _write_part(df, part)
        return [part]

    return write_merged(
        target,
        write_parts,
        columns,
        spark_schema_json=spark_schema.json(),
        root_name=SPARK_ROOT_NAME,
    )


def write_arrow_output(
    table: pa.Table,
    target: str | os.PathLike[str],
    columns: Sequence[SequenceColumn | int],
    *,
    spark_schema: StructType,
    row_schema: StructType,
    session: SparkSession,
) -> int:
    """Write ``table`` (computed on the driver; its columns those of ``row_schema``, a
    flat schema of `_ROW_SIZES` types) as the one output file at ``target``, the same
    file Spark's writer would give; return its number of rows. ``columns`` and
    ``spark_schema`` as for `write_output`.

    Raises:
        EngineInternalError: if the file cannot be written or merged.
    """

    def write_parts(tmp_dir: Path) -> list[Path]:
        tmp_dir.mkdir()
        part = tmp_dir / "part-00000.parquet"
        _write_table(table.to_batches(), row_schema, part, _version(session))
        return [part]

    return write_merged(
        target,
        write_parts,
        columns,
        spark_schema_json=spark_schema.json(),
        root_name=SPARK_ROOT_NAME,
    )


def _write_part(df: DataFrame, path: Path) -> None:
    """Collect ``df`` (one Spark job) and write it to ``path`` as Spark would."""
    collector: Any = df  # PySpark's Arrow collection (what `DataFrame.toArrow` uses)
    batches = collector._collect_as_arrow(empty_list_if_zero_records=False)
    _write_table(batches, df.schema, path, _version(df.sparkSession))


def _write_table(
    batches: Sequence[pa.RecordBatch], row_schema: StructType, path: Path, version: str
) -> None:
    """Write ``batches`` (columns of ``row_schema``) to ``path`` as Spark would."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema(row_schema)
    table = pa.Table.from_batches([_conform(b, schema) for b in batches], schema=schema)
    with pq.ParquetWriter(path, schema, compression="snappy", store_schema=False) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata({SPARK_VERSION_KEY: version})


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the file's columns (`_arrow_type`), with Spark's nullability."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field(f.name, _arrow_type(type(f.dataType).__name__), nullable=f.nullable)
            for f in schema.fields
        ]
    )


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``schema``'s types: timestamps floored to milliseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays = []
    for column, field in zip(batch.columns, schema, strict=True):
        if pa.types.is_timestamp(field.type) and column.type != field.type:
            # Floor, not truncate: Spark's writer takes floorDiv(micros, 1000).
            column = pc.floor_temporal(column, unit="millisecond")
        arrays.append(column.cast(field.type) if column.type != field.type else column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _version(session: SparkSession) -> str:
    """The Spark version string Spark's own writer records (``major.minor.patch``)."""
    jvm: Any = session.sparkContext._jvm
    return str(jvm.org.apache.spark.package.SPARK_VERSION_SHORT())
