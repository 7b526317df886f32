"""Transforms and raw queries through the real engine (PySpark) over loopback gRPC."""

from __future__ import annotations

from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.checkpoint import read_watermarks
from engine.client import EngineClient, raise_for_result
from engine.errors import InvalidQuery
from engine.process import EngineProcess
from engine.proto import engine_pb2 as pb
from engine.proto import engine_pb2_grpc as pb_grpc
from fbs.codec import decode_table
from fbs.did import DatasetId
from fbs.model.engine import (
    RawQueryResponseInvalidQuery,
    RawQueryResponseSuccess,
    TransformResponseInternalError,
    TransformResponseInvalidQuery,
    TransformResponseProgress,
    TransformResponseRoot,
    TransformResponseSuccess,
)
from fbs.model.events import DatasetVocabulary, OffsetInterval
from tests.engine.helpers import (
    BASE_MS,
    SYSTEM_TIME,
    TS_MS_UTC,
    make_input,
    make_raw_query,
    make_request,
    ts,
    write_input,
    write_schema,
)

CITIES = ["a", "b", "c", "d", "e", "f"]
POPS = [10, 20, 30, 40, 50, 60]


@pytest.fixture()
def city_input(tmp_path: Path) -> tuple[Path, Path]:
    """One input file with offsets 0..5 and its schema file."""
    data = tmp_path / "in-cities"
    table = write_input(data, start_offset=0, cities=CITIES, populations=POPS)
    schema = tmp_path / "schema-cities"
    write_schema(schema, table)
    return data, schema


def _success(result: object) -> TransformResponseSuccess:
    assert isinstance(result, TransformResponseSuccess), result
    return result


def test_map_filter_output_shape(
    engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path]
) -> None:
    data, schema = city_input
    inp = make_input(
        seed=b"cities",
        alias="cities",
        paths=[data],
        schema_file=schema,
        interval=(0, 5),
        watermarks_ms=[BASE_MS + 500, BASE_MS + 2000],
    )
    req = make_request(
        tmp_path / "out",
        [inp],
        query="SELECT event_time, city, population * 10 AS pop10 FROM cities WHERE population > 25",
        next_offset=100,
    )
    res = _success(engine.execute_transform(req))
    assert res.new_offset_interval == OffsetInterval(start=100, end=103)
    assert res.new_watermark == ts(BASE_MS + 2000)

    out = pq.read_table(tmp_path / "out" / "data")
    assert out.column_names == ["offset", "op", "system_time", "event_time", "city", "pop10"]
    assert out.schema.field("offset").type == pa.int64()
    assert out.schema.field("op").type == pa.int32()
    assert out.schema.field("system_time").type == TS_MS_UTC
    assert out.schema.field("system_time").type.tz == "UTC"
    assert out.schema.field("event_time").type == TS_MS_UTC
    rows = out.to_pylist()
    assert [r["offset"] for r in rows] == [100, 101, 102, 103]
    assert [r["op"] for r in rows] == [0, 0, 0, 0]
    assert [r["city"] for r in rows] == ["c", "d", "e", "f"]
    assert [r["pop10"] for r in rows] == [300, 400, 500, 600]
    # system_time is the request's time truncated to milliseconds.
    sys_ms = out.column("system_time").cast(pa.int64()).to_pylist()
    assert sys_ms == [SYSTEM_TIME.nanos // 1_000_000] * 4
    # Single Parquet file, snappy.
    meta = pq.ParquetFile(tmp_path / "out" / "data").metadata
    assert meta.row_group(0).column(0).compression == "SNAPPY"
    assert (tmp_path / "out" / "data").is_file()


def test_multi_step_queries(
    engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path]
) -> None:
    data, schema = city_input
    inp = make_input(
        seed=b"cities", alias="cities", paths=[data], schema_file=schema, interval=(0, 5)
    )
    req = make_request(
        tmp_path / "out",
        [inp],
        steps=[
            ("big", "SELECT event_time, city, population FROM cities WHERE population >= 30"),
            ("bigger", "SELECT event_time, city, population * 2 AS p FROM big"),
            (None, "SELECT event_time, upper(city) AS city, p FROM bigger WHERE p < 110"),
        ],
    )
    res = _success(engine.execute_transform(req))
    assert res.new_offset_interval == OffsetInterval(start=0, end=2)
    assert res.new_watermark is None  # no explicit watermark and no checkpoint
    rows = pq.read_table(tmp_path / "out" / "data").to_pylist()
    assert [(r["offset"], r["city"], r["p"]) for r in rows] == [
        (0, "C", 60),
        (1, "D", 80),
        (2, "E", 100),
    ]


