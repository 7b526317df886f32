"""Per-group accumulators: which queries get them, and their merge folds to the batch answer.

No Spark here: the partial accumulators a run's new rows give are computed in Python
(`_partial`, what `partial_sql` asks Spark for), then merged by
`engine.streaming.accumulators.merge_partials` run after run over random splits and
random watermarks. After every run the folded changelog must equal the query's answer
over the rows so far, restricted to final rows (event time at or before the gate, or
NULL); the same state and partials must give the same bytes (replay).
"""

from __future__ import annotations

import collections
import datetime as dt
import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InvalidQuery
from engine.streaming.accumulate import (
    AccumulatorQuery,
    accumulator_types_ok,
    parse_accumulator_query,
    partial_sql,
)
from engine.streaming.accumulators import merge_partials
from tests.engine.streaming_helpers import fold

T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)
TS = pa.timestamp("ms", tz="UTC")
Row = dict[str, Any]

# -- which queries keep accumulators ----------------------------------------------------------

ACCEPTED = [
    "SELECT max(event_time) AS event_time, k, count(*) AS n FROM ev GROUP BY k",
    "select k, MAX(event_time) event_time, sum(v) s, avg(v), min(v), count(v) from ev group by k",
    "SELECT max(event_time) AS event_time, count(1) AS n, sum(v) AS s FROM ev",
    "SELECT max(e.event_time) AS event_time, e.k, count(*) FROM ev AS e WHERE e.v > 3 GROUP BY e.k",
    'SELECT `k`, "j", max(event_time) AS event_time FROM ev GROUP BY j, k;',
    "SELECT max(event_time) AS event_time, k FROM ev WHERE v >= 3 AND k <> 'x' GROUP BY k",
]
REFUSED = [
    # expressions around aggregates or as keys, and shapes beyond one aggregation
    "SELECT max(event_time) AS event_time, k, count(*) + 1 AS n FROM ev GROUP BY k",
    "SELECT max(event_time) AS event_time, upper(k) AS k FROM ev GROUP BY upper(k)",
    "SELECT max(event_time) AS event_time, k, count(DISTINCT v) FROM ev GROUP BY k",
    "SELECT DISTINCT max(event_time) AS event_time, k FROM ev GROUP BY k",
    "SELECT max(event_time) AS event_time, k FROM ev GROUP BY k HAVING count(*) > 1",
    "SELECT max(event_time) AS event_time, k FROM ev GROUP BY 2",
    "SELECT max(event_time) AS event_time, k FROM ev GROUP BY k ORDER BY k LIMIT 3",
    "SELECT max(event_time) AS event_time, k FROM ev GROUP BY ROLLUP(k)",
    "SELECT max(a.event_time) AS event_time, a.k FROM ev a JOIN ev b ON a.k = b.k GROUP BY a.k",
    "SELECT max(event_time) AS event_time, k FROM ev, other GROUP BY k",
    "SELECT max(event_time) AS event_time, k FROM (SELECT * FROM ev) GROUP BY k",
    "SELECT max(event_time) AS event_time, k FROM ev WHERE v > (SELECT 1) GROUP BY k",
    "SELECT max(event_time) AS event_time, k, v FROM ev GROUP BY k",  # v is not a key
    "SELECT event_time, k FROM ev GROUP BY event_time, k",  # no aggregate: a DISTINCT
    "SELECT max(event_time) AS event_time, k, collect_list(v) FROM ev GROUP BY k",
    "SELECT max(event_time) AS event_time, k, sum(v) FILTER (WHERE v > 0) FROM ev GROUP BY k",
    "SELECT max(event_time) AS event_time, k, sum(v) OVER () FROM ev GROUP BY k",
    "SELECT max(event_time) AS event_time, k, count(*) FROM ev GROUP BY k, k",
    "SELECT event_time, k FROM ev",  # not an aggregation at all
    "SELECT max(event_time) AS event_time, k FROM ev GROUP BY k UNION ALL SELECT 1, 'a'",
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_decomposable_group_by_gets_accumulators(sql: str) -> None:
    assert parse_accumulator_query(sql) is not None


@pytest.mark.parametrize("sql", REFUSED)
def test_other_shapes_keep_the_changelog_state(sql: str) -> None:
    assert parse_accumulator_query(sql) is None


def test_partial_query_groups_the_new_rows_as_the_query_does() -> None:
    q = parse_accumulator_query(
        "SELECT max(e.event_time) AS event_time, e.k, avg(v) AS a, count(*) "
        "FROM ev AS e WHERE e.v >= 3 -- positive\n AND e.k <> 'x' -- named\n GROUP BY e.k"
    )
    assert q is not None
    assert partial_sql(q) == (
        "SELECT e.k AS __odf_k0, count(*) AS __odf_nrows, max(e.event_time) AS __odf_a0, "
        "count(e.event_time) AS __odf_n0, sum(v) AS __odf_a1, count(v) AS __odf_n1, "
        "count(*) AS __odf_a2 FROM ev AS e WHERE e.v >= 3 -- positive\n"
        " AND e.k <> 'x' GROUP BY e.k"
    )
    glob = parse_accumulator_query("SELECT max(event_time) AS event_time, count(1) FROM ev")
    assert glob is not None
    assert partial_sql(glob) == (
        "SELECT count(*) AS __odf_nrows, max(event_time) AS __odf_a0, "
        "count(event_time) AS __odf_n0, count(1) AS __odf_a1 FROM ev"
    )
    # Rows that take back an earlier one count -1; a min/max also gives the extreme of
    # the values taken back and the net count of the run's rows holding it.
    back = partial_sql(glob, "op IN (1, 2)")
    assert back == (
        "SELECT CAST(coalesce(sum(__odf_sign), 0) AS BIGINT) AS __odf_nrows, "
        "max(CASE WHEN __odf_sign > 0 THEN __odf_v0 END) AS __odf_a0, "
        "max(__odf_w0) AS __odf_r0, "
        "CAST(coalesce(sum(CASE WHEN __odf_v0 = __odf_w0 THEN __odf_sign ELSE 0 END), 0) "
        "AS BIGINT) AS __odf_m0, "
        "CAST(coalesce(sum(CASE WHEN __odf_v0 IS NULL THEN 0 ELSE __odf_sign END), 0) "
        "AS BIGINT) AS __odf_n0, "
        "CAST(coalesce(sum(__odf_sign), 0) AS BIGINT) AS __odf_a1 "
        "FROM (SELECT CASE WHEN (op IN (1, 2)) THEN -1 ELSE 1 END AS __odf_sign, "
        "event_time AS __odf_v0, "
        "max(CASE WHEN (op IN (1, 2)) THEN event_time END) OVER () AS __odf_w0 FROM ev)"
    )


def test_types_that_keep_accumulators_exact() -> None:
    q = parse_accumulator_query(
        "SELECT max(event_time) AS event_time, k, sum(v), min(w), count(x) FROM ev GROUP BY k"
    )
    assert q is not None
    assert accumulator_types_ok(q, ["string"], ["timestamp", "bigint", "date", "double"])
    # a float or decimal sum depends on the order of additions or widens its type
    assert not accumulator_types_ok(q, ["string"], ["timestamp", "double", "date", None])
    assert not accumulator_types_ok(q, ["string"], ["timestamp", "decimal(10,2)", "date", None])
    # float keys and min/max: -0.0 and NaN have rules of their own
    assert not accumulator_types_ok(q, ["double"], ["timestamp", "bigint", "date", None])
    assert not accumulator_types_ok(q, ["string"], ["timestamp", "bigint", "float", None])
    assert not accumulator_types_ok(q, ["array<int>"], ["timestamp", "bigint", "date", None])
    assert not accumulator_types_ok(q, [], ["timestamp", "bigint", "date", None])


# -- the merge over random splits vs a batch reference ----------------------------------------

GROUPED = (
    "SELECT k, max(event_time) AS event_time, count(*) AS n, count(v) AS nv, sum(v) AS s, "
    "avg(v) AS a, min(v) AS lo, max(v) AS hi, min(k) AS kk FROM ev GROUP BY k"
)
GLOBAL = "SELECT max(event_time) AS event_time, count(*) AS n, sum(v) AS s, avg(v) AS a FROM ev"


def _names(sql: str) -> list[str]:
    return [c.split(" AS ")[-1].strip() for c in sql.split(" FROM ")[0][7:].split(", ")]


def _aggregate(kind: str, arg: str, rows: Sequence[Row]) -> Any:
    if kind == "COUNT":
        return len(rows) if arg in ("*", "1") else sum(r[arg] is not None for r in rows)
    values = [r[arg] for r in rows if r[arg] is not None]
    if not values:
        return None
    if kind == "SUM":
        return sum(values)
    return min(values) if kind == "MIN" else max(values)


def _sign(r: Row) -> int:
    return -1 if r.get("op", 0) in (1, 2) else 1


def _partial(q: AccumulatorQuery, rows: Sequence[Row]) -> pa.Table:
    """What `partial_sql` gives over ``rows`` (GROUP BY: NULL keys are one group; a row
    with ``op`` 1 or 2 takes one back)."""
    groups: dict[Any, list[Row]] = collections.defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in q.keys)].append(r)
    if not q.keys and not groups:
        groups[()] = []  # a global aggregate has its one row over no rows too
    cols: dict[str, list[Any]] = collections.defaultdict(list)
    for key, g in groups.items():
        for i, part in enumerate(key):
            cols[f"__odf_k{i}"].append(part)
        cols["__odf_nrows"].append(sum(_sign(r) for r in g))
        added = [r for r in g if _sign(r) > 0]
        taken = [r for r in g if _sign(r) < 0]
        for j, agg in enumerate(q.aggregates):
            a = agg.arg
            counted = sum(_sign(r) for r in g if a in ("*", "1") or r[a] is not None)
            if agg.kind == "COUNT":
                cols[f"__odf_a{j}"].append(counted)
                continue
            if agg.kind in ("SUM", "AVG"):
                values = [_sign(r) * r[a] for r in g if r[a] is not None]
                cols[f"__odf_a{j}"].append(sum(values) if values else None)
            else:
                back = _aggregate(agg.kind, a, taken)
                cols[f"__odf_a{j}"].append(_aggregate(agg.kind, a, added))
                cols[f"__odf_r{j}"].append(back)
                cols[f"__odf_m{j}"].append(sum(_sign(r) for r in g if r[a] == back))
            cols[f"__odf_n{j}"].append(counted)
    types = {"k": pa.string(), "v": pa.int64(), "event_time": TS}
    fields = [pa.field(f"__odf_k{i}", types[k]) for i, k in enumerate(q.keys)]
    fields.append(pa.field("__odf_nrows", pa.int64()))
    for j, agg in enumerate(q.aggregates):
        count = agg.kind == "COUNT"
        fields.append(pa.field(f"__odf_a{j}", pa.int64() if count else types[agg.arg]))
        if agg.kind in ("MIN", "MAX"):
            fields.append(pa.field(f"__odf_r{j}", types[agg.arg]))
            fields.append(pa.field(f"__odf_m{j}", pa.int64()))
        if not count:
            fields.append(pa.field(f"__odf_n{j}", pa.int64()))
    schema = pa.schema(fields)
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema}, schema=schema)


