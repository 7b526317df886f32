"""Stateful streaming on the engine: the folded output does not depend on how input is split.

Each property test draws a data set and a random split of it into runs, feeds the runs to
the engine one by one (checkpoints carried over), then closes everything with a watermark
past all data. The folded changelog must equal (1) the output of one run over all the data
and (2) an independent reference computed here in plain Python. Window queries must also
be append-only (each window emitted once, complete), and no window may be emitted before
the watermark passes its end.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.client import EngineClient
from tests.engine.streaming_helpers import InputStream, StreamRunner, counter_of, fold

pytestmark = pytest.mark.slow

UTC = dt.UTC
TS = pa.timestamp("ms", tz="UTC")
T0 = dt.datetime(2020, 1, 1, tzinfo=UTC)
FAR = int(dt.datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 1000)
HOUR = dt.timedelta(hours=1)
EVENTS = pa.schema([("event_time", TS), ("k", pa.string()), ("v", pa.int64())])

SETTINGS = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Row = dict[str, Any]
Reference = Callable[[dict[str, list[Row]]], collections.Counter[tuple[Any, ...]]]


def _events(seed: int, n: int, *, distinct_times: bool = False) -> list[Row]:
    rnd = random.Random(seed)
    t = T0
    rows = []
    for i in range(n):
        t += dt.timedelta(
            minutes=rnd.choice([1, 7, 20, 45, 90])
            if distinct_times
            else rnd.choice([0, 10, 30, 70])
        )
        rows.append(
            {"event_time": t, "k": rnd.choice("abc"), "v": rnd.randint(-5, 100) * 10 + i % 10}
        )
    return rows


def _split(rows: list[Row], cuts: list[int]) -> list[list[Row]]:
    points = sorted(min(c, len(rows)) for c in cuts)
    out, start = [], 0
    for p in [*points, len(rows)]:
        out.append(rows[start:p])
        start = p
    return out


def _run_split(
    engine: EngineClient,
    tmp: Path,
    name: str,
    data: dict[str, tuple[pa.Schema, list[Row]]],
    steps: Sequence[tuple[str | None, str]],
    cuts: list[int],
    *,
    temporal: Sequence[tuple[str, Sequence[str]]] = (),
) -> tuple[StreamRunner, list[pa.Table]]:
    """Feed ``data`` split at ``cuts`` (same cuts for every input), then a far watermark."""
    folder = tmp / name
    inputs = {a: InputStream(a, schema, folder / "in") for a, (schema, _) in data.items()}
    runner = StreamRunner(engine, list(inputs.values()), steps, folder / "out", temporal=temporal)
    per_run: list[pa.Table] = []
    batches = {a: _split(rows, cuts) for a, (_, rows) in data.items()}
    for i in range(len(cuts) + 1):
        for alias, stream in inputs.items():
            stream.append(batches[alias][i])
        per_run.append(runner.run())
    for stream in inputs.values():
        stream.append([], watermark_ms=FAR)
    per_run.append(runner.run())
    return runner, per_run


def _check(
    engine: EngineClient,
    tmp: Path,
    data: dict[str, tuple[pa.Schema, list[Row]]],
    steps: Sequence[tuple[str | None, str]],
    cuts: list[int],
    reference: Reference,
    *,
    temporal: Sequence[tuple[str, Sequence[str]]] = (),
    append_only: bool = False,
) -> None:
    tag = uuid.uuid4().hex[:12]
    split, per_run = _run_split(engine, tmp, f"split-{tag}", data, steps, cuts, temporal=temporal)
    one, _ = _run_split(engine, tmp, f"one-{tag}", data, steps, [], temporal=temporal)
    expected = reference({a: rows for a, (_, rows) in data.items()})
    assert fold(split.outputs) == expected
    assert fold(one.outputs) == expected
    if append_only:
        assert all(set(t.column("op").to_pylist()) <= {0} for t in per_run)


def _data_rows(
    counter: collections.Counter[tuple[Any, ...]],
) -> collections.Counter[tuple[Any, ...]]:
    return counter


# -- windows ----------------------------------------------------------------------------------


def _tumble_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    agg: dict[tuple[dt.datetime, str], list[int]] = collections.defaultdict(list)
    for r in rows["ev"]:
        start = r["event_time"].replace(minute=0, second=0, microsecond=0)
        agg[(start, r["k"])].append(r["v"])
    return counter_of([(s, k, len(v), sum(v), max(v)) for (s, k), v in agg.items()])


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=3))
@SETTINGS
def test_tumble_is_split_independent(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, k, count(*) AS n, "
        "sum(v) AS s, max(v) AS m FROM ev GROUP BY TUMBLE(event_time, INTERVAL '1' HOUR), k"
    )
    data = {"ev": (EVENTS, _events(seed, 40))}
    _check(engine, tmp_path, data, [(None, query)], cuts, _tumble_reference, append_only=True)


def _upper_key_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    agg: dict[tuple[dt.datetime, str], int] = collections.Counter()
    for r in rows["ev"]:
        agg[(r["event_time"].replace(minute=0, second=0, microsecond=0), r["k"].upper())] += 1
    return counter_of([(s, k, n) for (s, k), n in agg.items()])


def test_tumble_after_an_expression_key_is_a_window(engine: EngineClient, tmp_path: Path) -> None:
    """A group key with parentheses before the window (the rewrite once missed the window
    after it: tests/engine/test_rewrite_rules.py pins that): each window emitted once,
    complete, whatever the split."""
    query = (
        "SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, upper(k) AS k, "
        "count(*) AS n FROM ev GROUP BY upper(k), TUMBLE(event_time, INTERVAL '1' HOUR)"
    )
    data = {"ev": (EVENTS, _events(7, 40))}
    _check(engine, tmp_path, data, [(None, query)], [9, 23], _upper_key_reference, append_only=True)


def _hop_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    agg: dict[tuple[dt.datetime, str], list[int]] = collections.defaultdict(list)
    for r in rows["ev"]:
        hour = r["event_time"].replace(minute=0, second=0, microsecond=0)
        for start in (hour - HOUR, hour):  # 2-hour windows sliding by 1 hour
            agg[(start + 2 * HOUR, r["k"])].append(r["v"])
    return counter_of([(end, k, sum(v)) for (end, k), v in agg.items()])


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=3))
@SETTINGS
def test_hop_is_split_independent(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT HOP_END(event_time, INTERVAL '1' HOUR, INTERVAL '2' HOUR) AS event_time, k, "
        "sum(v) AS s FROM ev GROUP BY HOP(event_time, INTERVAL '1' HOUR, INTERVAL '2' HOUR), k"
    )
    data = {"ev": (EVENTS, _events(seed, 40))}
    _check(engine, tmp_path, data, [(None, query)], cuts, _hop_reference, append_only=True)


def test_window_waits_for_the_watermark(engine: EngineClient, tmp_path: Path) -> None:
    """A window is emitted only when the watermark reaches its end, then never again."""
    query = (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n "
        "FROM ev GROUP BY window(event_time, '1 hour')"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    row = {"k": "a", "v": 1}
    ev.append([{**row, "event_time": T0 + dt.timedelta(minutes=m)} for m in (0, 10, 59)])
    assert runner.run().num_rows == 0  # watermark 00:59: the 00:00 window is open
    ev.append([{**row, "event_time": T0 + dt.timedelta(minutes=70)}])
    out = runner.run()  # watermark 01:10 closes 00:00-01:00 with its 3 rows
    assert [(r["event_time"], r["n"]) for r in out.to_pylist()] == [(T0, 3)]
    # The checkpoint keeps only the rows of open windows: the 01:10 row.
    assert _retained_rows(runner.checkpoint) == 1
    late = {**row, "event_time": T0 + dt.timedelta(minutes=30)}
    ev.append([late, {**row, "event_time": T0 + dt.timedelta(minutes=75)}])
    assert runner.run().num_rows == 0  # the late row's window was emitted: dropped
    ev.append([], watermark_ms=int((T0 + 2 * HOUR).timestamp() * 1000))
    out = runner.run()  # a watermark alone closes 01:00-02:00
    assert [(r["event_time"], r["n"]) for r in out.to_pylist()] == [(T0 + HOUR, 2)]


def _retained_rows(checkpoint: Path | None) -> int:
    """Rows of input kept in a checkpoint's stream state."""
    import io
    import tarfile

    import pyarrow.parquet as pq

    assert checkpoint is not None
    with tarfile.open(checkpoint) as tar:
        return sum(
            pq.read_metadata(io.BytesIO(tar.extractfile(m).read())).num_rows  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.name.startswith("state/input-") and m.name.endswith(".parquet")
        )


