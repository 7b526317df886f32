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
    "query",
    [
        "SELECT event_time, city, population * 2 AS p FROM input WHERE population % 3 <> 0",
        "SELECT op, event_time, named_struct('c', city, 'p', population) AS s, "
        "array(population) AS arr FROM input",
        "SELECT max(event_time) AS event_time, city, count(*) AS n FROM input GROUP BY city",
    ],
    ids=["narrow", "nested-with-op", "wide"],
)
def test_datafusion_reads_engine_output(engine: EngineClient, tmp_path: Path, query: str) -> None:
    paths, _ = _write_files(tmp_path / "in", "x", ops=True)
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
