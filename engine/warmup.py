"""Warm the JVM up with a tiny transform, so the first real request is fast.

A cold session needs ~3 s (and ~10 s on a busy 2-core machine) for its first Parquet
read/write while classes load and the JIT compiles; a warm transform takes well under a
second. The engine runs this once before it starts listening.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from fbs.did import DatasetId
from fbs.errors import OdfError
from fbs.model.engine import TransformRequest, TransformRequestInput, TransformResponseSuccess
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import TransformSql
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["warm_up"]

log = logging.getLogger("odf.engine")

_ROWS = 8


def warm_up(session: SparkSession) -> bool:
    """Run one small map/filter transform in a temp folder; True if it succeeded.

    Failures are logged, not raised: a failed warm-up only costs the first request time.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.s3io.settings import staging_of
    from engine.s3io.warmup import through_staging
    from engine.transform import execute_transform

    with tempfile.TemporaryDirectory(prefix="odf-engine-warmup-") as tmp:
        root = Path(tmp)
        ts = pa.timestamp("ms", tz="UTC")
        table = pa.table(
            {
                "offset": pa.array(range(_ROWS), pa.int64()),
                "op": pa.array([0] * _ROWS, pa.int32()),
                "system_time": pa.array([0] * _ROWS, ts),
                "event_time": pa.array([i * 1000 for i in range(_ROWS)], ts),
                "value": pa.array(range(_ROWS), pa.int64()),
            }
        )
        pq.write_table(table, root / "data.parquet")
        pq.write_table(table.slice(0, 0), root / "schema.parquet")
        request = TransformRequest(
            dataset_id=DatasetId.new_seeded(b"odf-engine-warmup-out"),
            dataset_alias="warmup-out",
            system_time=Timestamp(0),
            vocab=DatasetVocabulary(),
            transform=TransformSql(
                engine="spark", query="SELECT event_time, value * 2 AS v FROM input WHERE value > 1"
            ),
            query_inputs=(
                TransformRequestInput(
                    dataset_id=DatasetId.new_seeded(b"odf-engine-warmup-in"),
                    dataset_alias="warmup-in",
                    query_alias="input",
                    vocab=DatasetVocabulary(),
                    offset_interval=OffsetInterval(start=0, end=_ROWS - 1),
                    data_paths=(str(root / "data.parquet"),),
                    schema_file=str(root / "schema.parquet"),
                    explicit_watermarks=(),
                ),
            ),
            next_offset=0,
            new_checkpoint_path=str(root / "out" / "checkpoint"),
            new_data_path=str(root / "out" / "data"),
        )
        staging = staging_of(session)
        if staging is None:
            result = execute_transform(session, request)
        else:
            try:
                with through_staging(request, staging) as on_s3:
                    result = execute_transform(session, on_s3)
            except OdfError as e:  # the store: unreachable, refusing the credentials ...
                log.warning("engine warm-up failed: %s", e)
                return False
    if not isinstance(result, TransformResponseSuccess):
        log.warning("engine warm-up failed: %s", result)
        return False
    return True
