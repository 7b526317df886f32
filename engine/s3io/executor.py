"""The Spark Python Data Source ``odf_s3``: what Spark's Python workers run on executors.

Executors may be on other machines and see nothing of the node's disk, so this module is
shipped to them by value (`engine.s3io.register` has cloudpickle pickle it whole) and
imports nothing of this project: only the standard library, pyarrow and pyspark, which
the executors' Python environment holds.

- Reading: one input partition per (object, split). The driver names every object by its
  exact key and the SHA3-256 digest the metadata gives it; a task reads the whole object,
  checks its digest before parsing a byte of it, then yields Arrow batches of its share
  of the row groups (split ``i`` of ``k``: a contiguous run of row groups, so partitions
  in index order are the object's row order), with rows outside the offset interval
  dropped and timestamps in Spark's microseconds.
- Writing: each task writes its rows as one Parquet part (snappy, timestamps floored to
  UTC milliseconds, Spark's nullability and version footer key) under the run's staging
  prefix and reports its key, digest, size and row count; the job commit (on the driver)
  writes them, in partition order, as the run's ``manifest.json``.

Credentials come from the workers' environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``), which the engine sets
through ``spark.executorEnv.*``: never from options, which show in query plans.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

#: Name the data source is registered under.
SOURCE_NAME: Final = "odf_s3"
#: Largest object a task reads into memory to hash it.
MAX_OBJECT_BYTES: Final = 1 << 30
#: Name of the run's part list under its staging prefix.
MANIFEST_NAME: Final = "manifest.json"
#: Footer key of the Spark version (Spark's reader decides calendar rebasing by it).
SPARK_VERSION_KEY: Final = "org.apache.spark.version"
#: Region signed for when the environment names none (S3-compatible servers accept it).
DEFAULT_REGION: Final = "us-east-1"


def filesystem(endpoint: str) -> Any:
    """pyarrow's S3 filesystem for ``endpoint`` (``""``: AWS), credentials from the environment."""
    from pyarrow import fs

    scheme, _, host = endpoint.partition("://")
    env = os.environ
    return fs.S3FileSystem(
        access_key=env.get("AWS_ACCESS_KEY_ID"),
        secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
        session_token=env.get("AWS_SESSION_TOKEN"),
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        endpoint_override=host or None,
        scheme=scheme or "https",
        force_virtual_addressing=False,
    )


def read_verified(endpoint: str, bucket: str, key: str, digest_hex: str) -> bytes:
    """The bytes of ``key``, after checking their SHA3-256 digest is ``digest_hex``."""
    with filesystem(endpoint).open_input_stream(f"{bucket}/{key}") as f:
        data = f.read(MAX_OBJECT_BYTES + 1)
    if len(data) > MAX_OBJECT_BYTES:
        raise ValueError(f"s3 object {key} is larger than {MAX_OBJECT_BYTES} bytes")
    if hashlib.sha3_256(data).hexdigest() != digest_hex:
        raise ValueError(f"s3 object {key} does not match its hash (damaged or replaced)")
    return bytes(data)


@dataclass(frozen=True, slots=True)
class ObjectSplit:
    """Split ``split`` of ``splits`` of one input object (see the module docstring)."""

    endpoint: str
    bucket: str
    key: str
    digest: str
    split: int
    splits: int


def _group_range(stats: Any, column: int, start: int, end: int) -> str:
    """``inside``, ``outside`` or ``mixed``: a row group's offsets against ``[start, end]``."""
    s = stats.column(column).statistics
    if s is None or not s.has_min_max:
        return "mixed"
    if s.max < start or s.min > end:
        return "outside"
    return "inside" if start <= s.min and s.max <= end else "mixed"