def test_union_of_two_inputs_and_offset_interval(engine: EngineClient, tmp_path: Path) -> None:
    ta = write_input(
        tmp_path / "a1", start_offset=0, cities=["a0", "a1", "a2"], populations=[1, 2, 3]
    )
    write_input(tmp_path / "a2", start_offset=3, cities=["a3", "a4"], populations=[4, 5])
    tb = write_input(
        tmp_path / "b1", start_offset=0, cities=["b0", "b1", "b2"], populations=[7, 8, 9]
    )
    write_schema(tmp_path / "sa", ta)
    write_schema(tmp_path / "sb", tb)
    # Only offsets 2..4 of A (spanning both files) and 1..2 of B are new.
    a = make_input(
        seed=b"A",
        alias="left.in",
        paths=[tmp_path / "a1", tmp_path / "a2"],
        schema_file=tmp_path / "sa",
        interval=(2, 4),
        watermarks_ms=[BASE_MS + 9000],
    )
    b = make_input(
        seed=b"B",
        alias="right",
        paths=[tmp_path / "b1"],
        schema_file=tmp_path / "sb",
        interval=(1, 2),
        watermarks_ms=[BASE_MS + 3000],
    )
    req = make_request(
        tmp_path / "out",
        [a, b],
        query=(
            "SELECT event_time, city FROM `left.in` UNION ALL SELECT event_time, city FROM `right`"
        ),
        next_offset=7,
    )
    res = _success(engine.execute_transform(req))
    assert res.new_offset_interval == OffsetInterval(start=7, end=11)
    assert res.new_watermark == ts(BASE_MS + 3000)  # min over inputs
    rows = pq.read_table(tmp_path / "out" / "data").to_pylist()
    assert [r["offset"] for r in rows] == [7, 8, 9, 10, 11]
    # Each input is ordered by offset; the union keeps the inputs' order.
    assert [r["city"] for r in rows] == ["a2", "a3", "a4", "b1", "b2"]


def test_empty_interval_input(
    engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path]
) -> None:
    data, schema = city_input
    inp = make_input(
        seed=b"cities", alias="cities", paths=[data], schema_file=schema, interval=None
    )
    req = make_request(
        tmp_path / "out", [inp], query="SELECT event_time, city FROM cities", next_offset=6
    )
    res = _success(engine.execute_transform(req))
    assert res.new_offset_interval is None
    out = pq.read_table(tmp_path / "out" / "data")  # written for its schema only
    assert out.num_rows == 0
    assert out.column_names == ["offset", "op", "system_time", "event_time", "city"]

    no_files = make_input(
        seed=b"cities", alias="cities", paths=[], schema_file=schema, interval=(0, 5)
    )
    req2 = make_request(tmp_path / "out2", [no_files], query="SELECT event_time, city FROM cities")
    res2 = _success(engine.execute_transform(req2))
    assert res2.new_offset_interval is None
    assert pq.read_table(tmp_path / "out2" / "data").num_rows == 0


def test_retractions_pass_through(engine: EngineClient, tmp_path: Path) -> None:
    t = write_input(
        tmp_path / "in",
        start_offset=0,
        cities=["x", "x", "y", "y"],
        populations=[1, 1, 2, 3],
        ops=[0, 1, 2, 3],
    )
    write_schema(tmp_path / "s", t)
    inp = make_input(
        seed=b"R", alias="src", paths=[tmp_path / "in"], schema_file=tmp_path / "s", interval=(0, 3)
    )
    req = make_request(
        tmp_path / "out", [inp], query="SELECT op, event_time, city, population FROM src"
    )
    _success(engine.execute_transform(req))
    out = pq.read_table(tmp_path / "out" / "data")
    assert out.column_names[:3] == ["offset", "op", "system_time"]
    assert out.schema.field("op").type == pa.int32()
    assert out.column("op").to_pylist() == [0, 1, 2, 3]
    assert out.column("population").to_pylist() == [1, 1, 2, 3]


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("SELECT * FROM no_such_table", "no_such_table"),
        ("SELEKT event_time FROM cities", "SELEKT"),
        ("SELECT event_time, no_such_column FROM cities", "no_such_column"),
        ("SELECT offset, event_time, city FROM cities", "offset"),
        ("SELECT system_time, event_time FROM cities", "system_time"),
        ("SELECT city FROM cities", "event_time"),
        ("SELECT CAST(event_time AS STRING) AS event_time FROM cities", "TIMESTAMP or DATE"),
        ("SELECT CAST(op AS BIGINT) AS op, event_time FROM cities", "INT"),
    ],
)
def test_invalid_queries(
    engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path], query: str, needle: str
) -> None:
    data, schema = city_input
    inp = make_input(
        seed=b"cities", alias="cities", paths=[data], schema_file=schema, interval=(0, 5)
    )
    res = engine.execute_transform(make_request(tmp_path / "out", [inp], query=query))
    assert isinstance(res, TransformResponseInvalidQuery), res
    assert needle.lower() in res.message.lower()
    with pytest.raises(InvalidQuery):
        raise_for_result(res)
    assert not (tmp_path / "out" / "data").exists()