# -- changelog queries ------------------------------------------------------------------------


def _group_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    agg: dict[str, list[Row]] = collections.defaultdict(list)
    for r in rows["ev"]:
        agg[r["k"]].append(r)
    return counter_of(
        [
            (max(x["event_time"] for x in g), k, len(g), sum(x["v"] for x in g))
            for k, g in agg.items()
        ]
    )


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=3))
@SETTINGS
def test_group_by_is_split_independent(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
    data = {"ev": (EVENTS, _events(seed, 30))}
    _check(engine, tmp_path, data, [(None, query)], cuts, _group_reference)


def test_a_changelog_uses_the_output_vocabulary_op_column(
    engine: EngineClient, tmp_path: Path
) -> None:
    """Appends and retractions are written under the vocabulary's operation type column
    (a stateful query that wrote ``op`` whatever the vocabulary said could not read its own
    output back on its next run)."""
    query = "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
    rows = _events(7, 12)
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out", op_column="change")
    for part in _split(rows, [4, 8]):
        ev.append(part)
        runner.run()
    assert all("op" not in t.column_names for t in runner.outputs)
    ops = [op for t in runner.outputs for op in t.column("change").to_pylist()]
    assert {2, 3} <= set(ops)  # the later runs corrected earlier groups
    assert fold(runner.outputs, op_column="change") == _group_reference({"ev": rows})


def _top2_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    ranked = sorted(rows["ev"], key=lambda r: -r["v"])[:2]
    return counter_of([(i + 1, r["event_time"], r["k"], r["v"]) for i, r in enumerate(ranked)])


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=3))
@SETTINGS
def test_top_n_is_split_independent(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT * FROM (SELECT row_number() OVER (PARTITION BY 1 ORDER BY v DESC) AS place, "
        "event_time, k, v FROM ev) WHERE place <= 2"
    )
    rows = _events(seed, 30)
    for i, r in enumerate(rows):  # distinct scores: the top-2 is then unambiguous
        r["v"] = r["v"] * 100 + i
    _check(engine, tmp_path, {"ev": (EVENTS, rows)}, [(None, query)], cuts, _top2_reference)


def _running_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    totals: dict[str, int] = collections.defaultdict(int)
    out = []
    for r in sorted(rows["ev"], key=lambda r: r["event_time"]):
        totals[r["k"]] += r["v"]
        out.append((r["event_time"], r["k"], r["v"], totals[r["k"]]))
    return counter_of(out)


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=3))
@SETTINGS
def test_over_unbounded_preceding_continues_across_runs(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT event_time, k, v, sum(v) OVER (PARTITION BY k ORDER BY event_time "
        "ROWS UNBOUNDED PRECEDING) AS total FROM ev"
    )
    data = {"ev": (EVENTS, _events(seed, 30, distinct_times=True))}
    _check(engine, tmp_path, data, [(None, query)], cuts, _running_reference, append_only=True)


def _bounded_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    recent: dict[str, list[int]] = collections.defaultdict(list)
    out = []
    for r in sorted(rows["ev"], key=lambda r: r["event_time"]):
        window = recent[r["k"]]
        window.append(r["v"])
        out.append((r["event_time"], r["k"], sum(window[-3:])))
    return counter_of(out)


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=3))
@SETTINGS
def test_over_bounded_rows_continue_across_runs(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT event_time, k, sum(v) OVER (PARTITION BY k ORDER BY event_time "
        "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS recent FROM ev"
    )
    data = {"ev": (EVENTS, _events(seed, 30, distinct_times=True))}
    _check(engine, tmp_path, data, [(None, query)], cuts, _bounded_reference, append_only=True)


# -- joins ------------------------------------------------------------------------------------

ORDERS = pa.schema([("event_time", TS), ("order_id", pa.int64()), ("quantity", pa.int64())])
SHIPMENTS = pa.schema([("event_time", TS), ("order_id", pa.int64()), ("quantity", pa.int64())])


def _orders(seed: int) -> tuple[list[Row], list[Row]]:
    rnd = random.Random(seed)
    orders, shipments = [], []
    for i in range(12):
        t = T0 + dt.timedelta(hours=6 * i)
        orders.append({"event_time": t, "order_id": i, "quantity": rnd.randint(1, 9)})
        for _ in range(rnd.randint(0, 2)):
            delay = dt.timedelta(hours=rnd.choice([0, 5, 20, 47, 49, 70]))
            shipments.append(
                {"event_time": t + delay, "order_id": i, "quantity": rnd.randint(1, 5)}
            )
    shipments.sort(key=lambda r: r["event_time"])
    return orders, shipments


def _interval_join_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    out = []
    for o in rows["orders"]:
        hits = [
            s
            for s in rows["shipments"]
            if s["order_id"] == o["order_id"]
            and o["event_time"] <= s["event_time"] <= o["event_time"] + dt.timedelta(days=2)
        ]
        if not hits:
            out.append((o["event_time"], o["order_id"], None, None))
        out.extend((o["event_time"], o["order_id"], s["event_time"], s["quantity"]) for s in hits)
    return counter_of(out)


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 12), max_size=3))
@SETTINGS
def test_interval_left_join_is_split_independent(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT o.event_time, o.order_id, s.event_time AS shipped_time, s.quantity AS shipped "
        "FROM orders AS o LEFT JOIN shipments AS s ON o.order_id = s.order_id AND "
        "s.event_time BETWEEN o.event_time AND o.event_time + INTERVAL '2' DAY"
    )
    orders, shipments = _orders(seed)
    data = {"orders": (ORDERS, orders), "shipments": (SHIPMENTS, shipments)}
    _check(engine, tmp_path, data, [(None, query)], cuts, _interval_join_reference)