def _batches(data: bytes, part: ObjectSplit, target: Any, interval: tuple[str, int, int]) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(pa.BufferReader(data))
    n = pf.metadata.num_row_groups
    offset_name, start, end = interval
    names = [pf.metadata.schema.column(i).path for i in range(pf.metadata.num_columns)]
    for g in range(part.split * n // part.splits, (part.split + 1) * n // part.splits):
        where = _group_range(pf.metadata.row_group(g), names.index(offset_name), start, end)
        if where == "outside":
            continue
        table = pf.read_row_group(g, columns=target.names)
        if where == "mixed":
            col = table.column(offset_name)
            table = table.filter(pc.and_(pc.greater_equal(col, start), pc.less_equal(col, end)))
        yield from table.cast(target).to_batches()


class OdfS3Reader(DataSourceReader):
    """Reads the objects named by the ``objects`` option (see the module docstring)."""

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        self._objects: list[list[Any]] = json.loads(options["objects"])
        self._interval = (options["offset_column"], int(options["start"]), int(options["end"]))
        self._schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return [
            InputPartition(ObjectSplit(endpoint, bucket, key, digest, i, splits))
            for endpoint, bucket, key, digest, splits in self._objects
            for i in range(splits)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        part: ObjectSplit = partition.value
        target = to_arrow_schema(self._schema, timezone="UTC")
        data = read_verified(part.endpoint, part.bucket, part.key, part.digest)
        yield from _batches(data, part, target, self._interval)


@dataclass(frozen=True, slots=True)
class PartWritten(WriterCommitMessage):
    """A part a write task put under the staging prefix."""

    partition: int
    key: str
    digest: str
    size: int
    rows: int


def file_schema(schema: Any) -> Any:
    """The Arrow schema of an output part: Spark's nullability, UTC-millisecond timestamps."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema, timezone="UTC")
    fields = [
        pa.field(
            f.name, pa.timestamp("ms", tz="UTC") if pa.types.is_timestamp(f.type) else f.type
        ).with_nullable(sf.nullable)
        for f, sf in zip(arrow, schema.fields, strict=True)
    ]
    return pa.schema(fields)


def conform(batch: Any, schema: Any) -> Any:
    """``batch`` with ``schema``'s types: timestamps floored to milliseconds as Spark's writer."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays = []
    for column, field in zip(batch.columns, schema, strict=True):
        if pa.types.is_timestamp(field.type) and column.type != field.type:
            column = pc.floor_temporal(column, unit="millisecond")
        arrays.append(column.cast(field.type) if column.type != field.type else column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class OdfS3Writer(DataSourceArrowWriter):
    """Writes each task's rows as one Parquet part under the ``prefix`` option."""

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        self._endpoint = options["endpoint"]
        self._bucket = options["bucket"]
        self._prefix = options["prefix"]
        self._spark_version = options["spark_version"]
        self._schema = schema

    def write(self, iterator: Iterator[Any]) -> PartWritten:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        schema = file_schema(self._schema)
        sink = pa.BufferOutputStream()
        rows = 0
        with pq.ParquetWriter(sink, schema, compression="snappy", store_schema=False) as w:
            for batch in iterator:
                rows += batch.num_rows
                w.write_batch(conform(batch, schema))
            w.add_key_value_metadata({SPARK_VERSION_KEY: self._spark_version})
        data = sink.getvalue()
        key = f"{self._prefix}/part-{partition:05d}-{uuid.uuid4().hex}.parquet"
        with filesystem(self._endpoint).open_output_stream(f"{self._bucket}/{key}") as out:
            out.write(data)
        digest = hashlib.sha3_256(memoryview(data)).hexdigest()
        return PartWritten(partition, key, digest, data.size, rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        parts = sorted((m for m in messages if isinstance(m, PartWritten)), key=_partition)
        manifest = [[p.partition, p.key, p.digest, p.size, p.rows] for p in parts]
        path = f"{self._bucket}/{self._prefix}/{MANIFEST_NAME}"
        with filesystem(self._endpoint).open_output_stream(path) as out:
            out.write(json.dumps({"parts": manifest}).encode("utf-8"))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        fs = filesystem(self._endpoint)
        for m in messages:
            if isinstance(m, PartWritten):
                fs.delete_file(f"{self._bucket}/{m.key}")


def _partition(part: PartWritten) -> int:
    return part.partition


class OdfS3Source(DataSource):
    """``spark.read.format("odf_s3")`` / ``df.write.format("odf_s3")`` (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def reader(self, schema: Any) -> DataSourceReader:
        return OdfS3Reader(dict(self.options), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return OdfS3Writer(dict(self.options), schema)