def _folded(rows: Sequence[Row]) -> list[Row]:
    """The rows left once every retraction took back one earlier equal row."""
    held: list[Row] = []
    for r in rows:
        data = {c: r[c] for c in ("event_time", "k", "v")}
        if _sign(r) > 0:
            held.append(data)
        else:
            held.remove(data)
    return held


def _answer(
    q: AccumulatorQuery, rows: Sequence[Row], gate_ms: int | None, et_index: int
) -> collections.Counter[Any]:
    """The batch answer over the rows ``rows`` leave, final rows only."""
    full = _partial(q, _folded(rows)).to_pylist()
    out: collections.Counter[Any] = collections.Counter()
    for g in full:
        row = []
        for item in q.items:
            if item.key:
                row.append(g[f"__odf_k{item.index}"])
                continue
            j, kind = item.index, q.aggregates[item.index].kind
            acc = g[f"__odf_a{j}"]
            if kind == "AVG":
                n = g[f"__odf_n{j}"]
                acc = None if n == 0 else float(acc) / float(n)
            row.append(acc)
        et = row[et_index]
        if gate_ms is None or et is None or et <= T0 + dt.timedelta(milliseconds=gate_ms):
            out[tuple(row)] += 1
    return out


def _rows(seed: int, n: int) -> list[Row]:
    import random

    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        rows.append(
            {
                "event_time": T0 + dt.timedelta(minutes=rnd.choice([0, 1, 5, 30]) * i),
                "k": rnd.choice(["a", "b", "c", None]),
                "v": rnd.choice([None, *range(-50, 50)]),
            }
        )
    return rows