RATES = pa.schema([("event_time", TS), ("currency", pa.string()), ("rate", pa.int64())])
TRADES = pa.schema([("event_time", TS), ("currency", pa.string()), ("amount", pa.int64())])


def _trades(seed: int) -> tuple[list[Row], list[Row]]:
    rnd = random.Random(seed)
    rates = [
        {"event_time": T0 + dt.timedelta(hours=h), "currency": c, "rate": rnd.randint(1, 9)}
        for h in range(1, 30, 3)
        for c in ("EUR", "CAD")
        if rnd.random() < 0.7
    ]
    trades = [
        {
            "event_time": T0 + dt.timedelta(hours=h, minutes=30),
            "currency": rnd.choice(["EUR", "CAD", "JPY"]),
            "amount": h,
        }
        for h in range(0, 30)
    ]
    return rates, trades


def _as_of_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    out = []
    for t in rows["trades"]:
        valid = [
            r
            for r in rows["rates"]
            if r["currency"] == t["currency"] and r["event_time"] <= t["event_time"]
        ]
        rate = max(valid, key=lambda r: r["event_time"])["rate"] if valid else None
        out.append(
            (
                t["event_time"],
                t["currency"],
                t["amount"],
                None if rate is None else t["amount"] * rate,
            )
        )
    return counter_of(out)


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=3))
@SETTINGS
def test_temporal_left_join_is_split_independent(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    query = (
        "SELECT t.event_time, t.currency, t.amount, t.amount * r.rate AS converted "
        "FROM trades AS t LEFT JOIN rates FOR SYSTEM_TIME AS OF t.event_time AS r "
        "ON t.currency = r.currency"
    )
    rates, trades = _trades(seed)
    data = {"trades": (TRADES, trades), "rates": (RATES, rates)}
    _check(
        engine,
        tmp_path,
        data,
        [(None, query)],
        cuts,
        _as_of_reference,
        temporal=[("rates", ["currency"])],
    )


# -- refusals and state -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        (
            "SELECT SESSION_START(event_time, INTERVAL '1' HOUR) AS event_time, count(*) AS n "
            "FROM ev GROUP BY SESSION(event_time, INTERVAL '1' HOUR)",
            "session windows",
        ),
        (
            "SELECT window(event_time, '1 month').start AS event_time, count(*) AS n FROM ev "
            "GROUP BY window(event_time, '1 month')",
            "MONTH windows",
        ),
        (
            "SELECT e.event_time FROM ev AS e JOIN ev FOR SYSTEM_TIME AS OF e.event_time AS x "
            "ON e.k = x.k",
            "temporalTables",
        ),
        (
            "SELECT max(event_time) AS event_time, k, max(op) AS op FROM ev GROUP BY k",
            "operation type column",
        ),
    ],
)
def test_unsupported_constructs_are_refused_by_name(
    engine: EngineClient, tmp_path: Path, query: str, needle: str
) -> None:
    from fbs.model.engine import TransformResponseInvalidQuery

    ev = InputStream("ev", EVENTS, tmp_path / "in")
    ev.append(_events(1, 5))
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    work = tmp_path / "w"
    work.mkdir()
    result = engine.execute_transform(runner.request(work))
    assert isinstance(result, TransformResponseInvalidQuery), result
    assert needle in result.message
    assert "\tat " not in result.message  # no Java stack trace