def test_other_engine_and_missing_input_file(
    engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path]
) -> None:
    data, schema = city_input
    inp = make_input(
        seed=b"cities", alias="cities", paths=[data], schema_file=schema, interval=(0, 5)
    )
    res = engine.execute_transform(
        make_request(tmp_path / "o1", [inp], query="SELECT event_time FROM cities", engine="flink")
    )
    assert isinstance(res, TransformResponseInvalidQuery) and "flink" in res.message
    missing = make_input(
        seed=b"cities",
        alias="cities",
        paths=[tmp_path / "nope"],
        schema_file=schema,
        interval=(0, 5),
    )
    res2 = engine.execute_transform(
        make_request(tmp_path / "o2", [missing], query="SELECT event_time FROM cities")
    )
    assert isinstance(res2, TransformResponseInternalError), res2
    assert "nope" in res2.message


def test_deterministic(engine: EngineClient, tmp_path: Path) -> None:
    t = write_input(
        tmp_path / "in",
        start_offset=0,
        cities=[f"c{i % 7}" for i in range(200)],
        populations=list(range(200)),
    )
    write_schema(tmp_path / "s", t)
    inp = make_input(
        seed=b"D",
        alias="src",
        paths=[tmp_path / "in"],
        schema_file=tmp_path / "s",
        interval=(10, 189),
    )
    query = "SELECT event_time, city, population % 13 AS m FROM src WHERE population % 3 <> 0"
    results = []
    for name in ("o1", "o2"):
        res = _success(
            engine.execute_transform(
                make_request(tmp_path / name, [inp], query=query, next_offset=5)
            )
        )
        results.append((res, pq.read_table(tmp_path / name / "data")))
    assert results[0][0] == results[1][0]
    assert results[0][1].equals(results[1][1])
    assert results[0][1].num_rows == 120


def test_watermark_min_and_checkpoint_carry_over(engine: EngineClient, tmp_path: Path) -> None:
    ta = write_input(tmp_path / "a", start_offset=0, cities=["a0", "a1"], populations=[1, 2])
    tb = write_input(tmp_path / "b", start_offset=0, cities=["b0", "b1"], populations=[3, 4])
    write_schema(tmp_path / "sa", ta)
    write_schema(tmp_path / "sb", tb)
    query = "SELECT event_time, city FROM a UNION ALL SELECT event_time, city FROM b"

    # Run 1: both inputs carry explicit watermarks; per input the latest counts.
    a1 = make_input(
        seed=b"WA",
        alias="a",
        paths=[tmp_path / "a"],
        schema_file=tmp_path / "sa",
        interval=(0, 0),
        watermarks_ms=[BASE_MS + 1000, BASE_MS + 8000],
    )
    b1 = make_input(
        seed=b"WB",
        alias="b",
        paths=[tmp_path / "b"],
        schema_file=tmp_path / "sb",
        interval=(0, 0),
        watermarks_ms=[BASE_MS + 5000],
    )
    r1 = _success(engine.execute_transform(make_request(tmp_path / "r1", [a1, b1], query=query)))
    assert r1.new_watermark == ts(BASE_MS + 5000)
    ckpt1 = tmp_path / "r1" / "checkpoint"
    assert read_watermarks(ckpt1) == {
        DatasetId.new_seeded(b"WA").as_multibase(): ts(BASE_MS + 8000),
        DatasetId.new_seeded(b"WB").as_multibase(): ts(BASE_MS + 5000),
    }

    # Run 2: A has no new watermark (taken from the checkpoint), B moves past A.
    a2 = make_input(
        seed=b"WA", alias="a", paths=[tmp_path / "a"], schema_file=tmp_path / "sa", interval=(1, 1)
    )
    b2 = make_input(
        seed=b"WB",
        alias="b",
        paths=[tmp_path / "b"],
        schema_file=tmp_path / "sb",
        interval=(1, 1),
        watermarks_ms=[BASE_MS + 20000],
    )
    r2 = _success(
        engine.execute_transform(
            make_request(
                tmp_path / "r2", [a2, b2], query=query, next_offset=2, prev_checkpoint=ckpt1
            )
        )
    )
    assert r2.new_offset_interval == OffsetInterval(start=2, end=3)
    assert r2.new_watermark == ts(BASE_MS + 8000)
    assert read_watermarks(tmp_path / "r2" / "checkpoint")[
        DatasetId.new_seeded(b"WA").as_multibase()
    ] == ts(BASE_MS + 8000)

    # Run 3: without the checkpoint, A has no watermark at all -> no output watermark.
    r3 = _success(
        engine.execute_transform(
            make_request(tmp_path / "r3", [a2, b2], query=query, next_offset=2)
        )
    )
    assert r3.new_watermark is None
    assert read_watermarks(tmp_path / "r3" / "checkpoint") == {
        DatasetId.new_seeded(b"WB").as_multibase(): ts(BASE_MS + 20000)
    }