def _run(sql: str, rows: list[Row], cuts: list[int], gates: list[int | None]) -> list[pa.Table]:
    """Run the merge over ``rows`` split at ``cuts``, checking the fold after each run."""
    q = parse_accumulator_query(sql)
    assert q is not None
    names = _names(sql)
    state: pa.Table | None = None
    outputs: list[pa.Table] = []
    points = [*sorted(min(c, len(rows)) for c in cuts), len(rows)]
    start = 0
    gate: int | None = None
    for i, p in enumerate(points):
        if i < len(gates) and gates[i] is not None and (gate is None or gates[i] > gate):  # type: ignore[operator]
            gate = gates[i]
        if i == len(points) - 1:
            gate = 10**12  # the last run closes everything
        run = merge_partials(
            q,
            state,
            _partial(q, rows[start:p]),
            names,
            "event_time",
            None if gate is None else (T0_MS + gate) * 1000,
        )
        state = _roundtrip(run.state)
        outputs.append(run.changes)
        expected = _answer(q, rows[:p], gate, names.index("event_time"))
        assert fold(outputs) == expected, f"run {i}"
        start = p
    return outputs


def _roundtrip(table: pa.Table) -> pa.Table:
    """``table`` written to Parquet and read back, as a checkpoint keeps it."""
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return pq.read_table(io.BytesIO(buf.getvalue()))


