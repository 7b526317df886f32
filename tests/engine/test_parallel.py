"""Transforms whose inputs are split across partitions and whose parts are merged.

The shared test engine reads every input in parallel (``spark.odf.engine.parallelMinBytes``
= 0) and splits files every 64 KiB (``spark.sql.files.maxPartitionBytes``), see
tests/conftest.py. The inputs here have many row groups per file, so a file spans
several partitions; the outputs must still be exactly the single-partition result:
rows in offset order, offsets contiguous from ``next_offset``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from fbs.model.engine import (
    RawQueryResponseSuccess,
    TransformRequestInput,
    TransformResponseSuccess,
)
from fbs.model.events import OffsetInterval
from tests.engine.helpers import (
    BASE_MS,
    SYSTEM_TIME,
    TS_MS_UTC,
    make_input,
    make_raw_query,
    make_request,
    write_schema,
)

#: Rows per input file: a big one, a tiny one, a medium one (order by size != order).
FILE_ROWS = (3000, 10, 2500)
ROW_GROUP = 400


def _write_files(folder: Path, name: str, ops: bool = False) -> tuple[list[Path], pa.Table]:
    """ODF slices with many row groups and incompressible padding; returns all rows."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, tables = [], []
    start = 0
    for i, n in enumerate(FILE_ROWS):
        offsets = list(range(start, start + n))
        table = pa.table(
            {
                "offset": pa.array(offsets, pa.int64()),
                "op": pa.array([(o % 7 == 3) * 1 if ops else 0 for o in offsets], pa.int32()),
                "system_time": pa.array([BASE_MS] * n, TS_MS_UTC),
                "event_time": pa.array([BASE_MS + o * 1000 for o in offsets], TS_MS_UTC),
                "city": pa.array([f"city{o % 13}" for o in offsets]),
                "population": pa.array([o * 10 for o in offsets], pa.int64()),
                "pad": pa.array([os.urandom(24).hex() for _ in offsets]),
            }
        )
        path = folder / f"{name}-{i}.parquet"
        pq.write_table(table, path, row_group_size=ROW_GROUP)
        paths.append(path)
        tables.append(table)
        start += n
    write_schema(folder / f"{name}-schema", tables[0])
    return paths, pa.concat_tables(tables)


def _input(
    folder: Path, name: str, paths: list[Path], interval: tuple[int, int], alias: str = "input"
) -> TransformRequestInput:
    """A request input over slices written by `_write_files` into ``folder``."""
    return make_input(
        seed=f"{folder.name}/{name}/{alias}".encode(),
        alias=alias,
        paths=paths,
        schema_file=folder / f"{name}-schema",
        interval=interval,
    )


def _ok(result: object) -> TransformResponseSuccess:
    assert isinstance(result, TransformResponseSuccess), result
    return result


def _in_interval(table: pa.Table, lo: int, hi: int) -> pa.Table:
    off = table.column("offset")
    return table.filter(pc.and_(pc.greater_equal(off, lo), pc.less_equal(off, hi)))


