"""Join the part files of a parallel Spark write into one Parquet file, without re-encoding.

An ODF transform must produce exactly one data file whose rows are in offset order. Making
Spark write one file means one task for the whole query (kamu's engine does that); here
Spark writes one part file per partition on all cores, and `merge_parts` then concatenates
the parts' row groups in partition order by copying their column chunks byte for byte
(parquet-mr's ``ParquetFileWriter.appendColumnChunk``, which also carries the page
indexes over). Partition order is the order ``coalesce(1)`` would have produced, so the
result has the same rows in the same order as a single-task write.

Columns whose values are an arithmetic sequence over the whole file (the ODF offset,
a constant ``op``, a constant ``system_time``) are not computed by Spark at all: they are
`SequenceColumn`s, written here per row group as ``DELTA_BINARY_PACKED`` pages (a few
bytes per 256 values, since every delta is the same) with exact min/max statistics. Only
the merge knows how many rows precede each row group, so offsets cost neither a second
pass over the data nor a single-task write.

The merged file keeps Spark's footer metadata (``org.apache.spark.*``) with the row schema
replaced by the full output schema, so Spark reads the columns back with their SQL types.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from engine.errors import EngineInternalError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_BLOCK_SIZE",
    "DELTA_MINIBLOCKS",
    "MAX_PAGE_VALUES",
    "SPARK_ROW_METADATA_KEY",
    "SequenceColumn",
    "delta_sequence_page",
    "merge_parts",
    "part_files",
]

#: Values per DELTA_BINARY_PACKED block and miniblocks per block (Arrow C++'s 256 / 4,
#: so the bytes equal what pyarrow writes for the same values).
DELTA_BLOCK_SIZE: Final = 256
DELTA_MINIBLOCKS: Final = 4
#: Most values in one synthesized data page (its bytes: ~5 per 256 values).
MAX_PAGE_VALUES: Final = 1 << 22
#: Footer key holding Spark's row schema (JSON of a StructType).
SPARK_ROW_METADATA_KEY: Final = "org.apache.spark.sql.parquet.row.metadata"

_PART_RE: Final = re.compile(r"part-(\d+)-.*\.parquet$")
_INT_RANGES: Final = {"INT32": (-(2**31), 2**31 - 1), "INT64": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SequenceColumn:
    """A required integer column equal to ``first + step * row`` over the merged file.

    Attributes:
        name: column name in the output.
        physical: Parquet physical type.
        first: value of the file's first row.
        step: difference between consecutive rows (0 for a constant).
        timestamp_millis: annotate as ``TIMESTAMP(MILLIS, UTC)`` (INT64 only).
    """

    name: str
    physical: Literal["INT32", "INT64"]
    first: int
    step: int
    timestamp_millis: bool = False

    def value_at(self, row: int) -> int:
        """The value of row ``row`` (0-based) of the merged file."""
        return self.first + self.step * row

    def check(self, rows: int) -> None:
        """Raise `EngineInternalError` if some value of ``rows`` rows would overflow."""
        lo, hi = _INT_RANGES[self.physical]
        last = self.value_at(max(rows - 1, 0))
        if not (lo <= self.first <= hi and lo <= last <= hi):
            raise EngineInternalError(
                f"column {self.name!r}: values {self.first}..{last} overflow {self.physical}"
            )


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def delta_sequence_page(first: int, step: int, count: int) -> bytes:
    """DELTA_BINARY_PACKED bytes of ``first, first + step, ...`` (``count`` values).

    Every delta equals ``step`` = the block's min delta, so every miniblock has bit width
    0 and no body: a block is its min delta plus one zero byte per miniblock.
    """
    if count < 1:
        raise ValueError("a page holds at least one value")
    header = (
        _uvarint(DELTA_BLOCK_SIZE)
        + _uvarint(DELTA_MINIBLOCKS)
        + _uvarint(count)
        + _uvarint(_zigzag(first))
    )
    blocks = -(-(count - 1) // DELTA_BLOCK_SIZE)
    return header + (_uvarint(_zigzag(step)) + bytes(DELTA_MINIBLOCKS)) * blocks


def part_files(folder: Path) -> list[Path]:
    """The ``part-NNNNN-*.parquet`` files of a Spark output folder, in partition order."""
    found = []
    for path in folder.iterdir():
        m = _PART_RE.match(path.name)
        if m:
            found.append((int(m.group(1)), path.name, path))
    return [p for _, _, p in sorted(found)]


class _Jvm:
    """The parquet-mr / Hadoop classes used by the merge, looked up once per merge."""

    def __init__(self, session: SparkSession) -> None:
        jvm: Any = session._jvm
        # Hadoop's raw local file system: buffered, without ChecksumFileSystem's .crc
        # side files (parquet-mr's LocalOutputFile writes unbuffered: 40x slower).
        conf = jvm.org.apache.hadoop.conf.Configuration(session._jsc.hadoopConfiguration())
        conf.set("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        conf.setBoolean("fs.file.impl.disable.cache", True)
        self.conf = conf
        self.hadoop_path = jvm.org.apache.hadoop.fs.Path
        util = jvm.org.apache.parquet.hadoop.util
        self.input_file = util.HadoopInputFile
        self.output_file = util.HadoopOutputFile
        self.reader = jvm.org.apache.parquet.hadoop.ParquetFileReader
        self.writer = jvm.org.apache.parquet.hadoop.ParquetFileWriter
        schema = jvm.org.apache.parquet.schema
        self.types = schema.Types
        self.primitive = schema.PrimitiveType.PrimitiveTypeName
        self.logical = schema.LogicalTypeAnnotation
        self.message_type = schema.MessageType
        # Each attribute of a py4j class is a round trip to the JVM: resolve them once.
        encoding = jvm.org.apache.parquet.column.Encoding
        self.rle = encoding.RLE
        self.delta = encoding.DELTA_BINARY_PACKED
        self.statistics = jvm.org.apache.parquet.column.statistics.Statistics
        self.bytes_from = getattr(jvm.org.apache.parquet.bytes.BytesInput, "from")
        self.snappy = jvm.org.apache.parquet.hadoop.metadata.CompressionCodecName.SNAPPY
        self.create = self.writer.Mode.CREATE
        self.array_list = jvm.java.util.ArrayList
        self.hash_map = jvm.java.util.HashMap

    def open(self, path: Path) -> tuple[Any, Any]:
        """The ``(InputFile, ParquetFileReader)`` of ``path``."""
        file = self.input_file.fromPath(self.path(path), self.conf)
        return file, self.reader.open(file)

    def path(self, path: Path) -> Any:
        return self.hadoop_path(path.resolve().as_uri())

    def sequence_type(self, col: SequenceColumn) -> Any:
        builder = self.types.required(getattr(self.primitive, col.physical))
        if col.timestamp_millis:
            unit = self.logical.TimeUnit.MILLIS
            builder = getattr(builder, "as")(self.logical.timestampType(True, unit))
        return builder.named(col.name)


def merge_parts(
    session: SparkSession,
    parts: Sequence[Path],
    target: Path,
    columns: Sequence[SequenceColumn | int],
    *,
    spark_schema_json: str | None = None,
) -> int:
    """Write ``target`` from ``parts`` (in order) and return its number of rows.

    Args:
        session: a session of the Spark application that wrote the parts (its JVM and
            Hadoop configuration are used).
        parts: part files with identical schemas, in the order their rows go out.
        target: the file to create (must not exist).
        columns: the output columns in order: an ``int`` copies that column (by index)
            of the parts, a `SequenceColumn` is synthesized.
        spark_schema_json: Spark row schema to record in the footer (else the parts').

    Raises:
        EngineInternalError: no parts, differing schemas, a column index out of range,
            or a sequence that overflows its type.
    """
    if not parts:
        raise EngineInternalError("Spark wrote no part files")
    jvm = _Jvm(session)
    opened: list[tuple[Any, Any]] = []
    try:
        opened.extend(jvm.open(p) for p in parts)
        return _merge(jvm, opened, target, columns, spark_schema_json)
    finally:
        for _, reader in opened:
            reader.close()


def _merge(
    jvm: _Jvm,
    opened: list[tuple[Any, Any]],
    target: Path,
    columns: Sequence[SequenceColumn | int],
    spark_schema_json: str | None,
) -> int:
    readers = [reader for _, reader in opened]
    meta = readers[0].getFooter().getFileMetaData()
    schema = meta.getSchema()
    for reader in readers[1:]:
        if not reader.getFooter().getFileMetaData().getSchema().equals(schema):
            raise EngineInternalError("Spark part files have different schemas")
    descriptors = schema.getColumns()
    width = descriptors.size()
    if schema.getFieldCount() != width:
        raise EngineInternalError("merging part files with nested columns is not supported")
    fields = jvm.array_list()
    for col in columns:
        if isinstance(col, SequenceColumn):
            fields.add(jvm.sequence_type(col))
        elif 0 <= col < width:
            fields.add(schema.getType(col))
        else:
            raise EngineInternalError(f"column index {col} out of range (parts have {width})")
    out_schema = jvm.message_type(schema.getName(), fields)
    total = sum(int(r.getRecordCount()) for r in readers)
    for col in columns:
        if isinstance(col, SequenceColumn):
            col.check(total)

    out_file = jvm.output_file.fromPath(jvm.path(target), jvm.conf)
    # Row groups keep the parts' sizes; no alignment padding between them.
    writer = jvm.writer(out_file, out_schema, jvm.create, 128 * 1024 * 1024, 0)
    writer.start()
    out_columns = out_schema.getColumns()
    row = 0
    for file, reader in opened:
        stream = file.newStream()
        try:
            # Index loops: py4j ends a Java iterator with an exception (~30 ms each).
            blocks = reader.getRowGroups()
            for b in range(blocks.size()):
                block = blocks.get(b)
                rows = int(block.getRowCount())
                chunks = block.getColumns()
                writer.startBlock(rows)
                for i, col in enumerate(columns):
                    if isinstance(col, SequenceColumn):
                        _write_sequence(jvm, writer, out_columns.get(i), col, row, rows)
                    else:
                        chunk = chunks.get(col)
                        writer.appendColumnChunk(
                            out_columns.get(i),
                            stream,
                            chunk,
                            None,
                            reader.readColumnIndex(chunk),
                            reader.readOffsetIndex(chunk),
                        )
                writer.endBlock()
                row += rows
        finally:
            stream.close()
    extra = jvm.hash_map(meta.getKeyValueMetaData())
    if spark_schema_json is not None:
        extra.put(SPARK_ROW_METADATA_KEY, spark_schema_json)
    writer.end(extra)
    return row


def _write_sequence(
    jvm: _Jvm, writer: Any, descriptor: Any, col: SequenceColumn, row: int, rows: int
) -> None:
    fmt = "<i" if col.physical == "INT32" else "<q"
    import pyarrow as pa

    # Snappy like every other column of an ODF slice (the pages are tiny either way).
    writer.startColumn(descriptor, rows, jvm.snappy)
    primitive = descriptor.getPrimitiveType()
    done = 0
    while done < rows:
        n = min(MAX_PAGE_VALUES, rows - done)
        first = col.value_at(row + done)
        last = col.value_at(row + done + n - 1)
        page = delta_sequence_page(first, col.step, n)
        stats = (
            jvm.statistics.getBuilderForReading(primitive)
            .withMin(struct.pack(fmt, min(first, last)))
            .withMax(struct.pack(fmt, max(first, last)))
            .withNumNulls(0)
            .build()
        )
        writer.writeDataPage(
            n,
            len(page),
            jvm.bytes_from(pa.compress(page, codec="snappy", asbytes=True)),
            stats,
            n,
            jvm.rle,
            jvm.rle,
            jvm.delta,
        )
        done += n
    writer.endColumn()