SPLITS = settings(max_examples=60, deadline=None, derandomize=True)


@given(
    seed=st.integers(0, 10**6),
    cuts=st.lists(st.integers(0, 40), max_size=5),
    gates=st.lists(st.one_of(st.none(), st.integers(0, 40 * 30 * 60_000)), max_size=6),
)
@SPLITS
def test_grouped_accumulators_fold_to_the_batch_answer(
    seed: int, cuts: list[int], gates: list[int | None]
) -> None:
    rows = _rows(seed, 40)
    split = _run(GROUPED, rows, cuts, gates)
    one = _run(GROUPED, rows, [], [])
    assert fold(split) == fold(one)


@given(
    seed=st.integers(0, 10**6),
    cuts=st.lists(st.integers(0, 20), max_size=4),
    gates=st.lists(st.one_of(st.none(), st.integers(0, 20 * 30 * 60_000)), max_size=5),
)
@SPLITS
def test_global_accumulator_folds_to_the_batch_answer(
    seed: int, cuts: list[int], gates: list[int | None]
) -> None:
    _run(GLOBAL, _rows(seed, 20), cuts, gates)


def test_changed_groups_are_corrected_in_pairs_new_groups_appended() -> None:
    sql = "SELECT k, max(event_time) AS event_time, count(*) AS n FROM ev GROUP BY k"
    rows = [{"event_time": T0, "k": k, "v": 1} for k in ("b", "a", "b", "c")]
    outs = _run(sql, rows, [2], [])
    assert outs[0].to_pylist() == [
        {"op": 0, "k": "a", "event_time": T0, "n": 1},
        {"op": 0, "k": "b", "event_time": T0, "n": 1},
    ]
    assert outs[1].to_pylist() == [  # "a" unchanged: nothing
        {"op": 2, "k": "b", "event_time": T0, "n": 1},
        {"op": 3, "k": "b", "event_time": T0, "n": 2},
        {"op": 0, "k": "c", "event_time": T0, "n": 1},
    ]


def test_a_row_after_the_gate_waits_and_its_old_row_is_retracted() -> None:
    sql = "SELECT k, max(event_time) AS event_time, count(*) AS n FROM ev GROUP BY k"
    q = parse_accumulator_query(sql)
    assert q is not None
    names = _names(sql)
    early = [{"event_time": T0, "k": "a", "v": 1}]
    late = [{"event_time": T0 + dt.timedelta(hours=2), "k": "a", "v": 1}]
    gate = int(T0.timestamp() * 1e6) + 3_600_000_000
    first = merge_partials(q, None, _partial(q, early), names, "event_time", gate)
    second = merge_partials(q, first.state, _partial(q, late), names, "event_time", gate)
    assert second.changes.to_pylist() == [{"op": 1, "k": "a", "event_time": T0, "n": 1}]
    third = merge_partials(q, second.state, _partial(q, []), names, "event_time", None)
    assert third.changes.to_pylist() == [
        {"op": 0, "k": "a", "event_time": T0 + dt.timedelta(hours=2), "n": 2}
    ]


