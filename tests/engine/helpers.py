"""Builders of engine requests and input Parquet files for the engine tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fbs.did import DatasetId
from fbs.model.engine import RawQueryRequest, TransformRequest, TransformRequestInput, Watermark
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import SqlQueryStep, TransformSql
from fbs.timestamp import Timestamp

TS_MS_UTC = pa.timestamp("ms", tz="UTC")
#: 2020-01-01T00:00:00Z in milliseconds.
BASE_MS = 1_577_836_800_000
SYSTEM_TIME = Timestamp.from_ymd_hms(2024, 5, 6, 7, 8, 9, 123_456_789)
OUT_ID = DatasetId.new_seeded(b"engine-test-output")


def ts(ms: int) -> Timestamp:
    """A Timestamp from epoch milliseconds."""
    return Timestamp(ms * 1_000_000)


def write_input(
    path: Path,
    *,
    start_offset: int,
    cities: Sequence[str],
    populations: Sequence[int],
    ops: Sequence[int] | None = None,
    event_ms: Sequence[int] | None = None,
) -> pa.Table:
    """Write an ODF-shaped Parquet file (offset, op, system_time, event_time, data)."""
    n = len(cities)
    table = pa.table(
        {
            "offset": pa.array(range(start_offset, start_offset + n), pa.int64()),
            "op": pa.array(ops if ops is not None else [0] * n, pa.int32()),
            "system_time": pa.array([BASE_MS] * n, TS_MS_UTC),
            "event_time": pa.array(
                event_ms if event_ms is not None else [BASE_MS + i * 1000 for i in range(n)],
                TS_MS_UTC,
            ),
            "city": pa.array(list(cities), pa.string()),
            "population": pa.array(list(populations), pa.int64()),
        }
    )
    pq.write_table(table, path)
    return table


def write_schema(path: Path, like: pa.Table) -> None:
    """An empty Parquet file with ``like``'s schema (kamu's ``schema_file``)."""
    pq.write_table(like.slice(0, 0), path)


def make_input(
    *,
    seed: bytes,
    alias: str,
    paths: Sequence[Path],
    schema_file: Path,
    interval: tuple[int, int] | None,
    watermarks_ms: Sequence[int] = (),
) -> TransformRequestInput:
    """A request input over ``paths`` restricted to ``interval``."""
    return TransformRequestInput(
        dataset_id=DatasetId.new_seeded(seed),
        dataset_alias=alias,
        query_alias=alias,
        vocab=DatasetVocabulary(),
        offset_interval=None
        if interval is None
        else OffsetInterval(start=interval[0], end=interval[1]),
        data_paths=tuple(str(p) for p in paths),
        schema_file=str(schema_file),
        explicit_watermarks=tuple(
            Watermark(system_time=ts(BASE_MS + i), event_time=ts(ms))
            for i, ms in enumerate(watermarks_ms)
        ),
    )


def make_request(
    out: Path,
    inputs: Sequence[TransformRequestInput],
    *,
    query: str | None = None,
    steps: Sequence[tuple[str | None, str]] | None = None,
    next_offset: int = 0,
    prev_checkpoint: Path | None = None,
    engine: str = "spark",
) -> TransformRequest:
    """A transform request writing ``out/data`` and ``out/checkpoint``."""
    transform = TransformSql(
        engine=engine,
        query=query,
        queries=None if steps is None else tuple(SqlQueryStep(alias=a, query=q) for a, q in steps),
    )
    return TransformRequest(
        dataset_id=OUT_ID,
        dataset_alias="out",
        system_time=SYSTEM_TIME,
        vocab=DatasetVocabulary(),
        transform=transform,
        query_inputs=tuple(inputs),
        next_offset=next_offset,
        prev_checkpoint_path=None if prev_checkpoint is None else str(prev_checkpoint),
        new_checkpoint_path=str(out / "checkpoint"),
        new_data_path=str(out / "data"),
    )


def make_raw_query(inputs: Sequence[Path], query: str, output: Path) -> RawQueryRequest:
    """A raw query over ``inputs`` (view ``input``) writing ``output``."""
    return RawQueryRequest(
        input_data_paths=tuple(str(p) for p in inputs),
        transform=TransformSql(engine="spark", query=query),
        output_data_path=str(output),
    )