def test_rerun_of_a_step_is_idempotent(engine: EngineClient, tmp_path: Path) -> None:
    """Running the same step twice from the same checkpoint gives the same records."""
    import pyarrow.parquet as pq

    query = "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    rows = _events(7, 20)
    ev.append(rows[:10])
    runner.run()
    ev.append(rows[10:])
    first, second = tmp_path / "a", tmp_path / "b"
    for work in (first, second):
        work.mkdir()
        saved = (ev.pending, getattr(ev, "_new_watermark", False))
        result = engine.execute_transform(runner.request(work))
        ev.pending, ev._new_watermark = saved
        assert type(result).__name__ == "TransformResponseSuccess", result
    a, b = pq.read_table(first / "data"), pq.read_table(second / "data")
    assert a.num_rows > 0
    assert a.to_pylist() == b.to_pylist()


def test_new_query_takes_over_from_the_old_state(engine: EngineClient, tmp_path: Path) -> None:
    """Migrate Query: after a new SetTransform the folded output is the new query's answer
    over all input, reached by retracting and appending (no gap, no duplicate). (A
    changelog query: HAVING keeps its input rows; accumulator states:
    tests/engine/test_streaming_accumulate.py.)"""
    old = (
        "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k "
        "HAVING count(*) > 0"
    )
    new = (
        "SELECT max(event_time) AS event_time, k, sum(v) AS n FROM ev GROUP BY k "
        "HAVING count(*) > 0"
    )
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, old)], tmp_path / "out")
    rows = _events(11, 24)
    ev.append(rows[:8])
    runner.run()
    ev.append(rows[8:16])
    runner.run()
    runner.steps = [(None, new)]
    migrated = runner.run()  # no new input: only the query changed
    assert 1 in migrated.column("op").to_pylist()  # the old answers are retracted
    ev.append(rows[16:])
    runner.run()
    expected = collections.Counter(
        (
            max(r["event_time"] for r in rows if r["k"] == k),
            k,
            sum(r["v"] for r in rows if r["k"] == k),
        )
        for k in {r["k"] for r in rows}
    )
    assert fold(runner.outputs) == expected


