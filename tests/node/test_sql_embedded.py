"""``odf sql`` on the embedded DataFusion engine, and the same answers as on Spark.

Spark runs through the shared engine of ``tests/conftest.py`` (``ODF_ENGINE_ADDRESS``);
the DataFusion-only tests point ``ODF_ENGINE_ADDRESS`` at a closed port, so a query that
wrongly went to Spark fails instead of starting a JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import InvalidQuery
from engine.process import EngineProcess
from fbs.arrow_schema import data_schema_from_arrow
from fbs.model import SetDataSchema
from node.cli import main
from node.sql.embedded import normalize
from node.sql.query import run_sql
from storage.workspace import Workspace
from tests.node.conftest import BASE_MS, ROOT_SCHEMA, TS, RootWriter, ts_ms

MakeRoot = Callable[[str], RootWriter]

#: The README's kinds of query: aggregation, filter (on a timestamp), join of two datasets
#: with a dotted alias in backticks, every column (timestamps rendered).
QUERIES = {
    "aggregation": (
        "SELECT city, count(*) AS n, sum(population) AS total, avg(population) AS mean, "
        "max(event_time) AS latest FROM `com.example.cities` GROUP BY city ORDER BY city"
    ),
    "filter": (
        "SELECT offset, event_time, city, population FROM `com.example.cities` "
        "WHERE population > 15 AND event_time >= TIMESTAMP '2020-01-01 00:00:01' "
        "ORDER BY offset"
    ),
    "join": (
        "SELECT c.city, c.population + a.population AS total, a.event_time AS area_time "
        "FROM `com.example.cities` c JOIN areas a ON c.city = a.city "
        "ORDER BY c.city, total"
    ),
    "all_columns": "SELECT * FROM `com.example.cities` ORDER BY offset",
}


@pytest.fixture
def two_datasets(ws: Workspace, make_root: MakeRoot) -> Workspace:
    cities = make_root("com.example.cities")
    cities.append([("a", 1), ("b", 20)], event_ms=[BASE_MS, BASE_MS + 1000])
    cities.append([("a", 30), ("c", 40), ("b", 5)], event_ms=[BASE_MS + 2000] * 3)
    make_root("areas").append([("a", 10), ("b", 20), ("d", 30)], event_ms=[BASE_MS + 123] * 3)
    make_root("unrelated")  # no schema, not mentioned: ignored
    return ws


def _cli(ws: Workspace, *args: str) -> list[str]:
    return ["-w", str(ws.root.parent), "sql", *args]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_same_answers_on_both_engines(
    two_datasets: Workspace,
    engine_process: EngineProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
) -> None:
    ws = two_datasets
    monkeypatch.setenv("ODF_ENGINE_ADDRESS", engine_process.address)
    query = QUERIES[name]
    rendered: dict[str, dict[str, str]] = {}
    tables: dict[str, pa.Table] = {}
    for engine in ("spark", "datafusion"):
        out: dict[str, str] = {}
        for fmt in ("table", "csv", "json"):
            assert main(_cli(ws, query, "--engine", engine, "--output-format", fmt)) == 0
            captured = capsys.readouterr()
            assert captured.err == ""
            out[fmt] = captured.out
        rendered[engine] = out
        path = tmp_path / f"{engine}.parquet"
        args = ("--engine", engine, "--output-format", "parquet", "--output-path", str(path))
        assert main(_cli(ws, query, *args)) == 0
        capsys.readouterr()
        tables[engine] = pq.read_table(path)
    spark, fusion = tables["spark"], tables["datafusion"]
    assert fusion.num_rows > 0
    assert [(f.name, f.type) for f in fusion.schema] == [(f.name, f.type) for f in spark.schema]
    assert fusion.to_pylist() == spark.to_pylist()
    assert rendered["datafusion"] == rendered["spark"]
    if name == "all_columns":
        assert spark.schema.field("event_time").type == TS
        assert json.loads(rendered["spark"]["json"])[0]["event_time"] == (
            "2020-01-01 00:00:00+00:00"
        )


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the Spark engine fails (a closed port) rather than starting a JVM."""
    monkeypatch.setenv("ODF_ENGINE_ADDRESS", "127.0.0.1:1")


@pytest.mark.usefixtures("no_spark")
def test_default_engine_is_embedded(two_datasets: Workspace, tmp_path: Path) -> None:
    result = run_sql(
        two_datasets,
        "SELECT c.city, a.population AS area FROM `com.example.cities` c "
        'JOIN "areas" a USING (city) WHERE c.population < 25 ORDER BY c.city',
        tmp_path / "out.parquet",
    )
    assert result.num_records == 3
    assert result.read().to_pylist() == [
        {"city": "a", "area": 10},
        {"city": "b", "area": 20},
        {"city": "b", "area": 20},
    ]


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize(
    "query",
    [
        "SELECT nope FROM areas",
        "SELEC 1",
        "SELECT * FROM not_a_dataset",
        "COPY (SELECT 1) TO '/tmp/odf-sql-copy.csv'",
        "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc'",
        "SET datafusion.execution.batch_size = 1",
    ],
)
def test_errors_are_one_line_exit_4(
    two_datasets: Workspace, capsys: pytest.CaptureFixture[str], tmp_path: Path, query: str
) -> None:
    with pytest.raises(InvalidQuery):
        run_sql(two_datasets, query, tmp_path / "out.parquet")
    assert main(_cli(two_datasets, query)) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("odf: error: ")
    assert captured.err.count("\n") == 1
    assert not Path("/tmp/odf-sql-copy.csv").exists()