def test_replay_gives_the_same_bytes() -> None:
    """A run is a pure function of the previous state and the new rows."""
    q = parse_accumulator_query(GROUPED)
    assert q is not None
    names = _names(GROUPED)
    rows = _rows(3, 30)
    first = merge_partials(q, None, _partial(q, rows[:12]), names, "event_time", None)
    state = _roundtrip(first.state)
    runs = [
        merge_partials(q, state, _partial(q, rows[12:]), names, "event_time", 10**15)
        for _ in range(2)
    ]
    assert _roundtrip(runs[0].changes).equals(_roundtrip(runs[1].changes))
    assert _bytes(runs[0].state) == _bytes(runs[1].state)
    assert _bytes(runs[0].changes) == _bytes(runs[1].changes)


def _bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_a_sum_beyond_64_bits_is_refused_not_wrapped() -> None:
    sql = "SELECT max(event_time) AS event_time, sum(v) AS s FROM ev"
    q = parse_accumulator_query(sql)
    assert q is not None
    big = [{"event_time": T0, "k": "a", "v": 2**62}]
    run = merge_partials(q, None, _partial(q, big), _names(sql), "event_time", None)
    with pytest.raises(pa.ArrowInvalid):
        merge_partials(q, run.state, _partial(q, big), _names(sql), "event_time", None)


# -- inputs that take rows back ---------------------------------------------------------------

RETRACTABLE = (
    "SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS s, avg(v) AS a, "
    "max(event_time) AS event_time FROM ev GROUP BY k"
)
SUMS_ONLY = (
    "SELECT k, event_time, count(*) AS n, count(v) AS nv, sum(v) AS s, avg(v) AS a "
    "FROM ev GROUP BY k, event_time"
)


def _changelog(seed: int, n: int, *, short_of_max: bool = False) -> list[Row]:
    """Appends, retractions of held rows (-R) and corrections (-C then +C), mixed;
    ``short_of_max``: only rows older than their group's newest are taken back."""
    import random

    rnd = random.Random(seed)
    held: list[Row] = []
    out: list[Row] = []
    for i in range(n):
        pick = rnd.random()
        newest = {r["k"]: r["event_time"] for r in sorted(held, key=lambda r: r["event_time"])}
        older = [j for j, r in enumerate(held) if r["event_time"] < newest[r["k"]]]
        choices = older if short_of_max else list(range(len(held)))
        if choices and pick < 0.25:
            old = held.pop(rnd.choice(choices))
            out.append({**old, "op": 1})
        elif choices and pick < 0.45:
            old = held.pop(rnd.choice(choices))
            new = {**old, "v": rnd.choice([None, *range(-50, 50)])}
            out += [{**old, "op": 2}, {**new, "op": 3}]
            held.append(new)
        else:
            row = {
                "event_time": T0 + dt.timedelta(minutes=i // 4),
                "k": rnd.choice(["a", "b", None]),
                "v": rnd.choice([None, *range(-50, 50)]),
            }
            out.append({**row, "op": 0})
            held.append(row)
    return out


def _run_or_refuse(sql: str, rows: list[Row], cuts: list[int]) -> bool:
    """`_run` without gates; False if a run refused (`InvalidQuery`) instead."""
    try:
        _run(sql, rows, cuts, [])
    except InvalidQuery:
        return False
    return True


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=5))
@SPLITS
def test_counts_and_sums_take_rows_back_exactly(seed: int, cuts: list[int]) -> None:
    """Counts, sums and averages subtract what the input takes back: never refused, and
    after every run the fold is the answer over the rows the input holds."""
    _run(SUMS_ONLY, _changelog(seed, 40), cuts, [])


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=5))
@SPLITS
def test_a_max_taking_rows_back_answers_right_or_refuses(seed: int, cuts: list[int]) -> None:
    """A max keeps only its extreme: after every run the fold is the answer (`_run`
    checks it), unless the run refused by name. A wrong answer is never emitted."""
    _run_or_refuse(RETRACTABLE, _changelog(seed, 40), cuts)


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=5))
@SPLITS
def test_a_max_takes_back_rows_short_of_it_exactly(seed: int, cuts: list[int]) -> None:
    """Taking back rows older than a group's newest leaves its max known: never
    refused, and the fold is the answer after every run."""
    _run(RETRACTABLE, _changelog(seed, 40, short_of_max=True), cuts, [])