def test_input_retractions_are_folded_before_a_stateful_query(
    engine: EngineClient, tmp_path: Path
) -> None:
    """An input changelog (-R, -C/+C) is the query's input current state: a count over a
    snapshot-merged root counts what the root holds, not its history."""
    query = "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    t = [T0 + dt.timedelta(minutes=m) for m in range(6)]
    a1, a2, b1 = (
        {"event_time": t[0], "k": "a", "v": 1},
        {"event_time": t[1], "k": "a", "v": 2},
        {"event_time": t[2], "k": "b", "v": 5},
    )
    ev.append([a1, a2, b1])
    runner.run()
    # -R a1; -C/+C b1 -> b 7.
    ev.append([{**a1, "op": 1}, {**b1, "op": 2}, {**b1, "v": 7, "op": 3}])
    runner.run()
    assert fold(runner.outputs) == counter_of([(t[1], "a", 1, 2), (t[2], "b", 1, 7)])
    # A window query drops a retraction of a row whose window was already emitted.
    wq = (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n "
        "FROM ev GROUP BY window(event_time, '1 hour')"
    )
    ev2 = InputStream("ev", EVENTS, tmp_path / "in2")
    win = StreamRunner(engine, [ev2], [(None, wq)], tmp_path / "out2")
    early = {"event_time": T0, "k": "a", "v": 1}
    ev2.append([early, {"event_time": T0 + 2 * HOUR, "k": "a", "v": 1}])
    assert [r["n"] for r in win.run().to_pylist()] == [1]  # 00:00 window closed
    late_open = {"event_time": T0 + 2 * HOUR + dt.timedelta(minutes=5), "k": "b", "v": 3}
    ev2.append([{**early, "op": 1}, late_open, {**late_open, "op": 1}])
    ev2.append([], watermark_ms=int((T0 + 4 * HOUR).timestamp() * 1000))
    out = win.run().to_pylist()
    # 02:00 window: the retracted row does not count; the late -R changed nothing.
    assert [(r["event_time"], r["n"]) for r in out] == [(T0 + 2 * HOUR, 1)]