def test_raw_query(engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path]) -> None:
    data, _ = city_input
    extra = tmp_path / "more"
    write_input(extra, start_offset=6, cities=["g"], populations=[70])
    res = engine.execute_raw_query(
        make_raw_query(
            [data, extra],
            "SELECT city, population + 1 AS p FROM input WHERE population > 30",
            tmp_path / "raw" / "output.parquet",
        )
    )
    assert res == RawQueryResponseSuccess(num_records=4)
    out = pq.read_table(tmp_path / "raw" / "output.parquet")
    assert sorted(out.column("city").to_pylist()) == ["d", "e", "f", "g"]
    assert sorted(out.column("p").to_pylist()) == [41, 51, 61, 71]

    bad = engine.execute_raw_query(
        make_raw_query([data], "SELECT nope FROM input", tmp_path / "raw2")
    )
    assert isinstance(bad, RawQueryResponseInvalidQuery) and "nope" in bad.message


def test_stream_progress_then_result_and_malformed_request(engine_process: EngineProcess) -> None:
    with grpc.insecure_channel(engine_process.address) as channel:
        stub = pb_grpc.EngineStub(channel)
        messages = list(
            stub.ExecuteTransform(pb.TransformRequest(flatbuffer=b"\x00garbage"), timeout=60)
        )
    values = [decode_table(TransformResponseRoot, m.flatbuffer).value for m in messages]
    assert isinstance(values[0], TransformResponseProgress)
    assert len(values) == 2
    assert isinstance(values[1], TransformResponseInternalError)
    assert "malformed" in values[1].message


def test_custom_vocabulary_and_date_event_time(
    engine: EngineClient, tmp_path: Path, city_input: tuple[Path, Path]
) -> None:
    data, schema = city_input
    inp = make_input(
        seed=b"cities", alias="cities", paths=[data], schema_file=schema, interval=(0, 1)
    )
    req = make_request(
        tmp_path / "out",
        [inp],
        # "offset" is a plain column under this vocabulary; OP matches "op" in any case.
        query="SELECT CAST(event_time AS DATE) AS day, offset, op AS OP, city FROM cities",
    ).replace(
        vocab=DatasetVocabulary(
            offset_column="off",
            operation_type_column="op",
            system_time_column="sys",
            event_time_column="day",
        ),
    )
    res = _success(engine.execute_transform(req))
    assert res.new_offset_interval == OffsetInterval(start=0, end=1)
    out = pq.read_table(tmp_path / "out" / "data")
    assert out.column_names == ["off", "op", "sys", "day", "offset", "city"]
    assert out.schema.field("day").type == pa.date32()
    assert out.schema.field("sys").type == TS_MS_UTC
    assert out.column("offset").to_pylist() == [0, 1]


def test_many_files_of_different_sizes_keep_offset_order(
    engine: EngineClient, tmp_path: Path
) -> None:
    # Spark orders a multi-file scan's splits by size; inputs are read as an ordered
    # union of files instead, so the rows reach the query in offset order.
    sizes = [3, 2000, 1, 700, 40]
    paths = []
    start = 0
    first = None
    for i, n in enumerate(sizes):
        t = write_input(
            tmp_path / f"in{i}",
            start_offset=start,
            cities=[f"c{start + j}" for j in range(n)],
            populations=list(range(start, start + n)),
        )
        first = first if first is not None else t
        paths.append(tmp_path / f"in{i}")
        start += n
    assert first is not None
    write_schema(tmp_path / "schema", first)
    inp = make_input(
        seed=b"many",
        alias="input",
        paths=paths,
        schema_file=tmp_path / "schema",
        interval=(2, start - 1),
        watermarks_ms=[],
    )
    req = make_request(
        tmp_path / "out", [inp], query="SELECT event_time, city, population FROM input"
    )
    res = _success(engine.execute_transform(req))
    assert res.new_offset_interval == OffsetInterval(start=0, end=start - 3)
    out = pq.read_table(tmp_path / "out" / "data")
    assert out.column("population").to_pylist() == list(range(2, start))
    assert out.column("offset").to_pylist() == list(range(start - 2))
