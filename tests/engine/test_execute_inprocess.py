"""The stateful streaming tests, run with the engine in THIS process (for mutation testing).

`engine.streaming.execute` runs inside the engine server, a subprocess of the test session,
where mutmut cannot see which tests reach which function. Here the same tests
(`tests/engine/test_streaming.py`, imported) call `engine.transform.execute_transform`
directly on a local SparkSession owned by this process, so the executor's code runs in
the pytest process.

The test session shares ONE engine (tests/conftest.py): a second JVM must never start in
it. So this module runs only when ``ODF_TEST_INPROCESS_SPARK=1`` (set by
``scripts/mutation engine/streaming/execute.py``, whose mutmut process owns no other
engine); otherwise every test here is skipped. One SparkSession serves every pytest run
of the process and every process forked from it (mutmut forks one child per mutant):
the JVM starts once, and a child opens its own py4j connections.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.inputs import PARALLEL_MIN_BYTES_CONF, InputPlan, SlicePlan
from engine.streaming import execute
from engine.transform import TransformResult, execute_transform
from fbs.model.engine import TransformRequest

# Deterministic stateful tests, collected here again with this module's `engine` fixture;
# the property tests are run below on one fixed split each. A mutant is tested with every
# test that reaches the mutated function, so their time is the run's time: the top-N and
# OVER queries (changelog mode again), the step re-run and the rewrite's window-after-key
# test are left out.
from tests.engine.helpers import make_input, write_input, write_schema
from tests.engine.streaming_helpers import (
    InputStream,
    StreamRunner,
    counter_of,
    fold,
    state_mode,
)
from tests.engine.test_streaming import (  # noqa: F401
    EVENTS,
    ORDERS,
    RATES,
    SHIPMENTS,
    TRADES,
    Reference,
    _as_of_reference,
    _changelog,
    _events,
    _filter_reference,
    _group_reference,
    _hop_reference,
    _interval_join_reference,
    _orders,
    _run_split,
    _trades,
    _tumble_reference,
    test_an_input_without_rows_yet_is_read_empty_on_the_next_run,
    test_input_retractions_are_folded_before_a_stateful_query,
    test_new_query_takes_over_from_the_old_state,
    test_stateless_query_over_a_changelog_of_any_shape,
    test_stateless_query_selecting_op_writes_its_own,
    test_unsupported_constructs_are_refused_by_name,
    test_window_waits_for_the_watermark,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Set to 1 to run this module (a local SparkSession in the pytest process).
INPROCESS_ENV: Final = "ODF_TEST_INPROCESS_SPARK"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get(INPROCESS_ENV) != "1",
        reason=f"starts Spark in the test process: only with {INPROCESS_ENV}=1 "
        "(scripts/mutation engine/streaming/execute.py)",
    ),
]


@dataclass(frozen=True)
class InProcessEngine:
    """The `EngineClient` call the streaming tests make, served by a local session."""

    session: SparkSession

    def execute_transform(self, request: TransformRequest) -> TransformResult:
        """Run ``request`` in this process, as the engine server would."""
        return execute_transform(self.session, request)


_SESSION: list[tuple[int, SparkSession]] = []


def process_session() -> SparkSession:
    """This process's SparkSession: started once, never stopped (the JVM ends with the
    process), reused by every later pytest run of the process.

    A forked child (mutmut's per-mutant worker) shares the JVM but not the parent's py4j
    sockets: it drops the inherited connections (without closing them: the parent's
    copies stay usable) and opens its own.
    """
    from engine.spark import SparkSettings, create_session

    if not _SESSION:
        session = create_session(
            SparkSettings(
                master="local[2]",
                driver_memory="1g",
                # As the shared engine of tests/conftest.py: small inputs take the
                # parallel read path production takes for large ones.
                extra_conf=(
                    (PARALLEL_MIN_BYTES_CONF, "0"),
                    ("spark.sql.files.maxPartitionBytes", str(64 * 1024)),
                ),
            )
        )
        _SESSION.append((os.getpid(), session))
    pid, session = _SESSION[0]
    if pid != os.getpid():
        gateway: Any = session.sparkContext._gateway
        client = gateway._gateway_client
        client.deque = collections.deque()
        if hasattr(client, "thread_connection"):
            client.thread_connection = threading.local()
        _SESSION[0] = (os.getpid(), session)
    return session


@pytest.fixture
def engine() -> Iterator[InProcessEngine]:
    """The engine of the imported streaming tests, in this process.

    Each test starts, like a fresh engine process, with no remembered plan facts (or a
    query's mode would be decided once, by the first test, for every later one).
    """
    execute._PLAN_FACTS.clear()
    yield InProcessEngine(process_session())
    execute._PLAN_FACTS.clear()


_TUMBLE = (
    "SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, k, count(*) AS n, "
    "sum(v) AS s, max(v) AS m FROM ev GROUP BY TUMBLE(event_time, INTERVAL '1' HOUR), k"
)
_HOP = (
    "SELECT HOP_END(event_time, INTERVAL '1' HOUR, INTERVAL '2' HOUR) AS event_time, k, "
    "sum(v) AS s FROM ev GROUP BY HOP(event_time, INTERVAL '1' HOUR, INTERVAL '2' HOUR), k"
)
_GROUP = "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
_INTERVAL_JOIN = (
    "SELECT o.event_time, o.order_id, s.event_time AS shipped_time, s.quantity AS shipped "
    "FROM orders AS o LEFT JOIN shipments AS s ON o.order_id = s.order_id AND "
    "s.event_time BETWEEN o.event_time AND o.event_time + INTERVAL '2' DAY"
)
_STATELESS = "SELECT event_time, upper(k) AS k, v * 2 AS v2 FROM ev WHERE v > 100"
_AS_OF = (
    "SELECT t.event_time, t.currency, t.amount, t.amount * r.rate AS converted "
    "FROM trades AS t LEFT JOIN rates FOR SYSTEM_TIME AS OF t.event_time AS r "
    "ON t.currency = r.currency"
)


def _one_input(rows: list[dict[str, Any]]) -> dict[str, tuple[pa.Schema, list[dict[str, Any]]]]:
    return {"ev": (EVENTS, rows)}


def _joined(seed: int) -> dict[str, tuple[pa.Schema, list[dict[str, Any]]]]:
    orders, shipments = _orders(seed)
    return {"orders": (ORDERS, orders), "shipments": (SHIPMENTS, shipments)}


def _traded(seed: int) -> dict[str, tuple[pa.Schema, list[dict[str, Any]]]]:
    rates, trades = _trades(seed)
    return {"trades": (TRADES, trades), "rates": (RATES, rates)}


@pytest.mark.parametrize(
    ("query", "data", "cuts", "reference", "append_only", "temporal"),
    [
        pytest.param(
            _TUMBLE, _one_input(_events(5, 40)), [17], _tumble_reference, True, (), id="tumble"
        ),
        pytest.param(_HOP, _one_input(_events(6, 40)), [23], _hop_reference, True, (), id="hop"),
        pytest.param(
            _GROUP, _one_input(_events(8, 30)), [12], _group_reference, False, (), id="group"
        ),
        pytest.param(
            _INTERVAL_JOIN,
            _joined(13),
            [6],
            _interval_join_reference,
            False,
            (),
            id="interval-join",
        ),
        pytest.param(
            _STATELESS,
            _one_input(_changelog(21, 40)),
            [17],
            _filter_reference,
            False,
            (),
            id="stateless-over-changelog",
        ),
        pytest.param(
            _AS_OF,
            _traded(14),
            [15],
            _as_of_reference,
            False,
            (("rates", ("currency",)),),
            id="temporal-join",
        ),
    ],
)
def test_one_split_folds_to_the_batch_answer(
    engine: InProcessEngine,
    tmp_path: Path,
    query: str,
    data: dict[str, tuple[pa.Schema, list[dict[str, Any]]]],
    cuts: list[int],
    reference: Reference,
    append_only: bool,
    temporal: tuple[tuple[str, tuple[str, ...]], ...],
) -> None:
    """A stateful query of each mode and join kind of test_streaming.py, on one fixed split
    (two runs and a closing watermark): the folded output equals the plain-Python reference,
    window queries append-only. (The split-independence properties, with the one-run
    comparison, stay in test_streaming.py: this is a mutant's test, kept short.)"""
    runner, per_run = _run_split(
        engine,  # type: ignore[arg-type]
        tmp_path,
        "split",
        data,
        [(None, query)],
        cuts,
        temporal=temporal,
    )
    assert fold(runner.outputs) == reference({a: rows for a, (_, rows) in data.items()})
    if append_only:
        assert all(set(t.column("op").to_pylist()) <= {0} for t in per_run)


# -- rules of the executor's Spark paths, called directly --------------------------------------


def _slice(tmp: Path, name: str, start: int, n: int) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_input(path, start_offset=start, cities=["c"] * n, populations=list(range(n)))
    return path


def test_one_scan_reads_retained_rows_and_unfiltered_slices_together(tmp_path: Path) -> None:
    """A parallel view is ONE scan of the retained rows and the new slices when no slice
    needs the offset filter and the retained rows have the input's columns; any other
    input is read the ordinary way (None)."""
    session = process_session()
    retained = _slice(tmp_path, "retained/part-0.parquet", 0, 3)
    new = _slice(tmp_path, "new.parquet", 3, 2)
    schema = tmp_path / "schema.parquet"
    write_schema(schema, pq.read_table(new))
    inp = make_input(seed=b"one", alias="ev", paths=[new], schema_file=schema, interval=(3, 4))
    plan = InputPlan(slices=(SlicePlan(str(new), False),), total_bytes=1)
    df = execute._one_scan(session, inp, plan, [retained])
    assert df is not None
    assert sorted(r["offset"] for r in df.collect()) == [0, 1, 2, 3, 4]
    # Each condition alone sends the input the ordinary way.
    filtered = InputPlan(slices=(SlicePlan(str(new), True),), total_bytes=1)
    no_schema = inp.replace(schema_file=str(tmp_path / "missing.parquet"))
    other = _slice(tmp_path, "other/part-0.parquet", 0, 1)
    pq.write_table(pq.read_table(other).drop(["city"]), other)
    for args in (
        (inp, plan, []),
        (inp, InputPlan(slices=(), total_bytes=0), [retained]),
        (inp.replace(offset_interval=None), plan, [retained]),
        (inp, filtered, [retained]),
        (no_schema, plan, [retained]),
        (inp.replace(schema_file=None), plan, [retained]),
        (inp, plan, [other]),
    ):
        assert execute._one_scan(session, *args) is None, args


def test_a_null_op_is_an_append_when_an_input_is_folded(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """Folding an input changelog (it holds a retraction) removes rows for ``op`` 1 and 2
    only: a row whose ``op`` is NULL is kept, as an append."""
    query = "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    a = {"event_time": t0, "k": "a", "v": 1}
    b = {"event_time": t0, "k": "b", "v": 2, "op": None}
    ev.append([a, b, {**a, "op": 1}])
    runner.run()
    assert fold(runner.outputs) == counter_of([(t0, "b", 1)])


def test_versions_of_a_temporal_table_follow_event_time_not_arrival(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """A temporal table's versions are ordered by event time (then offset): a rate that
    arrives after a newer one is valid until that newer one, not after it."""
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    rates = InputStream("rates", RATES, tmp_path / "rates")
    trades = InputStream("trades", TRADES, tmp_path / "trades")
    runner = StreamRunner(
        engine,
        [trades, rates],
        [(None, _AS_OF)],
        tmp_path / "out",
        temporal=[("rates", ["currency"])],
    )
    far = int(dt.datetime(2100, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    # The 10:00 rate arrives first (offset 0), the 09:00 rate after it (offset 1).
    rates.append(
        [
            {"event_time": t0 + 10 * hour, "currency": "EUR", "rate": 2},
            {"event_time": t0 + 9 * hour, "currency": "EUR", "rate": 1},
        ],
        watermark_ms=far,
    )
    trades.append(
        [
            {"event_time": t0 + 9 * hour + hour / 2, "currency": "EUR", "amount": 10},
            {"event_time": t0 + 10 * hour + hour / 2, "currency": "EUR", "amount": 10},
        ],
        watermark_ms=far,
    )
    runner.run()
    assert fold(runner.outputs) == counter_of(
        [(t0 + 9.5 * hour, "EUR", 10, 10), (t0 + 10.5 * hour, "EUR", 10, 20)]
    )


@pytest.mark.parametrize(
    ("aggregates", "order_free"),
    [
        ("count(*) AS n, min(v) AS lo, max(v) AS hi", True),
        ("sum(v) AS s, avg(v) AS a", True),  # integers
        ("sum(CAST(v AS DECIMAL(10, 2))) AS s, avg(CAST(v AS DECIMAL(10, 2))) AS a", True),
        ("sum(CAST(v AS DOUBLE)) AS s", False),  # a float sum depends on the order
        ("count(*) AS n, avg(CAST(v AS FLOAT)) AS a", False),
        ("first(v) AS f", False),  # any other aggregate
        ("count(*) AS n, collect_list(v) AS l", False),
    ],
)
def test_only_count_min_max_and_exact_sums_are_order_free(
    aggregates: str, order_free: bool, tmp_path: Path
) -> None:
    """A window query is computed across partitions only when every aggregate gives the same
    value in any row order: count, min, max, and sum / avg of integers and decimals."""
    session = process_session().newSession()
    path = _slice(tmp_path, "ev.parquet", 0, 4)
    ev = session.read.parquet(str(path)).withColumnRenamed("population", "v")
    ev.createOrReplaceTempView("ev")
    df = session.sql(
        f"SELECT window(event_time, '1 hour') AS w, city, {aggregates} "
        "FROM ev GROUP BY window(event_time, '1 hour'), city"
    )
    assert execute._order_insensitive(df) is order_free


def test_the_live_output_keeps_every_row_not_retracted(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """Changelog mode: after a run that retracts one key's row, the live output still holds
    the other keys' rows, so a later run emits only what changed."""
    # HAVING: not decomposable, a changelog query
    query = (
        "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k "
        "HAVING count(*) > 0"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t = [dt.datetime(2020, 1, 1, h, tzinfo=dt.UTC) for h in range(3)]
    ev.append([{"event_time": t[0], "k": "a", "v": 1}, {"event_time": t[0], "k": "b", "v": 1}])
    runner.run()
    ev.append([{"event_time": t[1], "k": "a", "v": 1}])
    assert [(r["op"], r["k"], r["n"]) for r in runner.run().to_pylist()] == [
        (1, "a", 1),
        (0, "a", 2),
    ]
    ev.append([{"event_time": t[2], "k": "c", "v": 1}])
    assert [(r["op"], r["k"], r["n"]) for r in runner.run().to_pylist()] == [(0, "c", 1)]
    assert fold(runner.outputs) == counter_of([(t[1], "a", 2), (t[0], "b", 1), (t[2], "c", 1)])


def test_a_split_window_result_is_written_sorted_by_its_columns(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """A window query computed across partitions writes its rows sorted by their columns
    (event time, key, count), so every run and replay writes the same order."""
    query = (
        "SELECT window(event_time, '1 hour').start AS event_time, k, count(*) AS n "
        "FROM ev GROUP BY window(event_time, '1 hour'), k"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    keys = "qwertyuiopasdfghjklzxcvbnm"
    ev.append(
        [
            {"event_time": t0 + dt.timedelta(minutes=7 * i), "k": keys[i % 26], "v": i}
            for i in range(60)
        ],
        watermark_ms=int((t0 + dt.timedelta(hours=9)).timestamp() * 1000),
    )
    rows = [(r["event_time"], r["k"], r["n"]) for r in runner.run().to_pylist()]
    assert len(rows) > 26
    assert rows == sorted(rows)


@pytest.mark.parametrize(
    ("time_expr", "mode"),
    [
        ("event_time", "window"),
        ("`event_time`", "window"),  # quoted
        ("ev.`EVENT_TIME`", "window"),  # qualified, any case
        ("system_time", "changelog"),  # a window over another column
    ],
)
def test_window_mode_needs_a_window_over_the_input_event_time(
    engine: InProcessEngine, tmp_path: Path, time_expr: str, mode: str
) -> None:
    """Window mode is chosen for one group window over the single input's event-time
    column, however the column is written (quoted, qualified, any case); a window over
    another column is a changelog query."""
    query = (
        f"SELECT window({time_expr}, '1 hour').start AS event_time, count(*) AS n "
        f"FROM ev GROUP BY window({time_expr}, '1 hour')"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    ev.append([{"event_time": dt.datetime(2020, 1, 1, tzinfo=dt.UTC), "k": "a", "v": 1}])
    runner.run()
    assert state_mode(runner.checkpoint) == mode


def test_window_mode_needs_a_single_input(engine: InProcessEngine, tmp_path: Path) -> None:
    """One window over a union of two inputs is a changelog query: window mode is for one
    input (its retention and lateness follow that input's event time)."""
    query = (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n "
        "FROM (SELECT event_time FROM a UNION ALL SELECT event_time FROM b) "
        "GROUP BY window(event_time, '1 hour')"
    )
    a = InputStream("a", EVENTS, tmp_path / "a")
    b = InputStream("b", EVENTS, tmp_path / "b")
    runner = StreamRunner(engine, [a, b], [(None, query)], tmp_path / "out")
    row = {"event_time": dt.datetime(2020, 1, 1, tzinfo=dt.UTC), "k": "a", "v": 1}
    a.append([row])
    b.append([row])
    runner.run()
    assert state_mode(runner.checkpoint) == "changelog"


def test_window_mode_compares_the_whole_column_name(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """Only quotes and qualifiers are taken off the window's column: an event-time column
    named ``Xt_X`` is matched letter for letter (none of its X's stripped)."""
    schema = pa.schema([("Xt_X", pa.timestamp("ms", tz="UTC")), ("k", pa.string())])
    query = (
        "SELECT window(Xt_X, '1 hour').start AS event_time, count(*) AS n "
        "FROM ev GROUP BY window(Xt_X, '1 hour')"
    )
    ev = InputStream("ev", schema, tmp_path / "in", event_time="Xt_X")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    ev.append([{"Xt_X": dt.datetime(2020, 1, 1, tzinfo=dt.UTC), "k": "a"}])
    runner.run()
    assert state_mode(runner.checkpoint) == "window"


def test_no_window_closes_before_a_watermark(engine: InProcessEngine, tmp_path: Path) -> None:
    """Before every input has a watermark no window closes, while a changelog query's rows
    are emitted as they are."""
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    window = (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n "
        "FROM ev GROUP BY window(event_time, '1 hour')"
    )
    changelog = "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k"
    for name, query, rows in (("window", window, 0), ("changelog", changelog, 1)):
        ev = InputStream("ev", EVENTS, tmp_path / name / "in")
        runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / name / "out")
        ev.append([{"event_time": t0, "k": "a", "v": 1}], watermark_ms=None)
        ev.watermark_ms = None  # no watermark at all: append() defaults to the latest row's
        ev._new_watermark = False
        assert runner.run().num_rows == rows, name


def test_the_op_column_takes_the_output_vocabulary_name(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """A stateful query's output writes its appends and retractions under the output
    dataset's operation-type column name, as a plain query does (`finish_output`)."""
    query = "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    ev.append([{"event_time": dt.datetime(2020, 1, 1, tzinfo=dt.UTC), "k": "a", "v": 1}])
    work = tmp_path / "work"
    work.mkdir()
    request = runner.request(work)
    request = request.replace(vocab=request.vocab.replace(operation_type_column="change"))
    result = engine.execute_transform(request)
    assert type(result).__name__ == "TransformResponseSuccess", result
    table = pq.read_table(work / "data")
    assert "op" not in table.column_names
    assert table.column("change").to_pylist() == [0]


def test_a_split_window_result_with_a_map_column_sorts_by_the_other_columns(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """A window result computed across partitions is sorted by its columns except map
    columns, which Spark cannot order by: a map in the output is written, the rows sorted
    by the others."""
    query = (
        "SELECT window(event_time, '1 hour').start AS event_time, k, "
        "map('n', count(*)) AS m FROM ev GROUP BY window(event_time, '1 hour'), k"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    ev.append(
        [
            {"event_time": t0 + dt.timedelta(minutes=20 * i), "k": "ba"[i % 2], "v": i}
            for i in range(6)
        ],
        watermark_ms=int((t0 + dt.timedelta(hours=3)).timestamp() * 1000),
    )
    rows = [(r["event_time"], r["k"], dict(r["m"])) for r in runner.run().to_pylist()]
    assert rows == [
        (t0, "a", {"n": 1}),
        (t0, "b", {"n": 2}),
        (t0 + dt.timedelta(hours=1), "a", {"n": 2}),
        (t0 + dt.timedelta(hours=1), "b", {"n": 1}),
    ]


def test_a_changelog_row_changed_in_its_first_column_only_is_replaced(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """The multiset difference to the live output compares every column: a row whose first
    column alone changed is retracted and appended again."""
    # HAVING: not decomposable, a changelog query
    query = "SELECT max(event_time) AS event_time, k FROM ev GROUP BY k HAVING count(*) > 0"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    t1 = t0 + dt.timedelta(minutes=5)
    ev.append([{"event_time": t0, "k": "a", "v": 1}])
    runner.run()
    ev.append([{"event_time": t1, "k": "a", "v": 1}])
    assert [(r["op"], r["event_time"], r["k"]) for r in runner.run().to_pylist()] == [
        (1, t0, "a"),
        (0, t1, "a"),
    ]


def test_retained_rows_of_an_older_input_schema_are_read_with_the_new_rows(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """An input whose schema gained a column since the rows were retained: the retained rows
    are read under their own schema and joined to the new rows by name, the new column
    null for them."""
    # HAVING: not decomposable, a changelog query
    query = (
        "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k "
        "HAVING count(*) > 0"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    t1 = t0 + dt.timedelta(minutes=5)
    ev.append([{"event_time": t0, "k": "a", "v": 1}])
    runner.run()
    ev.schema = EVENTS.append(pa.field("w", pa.string()))
    ev.append([{"event_time": t1, "k": "a", "v": 2, "w": "new"}])
    assert [(r["op"], r["k"], r["n"]) for r in runner.run().to_pylist()] == [
        (1, "a", 1),
        (0, "a", 2),
    ]


def test_a_window_float_sum_adds_its_rows_in_offset_order(
    engine: InProcessEngine, tmp_path: Path
) -> None:
    """A window query whose aggregate depends on the order of its rows (a float sum) is
    computed over its input as one partition in offset order, retained rows first, so a
    replay adds in the same order: 1 + 1e16 - 1e16 is 0.0 in that order, 1.0 if the new rows
    were summed apart."""
    query = (
        "SELECT window(event_time, '1 hour').start AS event_time, "
        "sum(CAST(v AS DOUBLE)) AS s FROM ev GROUP BY window(event_time, '1 hour')"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    ev.append([{"event_time": t0, "k": "a", "v": 1}])
    assert runner.run().num_rows == 0  # the window is still open: its row is retained
    minute = dt.timedelta(minutes=1)
    ev.append(
        [
            {"event_time": t0 + minute, "k": "a", "v": 10**16},
            {"event_time": t0 + 2 * minute, "k": "a", "v": -(10**16)},
        ],
        watermark_ms=int((t0 + dt.timedelta(hours=2)).timestamp() * 1000),
    )
    assert [(r["event_time"], r["s"]) for r in runner.run().to_pylist()] == [(t0, 0.0)]


def test_the_plan_facts_cache_holds_256_queries(engine: InProcessEngine, tmp_path: Path) -> None:
    """The engine process remembers the plan facts of at most `PLAN_FACTS_CACHE_SIZE` = 256
    queries, the least recently used forgotten first: with 256 remembered, a new query's
    facts push out exactly the oldest (the limit pinned at its boundary)."""
    facts = execute._PlanFacts(execute.MODE_CHANGELOG, False, bounded=False)
    execute._PLAN_FACTS.update({("other query", i): facts for i in range(256)})
    query = "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    ev.append([{"event_time": dt.datetime(2020, 1, 1, tzinfo=dt.UTC), "k": "a", "v": 1}])
    runner.run()
    keys = list(execute._PLAN_FACTS)
    assert len(keys) == 256
    assert keys[:255] == [("other query", i) for i in range(1, 256)]
    assert keys[255][0] != "other query"