# -- stateless queries over changelog inputs ----------------------------------------------------


def _changelog(seed: int, n: int, *, corrections: bool = True) -> list[Row]:
    """Appends, retractions of live rows (-R) and corrections (-C then +C) in a random mix:
    a well-formed RFC-015 changelog, as a snapshot-merged root writes; without
    ``corrections``, appends and retractions only, as a GROUP BY writes."""
    rnd = random.Random(seed)
    live: list[Row] = []
    out: list[Row] = []
    for i, r in enumerate(_events(seed, n)):
        roll = rnd.random()
        if live and roll < 0.25:
            old = live.pop(rnd.randrange(len(live)))
            out.append({**old, "op": 1})
        elif corrections and live and roll < 0.45:
            old = live.pop(rnd.randrange(len(live)))
            new = {**old, "v": old["v"] + 1000 + i}
            out += [{**old, "op": 2}, {**new, "op": 3}]
            live.append(new)
        else:
            live.append(r)
            out.append({**r, "op": 0})
    return out


def _fold_input(rows: list[Row]) -> list[Row]:
    state = collections.Counter(
        (r["event_time"], r["k"], r["v"]) for r in rows if r.get("op", 0) in (0, 3)
    )
    state.subtract((r["event_time"], r["k"], r["v"]) for r in rows if r.get("op", 0) in (1, 2))
    return [{"event_time": t, "k": k, "v": v} for (t, k, v), n in state.items() for _ in range(n)]


