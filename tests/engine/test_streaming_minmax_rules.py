"""Retractable min/max merged over random splits vs a batch reference (no Spark).

The multisets' new counts (what `value_delta_sql` asks Spark for) and the partial
accumulators are computed here in Python; `merge_values` and `merge_partials` run run
after run over an input that appends, retracts and corrects rows (the current extremes
too) with random watermarks. After every run the folded changelog must equal the answer
over the rows the input holds, final rows only; nothing is refused; the same state and
new rows give the same bytes (replay).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from engine.streaming.accumulate import AccumulatorQuery, parse_accumulator_query
from engine.streaming.accumulators import merge_partials
from engine.streaming.multisets import merge_values
from tests.engine.streaming_helpers import fold
from tests.engine.test_state_accumulators_rules import (
    GROUPED,
    SPLITS,
    T0,
    T0_MS,
    TS,
    Row,
    _answer,
    _changelog,
    _names,
    _partial,
    _roundtrip,
    _sign,
)

GLOBAL = "SELECT max(event_time) AS event_time, count(*) AS n, min(v) AS lo, max(v) AS hi FROM ev"
_TYPES = {"k": pa.string(), "v": pa.int64(), "event_time": TS}


def _delta(q: AccumulatorQuery, j: int, rows: Sequence[Row]) -> pa.Table:
    """What `value_delta_sql` gives over ``rows``: the net count per (group, value)."""
    arg = q.aggregates[j].arg
    counts: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for r in rows:
        counts[(*(r[k] for k in q.keys), r[arg])] += _sign(r)
    cols = {
        f"__odf_k{i}": pa.array([c[i] for c in counts], _TYPES[k]) for i, k in enumerate(q.keys)
    }
    cols["__odf_value"] = pa.array([c[-1] for c in counts], _TYPES[arg])
    cols["__odf_copies"] = pa.array(list(counts.values()), pa.int64())
    return pa.table(cols)


def _run(sql: str, rows: list[Row], cuts: list[int], gates: list[int | None]) -> None:
    q = parse_accumulator_query(sql)
    assert q is not None
    names = _names(sql)
    extremes = [j for j, a in enumerate(q.aggregates) if a.kind in ("MIN", "MAX")]
    state: pa.Table | None = None
    values: dict[int, pa.Table | None] = dict.fromkeys(extremes)
    outputs: list[pa.Table] = []
    points = [*sorted(min(c, len(rows)) for c in cuts), len(rows)]
    start, gate = 0, None
    for i, p in enumerate(points):
        given_gate = gates[i] if i < len(gates) else None
        if given_gate is not None and (gate is None or given_gate > gate):
            gate = given_gate
        if i == len(points) - 1:
            gate = 10**12  # the last run closes everything
        new = rows[start:p]
        gate_us = None if gate is None else (T0_MS + gate) * 1000
        merged = {j: merge_values(q, j, values[j], _delta(q, j, new)) for j in extremes}
        run = merge_partials(q, state, _partial(q, new), names, "event_time", gate_us, merged)
        again = merge_partials(q, state, _partial(q, new), names, "event_time", gate_us, merged)
        assert run.changes.equals(again.changes) and run.state.equals(again.state)
        state = _roundtrip(run.state)
        values = {j: _roundtrip(t) for j, t in merged.items()}
        outputs.append(run.changes)
        assert fold(outputs) == _answer(q, rows[:p], gate, names.index("event_time")), i
        start = p


@given(
    seed=st.integers(0, 10**6),
    cuts=st.lists(st.integers(0, 40), max_size=5),
    gates=st.lists(st.one_of(st.none(), st.integers(0, 40 * 60_000)), max_size=6),
)
@SPLITS
def test_grouped_min_max_take_back_any_value(
    seed: int, cuts: list[int], gates: list[int | None]
) -> None:
    _run(GROUPED, _changelog(seed, 40), cuts, gates)


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 30), max_size=5))
@SPLITS
def test_global_min_max_take_back_any_value(seed: int, cuts: list[int]) -> None:
    _run(GLOBAL, _changelog(seed, 30), cuts, [])


def test_the_max_taken_back_until_the_group_empties() -> None:
    """Each run takes back the current max: the next one comes, then the group goes."""
    rows = [{"event_time": T0, "k": "a", "v": v} for v in (5, 9, 9, 2)]
    peel = sorted(rows, key=lambda r: -r["v"])
    _run(GROUPED, [*rows, *({**r, "op": 1} for r in peel)], [4, 5, 6, 7], [])
