"""Query shapes that are easy to answer wrong when their input is split.

Each query runs over the same rows fed one run per row and in one run (then a watermark
past all data, `tests.engine.test_streaming._run_split`); both folded outputs must equal
the batch answer, computed here in plain Python. The traps:

- a scalar subquery hides its aggregate inside an expression: the plan walk must look
  there, or the query runs stateless, each run's subquery seeing that run's rows only;
- a window over a column *named* like the event time but computed from it in a subquery
  (shifted, another time zone) must not run in window mode, whose lateness and retention
  follow the input's event time: windows would close before their rows came, or lose rows
  still needed;
- a stateful row whose event time is NULL (an outer join's unmatched side, an aggregate
  over no rows) is final at once: no watermark can pass it, so waiting would never emit it.
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.client import EngineClient
from tests.engine.streaming_helpers import counter_of, fold, state_mode
from tests.engine.test_streaming import EVENTS, Row, _events, _run_split

pytestmark = pytest.mark.slow

HOUR = dt.timedelta(hours=1)
Counter = collections.Counter[tuple[Any, ...]]


def _hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _above_average(rows: list[Row]) -> Counter:
    avg = sum(r["v"] for r in rows) / len(rows)
    return counter_of([(r["event_time"], r["k"], r["v"]) for r in rows if r["v"] > avg])


def _shifted_windows(shift: dt.timedelta) -> Callable[[list[Row]], Counter]:
    def reference(rows: list[Row]) -> Counter:
        n = collections.Counter(_hour(r["event_time"] + shift) for r in rows)
        return counter_of(list(n.items()))

    return reference


def _windows_at_or_above_average(rows: list[Row]) -> Counter:
    avg = sum(r["v"] for r in rows) / len(rows)
    n = collections.Counter(_hour(r["event_time"]) for r in rows if r["v"] >= avg)
    return counter_of(list(n.items()))


def _no_rows_match(rows: list[Row]) -> Counter:
    assert all(r["v"] <= 1000 for r in rows)
    return counter_of([(None, 0)])


SHAPES: dict[str, tuple[str, Callable[[list[Row]], Counter]]] = {
    "scalar subquery": (
        "SELECT event_time, k, v FROM ev WHERE v > (SELECT avg(v) FROM ev)",
        _above_average,
    ),
    "window over a time shifted back": (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n "
        "FROM (SELECT event_time - INTERVAL 90 MINUTES AS event_time FROM ev) "
        "GROUP BY window(event_time, '1 hour')",
        _shifted_windows(-dt.timedelta(minutes=90)),
    ),
    "window over a time shifted forward": (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n "
        "FROM (SELECT event_time + INTERVAL 40 MINUTES AS event_time FROM ev) "
        "GROUP BY window(event_time, '1 hour')",
        _shifted_windows(dt.timedelta(minutes=40)),
    ),
    "window filtered by a scalar subquery": (
        "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n FROM ev "
        "WHERE v >= (SELECT avg(v) FROM ev) GROUP BY window(event_time, '1 hour')",
        _windows_at_or_above_average,
    ),
    "aggregate over no rows": (
        "SELECT max(event_time) AS event_time, count(*) AS n FROM ev WHERE v > 1000",
        _no_rows_match,
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_shape_is_split_independent(engine: EngineClient, tmp_path: Path, shape: str) -> None:
    query, reference = SHAPES[shape]
    rows = _events(3, 8)
    data = {"ev": (EVENTS, rows)}
    expected = reference(rows)
    for name, cuts in (("rows", list(range(1, len(rows)))), ("one", [])):
        runner, _ = _run_split(engine, tmp_path, name, data, [(None, query)], cuts)
        assert fold(runner.outputs) == expected, name


def test_full_join_rows_without_event_time_are_emitted(
    engine: EngineClient, tmp_path: Path
) -> None:
    """The unmatched right rows of a FULL JOIN taking the left's event time have none:
    they are part of the answer, emitted at once (and retracted when a match comes)."""
    query = "SELECT a.event_time, a.k AS ak, b.k AS bk, b.v AS bv FROM a FULL JOIN b ON a.k = b.k"
    a_rows = [r for r in _events(5, 6) if r["k"] != "c"]
    b_rows = _events(6, 6)
    expected: Counter = collections.Counter()
    for x in a_rows:
        matches = [y for y in b_rows if y["k"] == x["k"]]
        for y in matches or [None]:
            expected[(x["event_time"], x["k"], y and y["k"], y and y["v"])] += 1
    for y in b_rows:
        if not any(x["k"] == y["k"] for x in a_rows):
            expected[(None, None, y["k"], y["v"])] += 1
    assert any(key[0] is None for key in expected)
    data = {"a": (EVENTS, a_rows), "b": (EVENTS, b_rows)}
    runner, _ = _run_split(engine, tmp_path, "split", data, [(None, query)], [1, 3, 5])
    assert fold(runner.outputs) == expected


@pytest.mark.parametrize(
    ("query", "mode"),
    [
        (
            "SELECT TUMBLE_START(event_time, INTERVAL '1' HOUR) AS event_time, count(*) AS n "
            "FROM ev GROUP BY TUMBLE(event_time, INTERVAL '1' HOUR)",
            "window",
        ),
        (
            "SELECT HOP_END(e.event_time, INTERVAL '1' HOUR, INTERVAL '2' HOUR) AS event_time, "
            "count(*) AS n FROM (SELECT * FROM ev) AS e "
            "GROUP BY HOP(e.event_time, INTERVAL '1' HOUR, INTERVAL '2' HOUR)",
            "window",
        ),
        (
            "SELECT window(event_time, '1 hour').start AS event_time, count(*) AS n FROM "
            "(SELECT from_utc_timestamp(event_time, 'Asia/Kolkata') AS event_time FROM ev) "
            "GROUP BY window(event_time, '1 hour')",
            "changelog",
        ),
    ],
)
def test_window_mode_is_kept_for_windows_over_the_read_event_time(
    engine: EngineClient, tmp_path: Path, query: str, mode: str
) -> None:
    """Window mode (bounded state) stays the mode of windows over the input's event time
    as read, through a pass-through subquery too; a window over a time computed from it
    (here another time zone) is a changelog query."""
    runner, _ = _run_split(
        engine, tmp_path, "one", {"ev": (EVENTS, _events(4, 3))}, [(None, query)], []
    )
    assert state_mode(runner.checkpoint) == mode


def test_a_changelog_keeps_its_nested_types_from_run_to_run(
    engine: EngineClient, tmp_path: Path
) -> None:
    """Every run of a changelog query writes the same nested types: a ``collect_list`` (its
    elements not null) once became nullable in the second run, where retractions read back
    from the live output join the appends, and the dataset refused the changed schema."""
    query = (
        "SELECT max(event_time) AS event_time, k, collect_list(v) AS vs, "
        "named_struct('n', count(*)) AS st FROM ev GROUP BY k"
    )
    data = {"ev": (EVENTS, _events(3, 6))}
    runner, _ = _run_split(engine, tmp_path, "split", data, [(None, query)], [2, 4])
    assert len(runner.outputs) >= 3
    types = {
        (str(t.schema.field("vs").type), str(t.schema.field("st").type)) for t in runner.outputs
    }
    assert len(types) == 1, types
