"""A window-mode output written from collected Arrow batches is the file Spark's writer
writes: same Parquet schema, footer keys, rows and logical hash (`engine.collected_output`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from engine.client import EngineClient
from engine.collected_output import (
    MAX_COLLECTED_OUTPUT_BYTES,
    SPARK_VERSION_KEY,
    _conform,
    collectable,
)
from storage.hashing import logical_hash_parquet
from tests.engine.streaming_helpers import InputStream, StreamRunner

UTC = dt.UTC
TS = pa.timestamp("ms", tz="UTC")
T0 = dt.datetime(2020, 1, 1, tzinfo=UTC)
EVENTS = pa.schema([("event_time", TS), ("k", pa.string()), ("v", pa.int64()), ("d", pa.float64())])
FAR_MS = int(dt.datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 1000)
AGGREGATES = (
    "count(*) AS n, sum(v) AS s, min(d) AS dmin, max(to_date(event_time)) AS day, "
    "max(CAST(v % 100 AS TINYINT)) AS b, max(CAST(v % 100 AS SMALLINT)) AS sh, "
    "max(CAST(k AS BINARY)) AS bin, bool_or(v > 500) AS big, max(CAST(d AS FLOAT)) AS f"
)
#: Window mode: written from collected batches.
WINDOW = (
    "SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, k, "
    + AGGREGATES
    + " FROM ev GROUP BY TUMBLE(event_time, INTERVAL '1' HOUR), k"
)
#: The same rows in changelog mode (no group window): written by Spark's writer.
CHANGELOG = (
    "SELECT date_trunc('HOUR', event_time) AS event_time, k, "
    + AGGREGATES
    + " FROM ev GROUP BY date_trunc('HOUR', event_time), k"
)


def _rows() -> list[dict[str, object]]:
    return [
        {
            "event_time": T0 + dt.timedelta(minutes=7 * i),
            "k": None if i % 11 == 0 else "abc"[i % 3],
            "v": i * 37 % 1000,
            "d": i / 8,
        }
        for i in range(200)
    ]


def _output(engine: EngineClient, tmp: Path, query: str) -> Path:
    stream = InputStream("ev", EVENTS, tmp / "in")
    stream.append(_rows(), watermark_ms=FAR_MS)
    runner = StreamRunner(engine, [stream], [(None, query)], tmp / "out")
    runner.run()
    return tmp / "out" / "run-0" / "data"


def test_collected_output_is_what_spark_writes(engine: EngineClient, tmp_path: Path) -> None:
    collected = _output(engine, tmp_path / "window", WINDOW)
    spark = _output(engine, tmp_path / "changelog", CHANGELOG)
    a, b = pq.ParquetFile(collected), pq.ParquetFile(spark)
    # Each file came from the writer this test means to compare.
    assert a.metadata.created_by.startswith("parquet-cpp")
    assert b.metadata.created_by.startswith("parquet-mr")
    assert a.schema.to_arrow_schema() == b.schema.to_arrow_schema()
    assert a.schema.equals(b.schema)  # names, physical and logical types, repetition, root
    keys_a, keys_b = a.metadata.metadata, b.metadata.metadata
    assert keys_a.keys() == keys_b.keys()
    assert keys_a[SPARK_VERSION_KEY.encode()] == keys_b[SPARK_VERSION_KEY.encode()]
    ta, tb = pq.read_table(collected), pq.read_table(spark)
    assert ta.num_rows > 20
    order = [("event_time", "ascending"), ("k", "ascending")]
    data = [c for c in ta.column_names if c not in ("offset", "op", "system_time")]
    assert ta.select(data).sort_by(order).equals(tb.select(data).sort_by(order))
    # Same rows in the same order give the same logical hash.
    for path, table in ((collected, ta), (spark, tb)):
        pq.write_table(table.sort_by(order), path.with_suffix(".sorted"))
    assert logical_hash_parquet(str(collected.with_suffix(".sorted"))) == logical_hash_parquet(
        str(spark.with_suffix(".sorted"))
    )


def _schema(*types: object, nullable: bool = True) -> StructType:
    return StructType([StructField(f"c{i}", t, nullable) for i, t in enumerate(types)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schema", "rows", "expected"),
    [
        (_schema(TimestampType(), StringType(), LongType()), 10, True),
        (_schema(TimestampType(), StringType(), LongType()), None, False),
        (_schema(TimestampType(), ArrayType(IntegerType())), 10, False),
        (_schema(TimestampType(), DecimalType(10, 2)), 10, False),
        (_schema(TimestampNTZType(), LongType()), 10, False),
        (StructType([StructField("a", LongType()), StructField("A", LongType())]), 10, False),
    ],
    ids=["flat", "no-bound", "nested", "decimal", "ntz", "duplicate-names"],
)
def test_collectable(schema: StructType, rows: int | None, expected: bool) -> None:
    assert collectable(schema, rows) is expected


def test_collectable_size_bound() -> None:
    schema = _schema(LongType(), IntegerType())  # Spark's estimate: 8 + 4 bytes a row
    assert collectable(schema, MAX_COLLECTED_OUTPUT_BYTES // 12)
    assert not collectable(schema, MAX_COLLECTED_OUTPUT_BYTES // 12 + 1)


def test_timestamps_are_floored_to_milliseconds() -> None:
    """Spark's TIMESTAMP_MILLIS writer floors (floorDiv): -1 µs is -1 ms, not 0."""
    micros = [-1_500, -1_001, -1_000, -1, 0, 999, 1_001, None]
    batch = pa.record_batch([pa.array(micros, pa.timestamp("us", tz="UTC"))], names=["t"])
    out = _conform(batch, pa.schema([pa.field("t", TS)]))
    assert out.schema.field("t").type == TS
    got = out.column(0).cast(pa.int64()).to_pylist()
    assert got == [-2, -2, -1, -1, 0, 0, 1, None]