def test_a_max_survives_retractions_short_of_it() -> None:
    """Corrections of older rows (a newer max is kept) and a group emptied entirely
    (its row is retracted, the group is gone) need no value the state lacks."""
    a0 = {"event_time": T0, "k": "a", "v": 1}
    a1 = {"event_time": T0 + dt.timedelta(hours=1), "k": "a", "v": 2}
    b0 = {"event_time": T0, "k": "b", "v": 5}
    rows = [a0, a1, b0, {**a0, "op": 2}, {**a0, "v": 9, "op": 3}, {**b0, "op": 1}]
    outs = _run(RETRACTABLE, rows, [3], [])
    assert [r["op"] for r in outs[1].to_pylist()] == [2, 3, 1]  # a corrected, b gone


def test_a_correction_keeping_the_max_is_taken() -> None:
    """-C/+C of the newest row with the same event time: the max is still held."""
    a0 = {"event_time": T0, "k": "a", "v": 1}
    a1 = {"event_time": T0 + dt.timedelta(hours=1), "k": "a", "v": 2}
    rows = [a0, a1, {**a1, "op": 2}, {**a1, "v": 3, "op": 3}]
    outs = _run(RETRACTABLE, rows, [2], [])
    assert [r["op"] for r in outs[1].to_pylist()] == [2, 3]


def test_taking_back_the_max_itself_is_refused() -> None:
    a0 = {"event_time": T0, "k": "a", "v": 1}
    a1 = {"event_time": T0 + dt.timedelta(hours=1), "k": "a", "v": 2}
    with pytest.raises(InvalidQuery, match=r"max\(event_time\).*keeps only"):
        _run(RETRACTABLE, [a0, a1, {**a1, "op": 1}], [2], [])


def test_taking_back_a_row_never_added_is_refused() -> None:
    a0 = {"event_time": T0, "k": "a", "v": 1}
    with pytest.raises(InvalidQuery, match="never added"):
        _run(SUMS_ONLY, [a0, {**a0, "op": 1}, {**a0, "op": 1}], [1], [])


def test_an_unchanged_group_with_a_null_emits_nothing() -> None:
    """Two NULLs are equal: a group whose row has a NULL and did not change (a run that
    touched another group) is not retracted and appended again."""
    sql = "SELECT k, max(event_time) AS event_time, sum(v) AS s FROM ev GROUP BY k"
    rows = [{"event_time": T0, "k": None, "v": None}, {"event_time": T0, "k": "b", "v": 1}]
    outs = _run(sql, rows, [1], [])
    assert outs[1].to_pylist() == [{"op": 0, "k": "b", "event_time": T0, "s": 1}]


def test_a_date_event_time_is_final_at_its_day() -> None:
    """A DATE event time is compared with the gate as the instant its day starts."""
    sql = "SELECT k, max(d) AS event_time, count(*) AS n FROM ev GROUP BY k"
    q = parse_accumulator_query(sql)
    assert q is not None
    day = dt.date(2020, 1, 2)
    partial = pa.table(
        {
            "__odf_k0": pa.array(["a"]),
            "__odf_nrows": pa.array([1], pa.int64()),
            "__odf_a0": pa.array([day], pa.date32()),
            "__odf_n0": pa.array([1], pa.int64()),
            "__odf_a1": pa.array([1], pa.int64()),
        }
    )
    at = int(dt.datetime(2020, 1, 2, tzinfo=dt.UTC).timestamp() * 1e6)
    names = ["k", "event_time", "n"]
    assert merge_partials(q, None, partial, names, "event_time", at).changes.num_rows == 1
    assert merge_partials(q, None, partial, names, "event_time", at - 1).changes.num_rows == 0


def test_a_null_that_becomes_a_value_is_corrected() -> None:
    """A NULL and a value differ: a sum over no values that gets one is corrected."""
    sql = "SELECT k, min(event_time) AS event_time, sum(v) AS s FROM ev GROUP BY k"
    rows = [{"event_time": T0, "k": "a", "v": None}, {"event_time": T0, "k": "a", "v": 4}]
    outs = _run(sql, rows, [1], [])
    assert [(r["op"], r["s"]) for r in outs[1].to_pylist()] == [(2, None), (3, 4)]
