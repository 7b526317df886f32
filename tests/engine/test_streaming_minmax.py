"""Retractable min/max on the engine: each group's values are kept once the input retracts.

A state made over an input that takes rows back (``-R``, ``-C``/``+C``) in its first run
keeps, beside its accumulators, the multiset of each ``min``/``max`` argument per group;
so any retraction, of the current extreme too, gives the exact next extreme. Each property
test draws rows and a random split (its first part always holds a retraction: that is
when the state is made), runs the engine over the split and in one run, and compares the
folded outputs with a batch reference over the folded input computed in plain Python.
"""

from __future__ import annotations

import collections
import datetime as dt
import io
import random
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.client import EngineClient
from engine.streaming.summary import summarize_checkpoint
from fbs.model.engine import TransformResponseInvalidQuery
from tests.engine.streaming_helpers import InputStream, StreamRunner, counter_of, fold, state_mode
from tests.engine.test_streaming import EVENTS, T0, Row, _changelog, _fold_input, _run_split
from tests.engine.test_streaming_accumulate import SPLITS

pytestmark = pytest.mark.slow

Counter = collections.Counter[tuple[Any, ...]]

MINMAX = (
    "SELECT k, max(event_time) AS event_time, count(*) AS n, min(v) AS lo, max(v) AS hi "
    "FROM ev GROUP BY k"
)
GLOBAL = "SELECT max(event_time) AS event_time, min(v) AS lo, max(v) AS hi FROM ev WHERE v > 0"
#: A row appended and taken back at once: the first run always retracts.
_OPENING = [
    {"event_time": T0, "k": "z", "v": 0, "op": 0},
    {"event_time": T0, "k": "z", "v": 0, "op": 1},
]


def _minmax(rows: list[Row]) -> Counter:
    groups: dict[str, list[Row]] = collections.defaultdict(list)
    for r in rows:
        groups[r["k"]].append(r)
    out = []
    for k, g in groups.items():
        vs = [r["v"] for r in g]
        out.append((k, max(r["event_time"] for r in g), len(g), min(vs), max(vs)))
    return counter_of(out)


def _global(rows: list[Row]) -> Counter:
    g = [r for r in rows if r["v"] > 0]
    vs = [r["v"] for r in g]
    t = max((r["event_time"] for r in g), default=None)
    return counter_of([(t, min(vs, default=None), max(vs, default=None))])


def _values(checkpoint: Path | None) -> dict[str, pa.Table]:
    """The multisets of a checkpoint, by file name; it must hold no input rows."""
    assert checkpoint is not None
    with tarfile.open(checkpoint) as tar:
        names = tar.getnames()
        assert not [n for n in names if "/input-" in n or "/output/" in n], names
        out = {}
        for n in names:
            if n.startswith("state/accumulators/values-"):
                member = tar.extractfile(n)
                assert member is not None
                out[n.rsplit("/", 1)[1]] = pq.read_table(io.BytesIO(member.read()))
        return out


def _distinct(rows: list[Row], column: str) -> int:
    return len({(r["k"], r[column]) for r in rows})


