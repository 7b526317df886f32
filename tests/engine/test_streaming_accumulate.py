"""Accumulator state on the engine: a GROUP BY keeps one row per group, not its input.

Each property test draws rows and a random split, runs the engine over the split and in
one run (checkpoints carried over, then a watermark past all data), and compares both
folded outputs with a batch reference computed here in plain Python; the checkpoint must
record the accumulator mode and hold one row per group and no input rows. Inputs that
take rows back (``-R``, ``-C``/``+C``) are folded by the reference: counts and sums take
them exactly; a ``min``/``max`` made over rows that only add keeps its extreme alone and
refuses, by name, a retraction of it it cannot answer, while one whose input retracts in
its state's first run keeps each group's values (``tests/engine/test_streaming_minmax.py``).
"""

from __future__ import annotations

import collections
import io
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.client import EngineClient
from fbs.model.engine import TransformResponseInvalidQuery
from tests.engine.streaming_helpers import InputStream, StreamRunner, counter_of, fold, state_mode
from tests.engine.test_streaming import (
    EVENTS,
    T0,
    Row,
    _changelog,
    _events,
    _fold_input,
    _run_split,
)

pytestmark = pytest.mark.slow

SPLITS = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a Spark example is slow to shrink
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
Counter = collections.Counter[tuple[Any, ...]]

GROUPED = (
    "SELECT k, max(event_time) AS event_time, count(*) AS n, sum(v) AS s, avg(v) AS a, "
    "min(v) AS lo FROM ev GROUP BY k"
)
GLOBAL = (
    "SELECT max(event_time) AS event_time, count(*) AS n, sum(v) AS s, min(v) AS lo, "
    "max(v) AS hi FROM ev WHERE v > 0"
)
SUMS = (
    "SELECT event_time, k, count(*) AS n, count(v) AS nv, sum(v) AS s, avg(v) AS a "
    "FROM ev GROUP BY event_time, k"
)


def _grouped(rows: list[Row]) -> Counter:
    groups: dict[str, list[Row]] = collections.defaultdict(list)
    for r in rows:
        groups[r["k"]].append(r)
    out = []
    for k, g in groups.items():
        vs = [r["v"] for r in g]
        t = max(r["event_time"] for r in g)
        out.append((k, t, len(g), sum(vs), sum(vs) / len(vs), min(vs)))
    return counter_of(out)


def _global(rows: list[Row]) -> Counter:
    g = [r for r in rows if r["v"] > 0]
    vs = [r["v"] for r in g]
    t = max((r["event_time"] for r in g), default=None)
    return counter_of(
        [(t, len(g), sum(vs) if vs else None, min(vs, default=None), max(vs, default=None))]
    )


def _sums(rows: list[Row]) -> Counter:
    groups: dict[tuple[Any, str], list[int]] = collections.defaultdict(list)
    for r in rows:
        groups[(r["event_time"], r["k"])].append(r["v"])
    return counter_of(
        [(t, k, len(v), len(v), sum(v), sum(v) / len(v)) for (t, k), v in groups.items()]
    )


def _accumulators(checkpoint: Path | None) -> pa.Table:
    """The accumulator table of a checkpoint; it must hold no input rows."""
    assert checkpoint is not None
    with tarfile.open(checkpoint) as tar:
        names = tar.getnames()
        assert not [n for n in names if "/input-" in n or "/output/" in n], names
        member = tar.extractfile("state/accumulators/state.parquet")
        assert member is not None
        return pq.read_table(io.BytesIO(member.read()))