@pytest.mark.usefixtures("no_spark")
def test_only_referenced_files_are_read(ws: Workspace, make_root: MakeRoot, tmp_path: Path) -> None:
    """A data object no block references (an interrupted commit) is not part of the table."""
    writer = make_root("nums")
    writer.append([("x", 7), ("y", 8)])
    stray = writer.ds.layout.data.root / "stray.parquet"  # not in the chain
    table = pq.read_table(next(p for p in writer.ds.layout.data.root.rglob("*") if p.is_file()))
    pq.write_table(table, stray)
    result = run_sql(ws, "SELECT count(*) AS n FROM nums", tmp_path / "o.parquet")
    assert result.read().to_pylist() == [{"n": 2}]
    assert not list((ws.root / "run" / "sql").iterdir())  # staging removed


@pytest.mark.usefixtures("no_spark")
def test_empty_dataset_and_mixed_case_alias(
    ws: Workspace, make_root: MakeRoot, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    make_root("MyData").append([("x", 7)])
    empty = make_root("empty.one").ds  # a schema, no data file
    schema = SetDataSchema(schema=data_schema_from_arrow(ROOT_SCHEMA))
    when = ts_ms(int(time.time() * 1000) + 60_000)
    empty.commit(schema, system_time=when, expected_head=empty.head())
    result = run_sql(ws, "SELECT population FROM mydata", tmp_path / "a.parquet")
    assert result.read().to_pylist() == [{"population": 7}]
    result = run_sql(ws, 'SELECT count(*) AS n FROM "MyData"', tmp_path / "b.parquet")
    assert result.read().to_pylist() == [{"n": 1}]
    query = "SELECT city, event_time FROM `empty.one` WHERE population > 5"
    result = run_sql(ws, query, tmp_path / "c.parquet")
    assert result.num_records == 0
    assert result.read().schema.field("event_time").type == TS
    assert main(_cli(ws, query, "--output-format", "json")) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_normalize_gives_spark_types() -> None:
    table = pa.table(
        {
            "ns": pa.array([1_500_000], pa.timestamp("ns")),
            "us_tz": pa.array([1_500], pa.timestamp("us", tz="UTC")),
            "s": pa.array(["a"], pa.string_view()),
            "l": pa.array([["a"]], pa.list_(pa.string_view())),
        }
    )
    out = normalize(table)
    assert out.schema.types == [TS, TS, pa.string(), pa.list_(pa.string())]
    assert out.column("ns").to_pylist() == out.column("us_tz").to_pylist()


@pytest.mark.usefixtures("no_spark")
def test_python_api_sql(two_datasets: Workspace) -> None:
    from node.api import Workspace as ApiWorkspace

    api = ApiWorkspace(two_datasets)
    table = api.sql("SELECT max(population) AS top FROM `com.example.cities`")
    assert table.to_pylist() == [{"top": 40}]
    with pytest.raises(InvalidQuery):
        api.sql("SELECT nope FROM areas")


@pytest.mark.usefixtures("no_spark")
def test_cli_embedded_path_imports_no_engine_or_pandas(two_datasets: Workspace) -> None:
    """The default path never loads gRPC/Spark, nor pandas (start-up time of ``odf sql``)."""
    code = (
        "import sys; from node.cli import main; "
        "rc = main(sys.argv[1:]); "
        "names = ('grpc', 'pyspark', 'pandas', 'pyarrow.dataset'); "
        "heavy = [m for m in names if m in sys.modules]; "
        "print('HEAVY', heavy, rc)"
    )
    query = "SELECT city, count(*) AS n FROM `com.example.cities` GROUP BY city"
    r = subprocess.run(
        [sys.executable, "-c", code, *_cli(two_datasets, query)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.stdout.splitlines()[-1] == "HEAVY [] 0", r.stdout + r.stderr


def test_a_dataset_with_nothing_in_it_is_named_not_a_missing_table(tmp_path: Path) -> None:
    from fbs.model import DatasetKind, DatasetSnapshot
    from node.sql.query import run_embedded

    ws = Workspace.init(tmp_path / "project")
    ws.add_snapshot(DatasetSnapshot(name="my.empty", kind=DatasetKind.Root, metadata=()))
    with pytest.raises(InvalidQuery, match=r"^dataset my\.empty has no data yet"):
        run_embedded(ws.root, "SELECT * FROM `my.empty`")
    with pytest.raises(InvalidQuery, match="not found"):  # not a dataset: the engine's words
        run_embedded(ws.root, "SELECT * FROM nothing")


@pytest.mark.parametrize(
    ("query", "hint"),
    [
        (
            "SELECT count(*) FROM com.example.cities",
            '(quote a dataset name with dots: "com.example.cities")',
        ),
        ("SELECT * FROM cities", "(datasets here: areas, com.example.cities, unrelated)"),
        (
            'SELECT * FROM "com.example.cities" JOIN nothing ON true',
            "(datasets here: areas, com.example.cities, unrelated)",
        ),
    ],
)
def test_a_missing_table_says_what_was_likely_meant(
    two_datasets: Workspace, query: str, hint: str
) -> None:
    """An unquoted dotted alias is read as schema.table: the error says to quote it;
    another missing table lists the datasets there are."""
    from node.sql.query import run_embedded

    with pytest.raises(InvalidQuery) as info:
        run_embedded(two_datasets.root, query)
    assert str(info.value).endswith(hint), str(info.value)
    assert "not found" in str(info.value)
