"""Engine outputs read by arrow-rs (through DataFusion), the Parquet reader kamu uses.

The merged output files carry synthesized DELTA_BINARY_PACKED columns and a footer
written by `engine.parquet_merge`; kamu must read them exactly as pyarrow does.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from fbs.model.engine import TransformResponseSuccess
from tests.engine.helpers import make_request
from tests.engine.test_parallel import FILE_ROWS, _input, _write_files

datafusion = pytest.importorskip("datafusion")


@pytest.mark.parametrize(
    ("query", "ops"),
    [
        (
            "SELECT event_time, city, population * 2 AS p FROM input WHERE population % 3 <> 0",
            True,
        ),
        (
            "SELECT op, event_time, named_struct('c', city, 'p', population) AS s, "
            "array(population) AS arr FROM input",
            True,
        ),
        # An aggregate's input must be a well-formed changelog (the synthetic ops take back
        # rows never added, which accumulator state refuses), so this one only appends.
        (
            "SELECT max(event_time) AS event_time, city, count(*) AS n FROM input GROUP BY city",
            False,
        ),
    ],
    ids=["narrow", "nested-with-op", "wide"],
)
def test_datafusion_reads_engine_output(
    engine: EngineClient, tmp_path: Path, query: str, ops: bool
) -> None:
    paths, _ = _write_files(tmp_path / "in", "x", ops=ops)
    inp = _input(tmp_path / "in", "x", paths, (3, sum(FILE_ROWS) - 4))
    res = engine.execute_transform(make_request(tmp_path / "out", [inp], query=query))
    assert isinstance(res, TransformResponseSuccess), res
    path = tmp_path / "out" / "data"
    expected = pq.read_table(path)
    assert expected.num_rows > 0

    ctx = datafusion.SessionContext()
    ctx.register_parquet("out", str(path), file_extension="")
    got = ctx.sql("SELECT * FROM out").to_arrow_table()
    assert got.schema.names == expected.schema.names
    assert got.schema.field("offset").type == expected.schema.field("offset").type
    assert got.schema.field("system_time").type == expected.schema.field("system_time").type
    assert got.to_pylist() == expected.to_pylist()  # same rows, same order
    stats = ctx.sql('SELECT min("offset") AS lo, max("offset") AS hi, count(*) AS n FROM out')
    row = stats.to_arrow_table().to_pylist()[0]
    assert row == {"lo": 0, "hi": expected.num_rows - 1, "n": expected.num_rows}


def test_datafusion_reads_ingest_slices(tmp_path: Path) -> None:
    """Ingest slices (DELTA_BINARY_PACKED offsets, dictionary pages, gathered row groups)
    read by arrow-rs exactly as pyarrow reads them, with the same logical hash."""
    import pyarrow as pa

    from fbs.model import Timestamp
    from node.ingest.writer import SliceWriter
    from storage.hashing import logical_hash_parquet

    n = 70_000
    data = pa.table(
        {
            "event_time": pa.array([i * 1000 for i in range(n)], pa.timestamp("ms", "UTC")),
            "city": [f"c{i % 13}" for i in range(n)],
            "population": pa.array(range(n), pa.int64()),
            "s": pa.array([{"a": i % 3, "b": None if i % 5 else "x"} for i in range(n)]),
        }
    )
    path = tmp_path / "slice.parquet"
    writer = SliceWriter(
        path,
        data.schema,
        start_offset=5,
        system_time=Timestamp.parse_rfc3339("2024-05-01T10:00:00Z"),
    )
    for batch in data.to_batches(max_chunksize=9_999):
        writer.write(batch)
    written = writer.close()
    expected = pq.read_table(path)
    ctx = datafusion.SessionContext()
    ctx.register_parquet("s", str(path))
    got = ctx.sql('SELECT * FROM s ORDER BY "offset"').to_arrow_table()
    assert got.schema.names == expected.schema.names
    assert got.to_pylist() == expected.to_pylist()
    assert written.logical_hash == logical_hash_parquet(str(path))
