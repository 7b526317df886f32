"""Per-group accumulators against Spark: partials computed by Spark, merged run after run.

Each example splits random rows into slices, asks the engine (a raw query) for the
partial accumulators of each slice (`partial_sql`), merges them with `merge_partials`
slice after slice, and compares the folded changelog with Spark's own answer to the
query over all rows: same rows, same column types. So the decomposition (counts, sums,
``avg`` as a sum and a count, min/max) gives what Spark's aggregation gives, however the
input is split.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.client import EngineClient
from engine.streaming.accumulate import parse_accumulator_query, partial_sql
from engine.streaming.accumulators import merge_partials
from fbs.model.engine import RawQueryResponseSuccess
from tests.engine.helpers import make_raw_query
from tests.engine.streaming_helpers import fold

pytestmark = pytest.mark.slow

T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
SCHEMA = pa.schema(
    [
        ("event_time", pa.timestamp("ms", tz="UTC")),
        ("k", pa.string()),
        ("v", pa.int64()),
        ("w", pa.int32()),
    ]
)
QUERIES = [
    "SELECT k, max(event_time) AS event_time, count(*) AS n, count(v) AS nv, sum(v) AS s, "
    "avg(v) AS a, min(v) AS lo, max(w) AS hi, sum(w), avg(w) FROM input GROUP BY k",
    "SELECT max(event_time) AS event_time, count(1), sum(v) AS s, avg(w) AS a, min(k) "
    "FROM input WHERE v > -20",
]
SPARK = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _rows(seed: int, n: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        {
            "event_time": T0 + dt.timedelta(minutes=rnd.choice([0, 5, 30]) * i),
            "k": rnd.choice(["a", "b", "c", None]),
            "v": rnd.choice([None, *range(-50, 50)]),
            "w": rnd.choice([None, 2**31 - 1, -(2**31), *range(-5, 5)]),
        }
        for i in range(n)
    ]


def _raw(engine: EngineClient, inputs: list[Path], sql: str, out: Path) -> pa.Table:
    result = engine.execute_raw_query(make_raw_query(inputs, sql, out))
    assert isinstance(result, RawQueryResponseSuccess), result
    return pq.read_table(out)


@pytest.mark.parametrize("sql", QUERIES)
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=3))
@SPARK
def test_spark_partials_merge_to_sparks_answer(
    engine: EngineClient, tmp_path: Path, sql: str, seed: int, cuts: list[int]
) -> None:
    q = parse_accumulator_query(sql)
    assert q is not None
    folder = tmp_path / uuid.uuid4().hex[:12]
    folder.mkdir()
    rows = _rows(seed, 30)
    points = [*sorted(cuts), len(rows)]
    files, start = [], 0
    for i, p in enumerate(points):
        path = folder / f"slice-{i}.parquet"
        pq.write_table(pa.Table.from_pylist(rows[start:p], schema=SCHEMA), path)
        files.append(path)
        start = max(start, p)
    answer = _raw(engine, files, sql, folder / "answer.parquet")
    state: pa.Table | None = None
    outputs = []
    for i, path in enumerate(files):
        partial = _raw(engine, [path], partial_sql(q), folder / f"partial-{i}.parquet")
        run = merge_partials(q, state, partial, answer.column_names, "event_time", None)
        state = run.state
        outputs.append(run.changes)
    expected = collections.Counter(tuple(r.values()) for r in answer.to_pylist())
    assert fold(outputs) == expected
    data = [f for f in outputs[-1].schema if f.name != "op"]
    assert [(f.name, f.type) for f in data] == [(f.name, f.type) for f in answer.schema]