def _both(
    engine: EngineClient, tmp: Path, name: str, rows: list[Row], query: str, cuts: list[int]
) -> list[StreamRunner]:
    """The runners of the split (its first part holding the opening retraction) and of
    one run."""
    runners = []
    for tag, at in (("split", [max(c, len(_OPENING)) for c in cuts]), ("one", [])):
        tagged = f"{name}-{tag}-{uuid.uuid4().hex[:12]}"
        runner, _ = _run_split(engine, tmp, tagged, {"ev": (EVENTS, rows)}, [(None, query)], at)
        runners.append(runner)
    return runners


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 42), max_size=4))
@SPLITS
def test_min_max_take_back_any_value(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    """Over a changelog input the fold is the answer over the rows the input holds; the
    state keeps one row per (group, distinct value) of each min/max argument."""
    rows = _OPENING + _changelog(seed, 40)
    held = _fold_input(rows)
    for runner in _both(engine, tmp_path, "minmax", rows, MINMAX, cuts):
        assert fold(runner.outputs) == _minmax(held)
        assert state_mode(runner.checkpoint) == "accumulate"
        values = _values(runner.checkpoint)
        assert values["values-0.parquet"].num_rows == _distinct(held, "event_time")
        assert values["values-2.parquet"].num_rows == _distinct(held, "v")
        assert values["values-3.parquet"].num_rows == _distinct(held, "v")


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 32), max_size=4))
@SPLITS
def test_global_min_max_take_back_any_value(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    rows = _OPENING + _changelog(seed, 30)
    for runner in _both(engine, tmp_path, "global", rows, GLOBAL, cuts):
        assert fold(runner.outputs) == _global(_fold_input(rows))
        assert state_mode(runner.checkpoint) == "accumulate"


def _peeled(seed: int) -> list[Row]:
    """Rows of groups ``a`` and ``b``, then, until ``a`` is empty, a retraction of one of
    ``a``'s rows holding its current max ``v`` (every third step a correction lowering
    it instead), with appends to ``b`` in between."""
    rnd = random.Random(seed)
    t = T0
    live: list[Row] = []
    out: list[Row] = list(_OPENING)
    for _ in range(12):
        t += dt.timedelta(minutes=rnd.choice([0, 10, 30]))
        row = {"event_time": t, "k": rnd.choice("ab"), "v": rnd.choice([3, 5, 9, 9, 12, 40])}
        live.append(row)
        out.append({**row, "op": 0})
    step = 0
    while any(r["k"] == "a" for r in live):
        top = max(r["v"] for r in live if r["k"] == "a")
        gone = next(r for r in live if r["k"] == "a" and r["v"] == top)
        live.remove(gone)
        step += 1
        if step % 3 == 0 and top > 1:
            lower = {**gone, "v": top // 2}
            out += [{**gone, "op": 2}, {**lower, "op": 3}]
            live.append(lower)
        else:
            out.append({**gone, "op": 1})
        if rnd.random() < 0.3:
            row = {"event_time": t, "k": "b", "v": rnd.randint(0, 50)}
            live.append(row)
            out.append({**row, "op": 0})
    return out


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=5))
@SPLITS
def test_retracting_the_max_until_the_group_empties(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    """Taking back the current max again and again gives the next one each time; once
    its last row is gone the group leaves the answer and its multiset rows go too."""
    rows = _peeled(seed)
    held = _fold_input(rows)
    assert not [r for r in held if r["k"] == "a"]
    for runner in _both(engine, tmp_path, "peel", rows, MINMAX, cuts):
        assert fold(runner.outputs) == _minmax(held)
        for table in _values(runner.checkpoint).values():
            assert "a" not in table.column("__odf_k0").to_pylist()


def test_a_value_never_added_is_refused_by_name(engine: EngineClient, tmp_path: Path) -> None:
    """A retractable max takes back only values its group holds: a retraction of another
    (a malformed changelog) is refused, naming the aggregate."""
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, MINMAX)], tmp_path / "out")
    a = [{"event_time": T0, "k": "a", "v": v} for v in (1, 2)]
    ev.append([{**a[0], "op": 0}, {**a[1], "op": 0}, {**a[0], "op": 1}])
    runner.run()
    assert fold(runner.outputs) == counter_of([("a", T0, 1, 2, 2)])
    summary = summarize_checkpoint(runner.checkpoint)  # what `odf inspect state` shows
    assert (summary.kind, summary.groups, summary.values) == ("accumulate", 1, 3)
    assert "min/max values" in summary.keeps
    ev.append([{**a[0], "v": 7, "op": 1}])
    work = tmp_path / "refused"
    work.mkdir()
    result = engine.execute_transform(runner.request(work))
    assert isinstance(result, TransformResponseInvalidQuery), result
    assert "never held" in result.message and "(v)" in result.message


def test_a_new_query_carries_the_values_over(engine: EngineClient, tmp_path: Path) -> None:
    """Migrate Query on a retractable state: the new query's min/max takes the old one's
    values (same kind and argument), so a later retraction of its extreme stays exact."""
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, MINMAX)], tmp_path / "out")
    rows = [{"event_time": T0.replace(hour=h), "k": "a", "v": v} for h, v in enumerate((4, 9, 6))]
    ev.append([*({**r, "op": 0} for r in rows), {**rows[0], "op": 1}])
    runner.run()
    new = MINMAX.replace("count(*)", "count(v)")
    runner.steps = [(None, new)]
    runner.run()
    ev.append([{**rows[1], "op": 1}])
    runner.run()
    assert fold(runner.outputs) == counter_of([("a", rows[2]["event_time"], 1, 6, 6)])
    assert sorted(_values(runner.checkpoint)) == [f"values-{j}.parquet" for j in (0, 2, 3)]