def _filter_reference(rows: dict[str, list[Row]]) -> collections.Counter[tuple[Any, ...]]:
    return counter_of(
        [
            (r["event_time"], r["k"].upper(), r["v"] * 2)
            for r in _fold_input(rows["ev"])
            if r["v"] > 100
        ]
    )


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=3))
@SETTINGS
def test_stateless_query_keeps_input_retractions(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    """A filter + projection over a changelog: each output row carries its input row's op,
    so the folded output is the query over the folded input, however the input is split
    (a retraction read as a plain row once became one more append). `fold` reads the
    output in order: every removal must find its row live."""
    query = "SELECT event_time, upper(k) AS k, v * 2 AS v2 FROM ev WHERE v > 100"
    data = {"ev": (EVENTS, _changelog(seed, 40))}
    _check(engine, tmp_path, data, [(None, query)], cuts, _filter_reference)


def test_stateless_query_selecting_op_writes_its_own(engine: EngineClient, tmp_path: Path) -> None:
    """A query that selects ``op`` itself is written as it says (no per-op runs)."""
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    query = "SELECT op, event_time, k FROM ev"
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    a = {"event_time": T0, "k": "a", "v": 1}
    ev.append([a, {**a, "op": 1}, {**a, "k": "b"}])
    out = runner.run()
    assert out.column("op").to_pylist() == [0, 1, 0]
    assert out.column("k").to_pylist() == ["a", "a", "b"]


def test_an_input_without_rows_yet_is_read_empty_on_the_next_run(
    engine: EngineClient, tmp_path: Path
) -> None:
    """A stateful query over two inputs, one of them with a schema but no rows yet on the
    first run: the second run reads that input's new rows alone (no retained rows; its
    empty retained folder is not read as Parquet, from which Spark cannot infer a schema)
    (the checkpoint archive keeps files only: an empty retained folder listed in state.json
    would make the next run refuse the state as damaged)."""
    query = (
        "SELECT max(event_time) AS event_time, k, count(*) AS n "
        "FROM (SELECT event_time, k FROM a UNION ALL SELECT event_time, k FROM b) GROUP BY k"
    )
    a = InputStream("a", EVENTS, tmp_path / "a")
    b = InputStream("b", EVENTS, tmp_path / "b")
    runner = StreamRunner(engine, [a, b], [(None, query)], tmp_path / "out")
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    a.append([{"event_time": t0, "k": "x", "v": 1}])
    runner.run()  # b has a schema but no rows yet
    b.append([{"event_time": t0, "k": "x", "v": 2}])  # not after a's watermark
    assert [(r["op"], r["k"], r["n"]) for r in runner.run().to_pylist()] == [
        (1, "x", 1),
        (0, "x", 2),
    ]
    assert fold(runner.outputs) == counter_of([(t0, "x", 2)])


@pytest.mark.parametrize(
    ("corrections", "statistics"),
    [(False, True), (True, False)],
    ids=["retractions-only", "no-stats"],
)
def test_stateless_query_over_a_changelog_of_any_shape(
    engine: EngineClient, tmp_path: Path, corrections: bool, statistics: bool
) -> None:
    """Retractions without corrections (what a GROUP BY writes: op 0 and 1 only), and
    slices written without column statistics (their ops unknown: every type is looked
    for): the folded output is still the query over the folded input."""
    query = "SELECT event_time, upper(k) AS k, v * 2 AS v2 FROM ev WHERE v > 100"
    rows = _changelog(31, 40, corrections=corrections)
    assert {r["op"] for r in rows} == ({0, 1, 2, 3} if corrections else {0, 1})
    ev = InputStream("ev", EVENTS, tmp_path / "in", statistics=statistics)
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    for part in _split(rows, [13, 29]):
        ev.append(part)
        runner.run()
    assert fold(runner.outputs) == _filter_reference({"ev": rows})