def _check(
    engine: EngineClient, tmp: Path, name: str, rows: list[Row], query: str, cuts: list[int]
) -> list[StreamRunner]:
    runners = []
    for tag, at in (("split", cuts), ("one", [])):
        runner, _ = _run_split(
            engine,
            tmp,
            f"{name}-{tag}-{uuid.uuid4().hex[:12]}",
            {"ev": (EVENTS, rows)},
            [(None, query)],
            at,
        )
        runners.append(runner)
    return runners


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=4))
@SPLITS
def test_group_by_keeps_one_row_per_group(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    rows = _events(seed, 40)
    for runner in _check(engine, tmp_path, "grouped", rows, GROUPED, cuts):
        assert fold(runner.outputs) == _grouped(rows)
        assert state_mode(runner.checkpoint) == "accumulate"
        assert _accumulators(runner.checkpoint).num_rows == len({r["k"] for r in rows})


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 20), max_size=4))
@SPLITS
def test_global_aggregate_keeps_one_row(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    rows = _events(seed, 20)
    for runner in _check(engine, tmp_path, "global", rows, GLOBAL, cuts):
        assert fold(runner.outputs) == _global(rows)
        assert state_mode(runner.checkpoint) == "accumulate"
        assert _accumulators(runner.checkpoint).num_rows == 1


@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(0, 40), max_size=4))
@SPLITS
def test_counts_and_sums_take_back_what_the_input_retracts(
    engine: EngineClient, tmp_path: Path, seed: int, cuts: list[int]
) -> None:
    """Over a changelog input (-R, -C/+C) the fold is the answer over the rows the input
    holds, on accumulators: a group whose rows are all taken back is retracted."""
    rows = _changelog(seed, 30)
    assert any(r["op"] for r in rows)
    for runner in _check(engine, tmp_path, "sums", rows, SUMS, cuts):
        assert fold(runner.outputs) == _sums(_fold_input(rows))
        assert state_mode(runner.checkpoint) == "accumulate"


def test_a_max_over_an_input_that_retracts_from_the_start_keeps_its_values(
    engine: EngineClient, tmp_path: Path
) -> None:
    rows = _changelog(5, 30)
    assert any(r["op"] for r in rows[:10])
    runner, _ = _run_split(
        engine, tmp_path, "max", {"ev": (EVENTS, rows)}, [(None, GROUPED)], [10, 20]
    )
    assert fold(runner.outputs) == _grouped(_fold_input(rows))
    assert state_mode(runner.checkpoint) == "accumulate"
    assert _accumulators(runner.checkpoint).num_rows == len({r["k"] for r in _fold_input(rows)})


def test_taking_back_the_max_of_an_accumulator_state_is_refused(
    engine: EngineClient, tmp_path: Path
) -> None:
    """A max made over rows that only add keeps only its extreme: a retraction of it is
    refused by name (a wrong answer would be worse); a correction keeping it and one of
    an older row are taken."""
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    query = "SELECT k, max(event_time) AS event_time, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
    runner = StreamRunner(engine, [ev], [(None, query)], tmp_path / "out")
    a0, a1 = (
        {"event_time": T0, "k": "a", "v": 1},
        {"event_time": T0.replace(hour=1), "k": "a", "v": 2},
    )
    ev.append([a0, a1])
    runner.run()
    ev.append([{**a1, "op": 2}, {**a1, "v": 5, "op": 3}, {**a0, "op": 1}])
    runner.run()
    assert fold(runner.outputs) == counter_of([("a", a1["event_time"], 1, 5)])
    ev.append([{**a1, "v": 5, "op": 1}, {"event_time": T0, "k": "a", "v": 7}])
    work = tmp_path / "refused"
    work.mkdir()
    result = engine.execute_transform(runner.request(work))
    assert isinstance(result, TransformResponseInvalidQuery), result
    assert "max(event_time)" in result.message and "keeps only" in result.message


def test_new_query_carries_the_accumulators_over(engine: EngineClient, tmp_path: Path) -> None:
    """Migrate Query on accumulators: a new query whose aggregates the state keeps folds
    to its answer over all input; one needing what the state lacks is refused by name."""
    old = "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
    new = "SELECT max(event_time) AS event_time, k, count(v) AS n, sum(v) AS s FROM ev GROUP BY k"
    ev = InputStream("ev", EVENTS, tmp_path / "in")
    runner = StreamRunner(engine, [ev], [(None, old)], tmp_path / "out")
    rows = _events(11, 24)
    ev.append(rows[:12])
    runner.run()
    runner.steps = [(None, new)]
    migrated = runner.run()
    assert 1 in migrated.column("op").to_pylist()  # the old rows are retracted
    ev.append(rows[12:])
    runner.run()
    expected = counter_of(
        [
            (
                max(r["event_time"] for r in rows if r["k"] == k),
                k,
                sum(r["k"] == k for r in rows),
                sum(r["v"] for r in rows if r["k"] == k),
            )
            for k in {r["k"] for r in rows}
        ]
    )
    assert fold(runner.outputs) == expected
    runner.steps = [(None, new.replace("sum(v)", "min(v)"))]
    work = tmp_path / "refused"
    work.mkdir()
    result = engine.execute_transform(runner.request(work))
    assert isinstance(result, TransformResponseInvalidQuery), result
    assert "min(v)" in result.message and "does not keep it" in result.message