def _check_system_columns(out: pa.Table, next_offset: int) -> None:
    n = out.num_rows
    assert out.column_names[:3] == ["offset", "op", "system_time"]
    assert out.column("offset").to_pylist() == list(range(next_offset, next_offset + n))
    assert (
        out.column("system_time").cast(pa.int64()).to_pylist()
        == [SYSTEM_TIME.nanos // 1_000_000] * n
    )
    assert out.schema.field("offset").type == pa.int64()
    assert out.schema.field("op").type == pa.int32()
    assert out.schema.field("system_time").type == TS_MS_UTC


def test_narrow_query_over_split_files(engine: EngineClient, tmp_path: Path) -> None:
    paths, rows = _write_files(tmp_path / "in", "a")
    assert pq.ParquetFile(paths[0]).metadata.num_row_groups > 1  # a file spans partitions
    lo, hi = 150, sum(FILE_ROWS) - 200  # partial first and last slices
    inp = _input(tmp_path / "in", "a", paths, (lo, hi))
    query = "SELECT event_time, city, population * 2 AS p FROM input WHERE population % 3 <> 0"
    req = make_request(tmp_path / "out", [inp], query=query, next_offset=1000)
    res = _ok(engine.execute_transform(req))

    expected = [r for r in _in_interval(rows, lo, hi).to_pylist() if r["population"] % 3 != 0]
    out = pq.read_table(tmp_path / "out" / "data")
    _check_system_columns(out, 1000)
    assert out.column("op").to_pylist() == [0] * out.num_rows
    assert out.column("city").to_pylist() == [r["city"] for r in expected]
    assert out.column("p").to_pylist() == [r["population"] * 2 for r in expected]
    assert out.column("event_time").to_pylist() == [r["event_time"] for r in expected]
    assert res.new_offset_interval == OffsetInterval(start=1000, end=1000 + out.num_rows - 1)

    meta = pq.ParquetFile(tmp_path / "out" / "data").metadata
    # Several partitions were written and merged (one task would write one row group).
    assert meta.num_row_groups > 1
    seen = 1000
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(0).statistics
        if group.num_rows:
            assert (stats.min, stats.max) == (seen, seen + group.num_rows - 1)
        seen += group.num_rows
        assert all(group.column(c).compression == "SNAPPY" for c in range(group.num_columns))
    assert seen == 1000 + out.num_rows

    # Spark itself reads the merged file back (DELTA_BINARY_PACKED offsets).
    raw = make_raw_query(
        [tmp_path / "out" / "data"],
        "SELECT count(*) AS n, sum(offset) AS s, min(op) AS o, max(system_time) AS t FROM input",
        tmp_path / "raw",
    )
    assert isinstance(engine.execute_raw_query(raw), RawQueryResponseSuccess)
    back = pq.read_table(tmp_path / "raw").to_pylist()[0]
    n = out.num_rows
    assert back["n"] == n
    assert back["s"] == sum(range(1000, 1000 + n))
    assert back["o"] == 0
    assert back["t"].timestamp() * 1000 == SYSTEM_TIME.nanos // 1_000_000


def test_wide_query_keeps_single_partition_order(engine: EngineClient, tmp_path: Path) -> None:
    # A window over the whole input: read as one partition (kamu's semantics), output in
    # the window's order, still written in parallel after the shuffle.
    paths, rows = _write_files(tmp_path / "in", "w")
    inp = _input(tmp_path / "in", "w", paths, (0, sum(FILE_ROWS) - 1))
    query = (
        "SELECT event_time, population, "
        "sum(population) OVER (ORDER BY offset ROWS UNBOUNDED PRECEDING) AS running "
        "FROM input"
    )
    _ok(engine.execute_transform(make_request(tmp_path / "out", [inp], query=query)))
    out = pq.read_table(tmp_path / "out" / "data")
    _check_system_columns(out, 0)
    pops = rows.column("population").to_pylist()
    assert out.column("population").to_pylist() == pops
    running, acc = [], 0
    for v in pops:
        acc += v
        running.append(acc)
    assert out.column("running").to_pylist() == running

    # An aggregation: same groups, and the same bytes when run again.
    agg = "SELECT max(event_time) AS event_time, city, count(*) AS n FROM input GROUP BY city"
    first = _ok(engine.execute_transform(make_request(tmp_path / "g1", [inp], query=agg)))
    second = _ok(engine.execute_transform(make_request(tmp_path / "g2", [inp], query=agg)))
    assert first == second
    g1 = pq.read_table(tmp_path / "g1" / "data")
    assert g1.equals(pq.read_table(tmp_path / "g2" / "data"))
    assert sorted(zip(g1["city"].to_pylist(), g1["n"].to_pylist(), strict=True)) == sorted(
        (c, rows.column("city").to_pylist().count(c)) for c in set(rows["city"].to_pylist())
    )


def test_union_and_generate_across_split_inputs(engine: EngineClient, tmp_path: Path) -> None:
    a_paths, a_rows = _write_files(tmp_path / "a", "a")
    b_paths, b_rows = _write_files(tmp_path / "b", "b")
    total = sum(FILE_ROWS)
    a = _input(tmp_path / "a", "a", a_paths, (5, total - 1), alias="a")
    b = _input(tmp_path / "b", "b", b_paths, (0, 99), alias="b")
    query = (
        "SELECT event_time, v FROM (SELECT event_time, explode(array(population, -population)) "
        "AS v FROM a) UNION ALL SELECT event_time, population AS v FROM b"
    )
    _ok(engine.execute_transform(make_request(tmp_path / "out", [a, b], query=query)))
    out = pq.read_table(tmp_path / "out" / "data")
    _check_system_columns(out, 0)
    expected = []
    for v in _in_interval(a_rows, 5, total - 1)["population"].to_pylist():
        expected += [v, -v]
    expected += _in_interval(b_rows, 0, 99)["population"].to_pylist()
    assert out.column("v").to_pylist() == expected


@pytest.mark.parametrize("op_name", ["op", "OP"])
def test_query_op_column_is_copied(engine: EngineClient, tmp_path: Path, op_name: str) -> None:
    paths, rows = _write_files(tmp_path / "in", "o", ops=True)
    inp = _input(tmp_path / "in", "o", paths, (0, sum(FILE_ROWS) - 1))
    query = f"SELECT city, op AS {op_name}, event_time FROM input WHERE population % 4 = 0"
    _ok(engine.execute_transform(make_request(tmp_path / "out", [inp], query=query, next_offset=7)))
    out = pq.read_table(tmp_path / "out" / "data")
    _check_system_columns(out, 7)
    assert out.column_names == ["offset", "op", "system_time", "city", "event_time"]
    kept = [r for r in rows.to_pylist() if r["population"] % 4 == 0]
    assert out.column("op").to_pylist() == [r["op"] for r in kept]
    assert 1 in out.column("op").to_pylist()
    assert out.column("city").to_pylist() == [r["city"] for r in kept]


def test_empty_output_has_the_full_schema(engine: EngineClient, tmp_path: Path) -> None:
    paths, _ = _write_files(tmp_path / "in", "e")
    inp = _input(tmp_path / "in", "e", paths, (0, sum(FILE_ROWS) - 1))
    query = "SELECT event_time, city FROM input WHERE population < 0"
    res = _ok(engine.execute_transform(make_request(tmp_path / "out", [inp], query=query)))
    assert res.new_offset_interval is None
    out = pq.read_table(tmp_path / "out" / "data")
    assert out.num_rows == 0
    assert out.column_names == ["offset", "op", "system_time", "event_time", "city"]


def test_slices_outside_the_interval_are_not_read(engine: EngineClient, tmp_path: Path) -> None:
    # The footer statistics of the last slice put it after the interval, so it is not
    # read at all: here it could not be (its population column is a string).
    paths, rows = _write_files(tmp_path / "in", "s")
    last = pq.read_table(paths[-1])
    index = last.schema.get_field_index("population")
    pq.write_table(
        last.set_column(index, "population", pc.cast(last["population"], pa.string())),
        paths[-1],
    )
    inp = _input(tmp_path / "in", "s", paths, (0, FILE_ROWS[0] + FILE_ROWS[1] - 1))
    query = "SELECT event_time, population FROM input"
    _ok(engine.execute_transform(make_request(tmp_path / "out", [inp], query=query)))
    out = pq.read_table(tmp_path / "out" / "data")
    n = FILE_ROWS[0] + FILE_ROWS[1]
    assert out.column("population").to_pylist() == rows["population"].to_pylist()[:n]


def test_nested_columns_are_merged(engine: EngineClient, tmp_path: Path) -> None:
    paths, rows = _write_files(tmp_path / "in", "n")
    inp = _input(tmp_path / "in", "n", paths, (0, sum(FILE_ROWS) - 1))
    query = (
        "SELECT event_time, named_struct('c', city, 'p', population) AS s, "
        "array(population, population + 1) AS arr, city FROM input"
    )
    _ok(engine.execute_transform(make_request(tmp_path / "out", [inp], query=query)))
    out = pq.read_table(tmp_path / "out" / "data")
    _check_system_columns(out, 0)
    pops = rows["population"].to_pylist()
    cities = rows["city"].to_pylist()
    assert out["s"].to_pylist() == [{"c": c, "p": p} for c, p in zip(cities, pops, strict=True)]
    assert out["arr"].to_pylist() == [[p, p + 1] for p in pops]
    assert out["city"].to_pylist() == cities
    raw = make_raw_query(
        [tmp_path / "out" / "data"],
        "SELECT sum(s.p) AS sp, sum(arr[1]) AS a1, max(offset) AS mo FROM input",
        tmp_path / "raw",
    )
    assert isinstance(engine.execute_raw_query(raw), RawQueryResponseSuccess)
    back = pq.read_table(tmp_path / "raw").to_pylist()[0]
    assert back == {"sp": sum(pops), "a1": sum(pops) + len(pops), "mo": len(pops) - 1}
