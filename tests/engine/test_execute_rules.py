"""The stateful executor's decisions that need no Spark (engine.streaming.execute).

Which temporal table is which input, when a query is worth planning split, what a Parquet
footer says about retractions, and which input rows a run keeps for the next one. Each test
names the rule it pins; the executor's Spark paths are tested through the engine
(tests/engine/test_streaming.py) and, for mutation testing, in-process
(tests/engine/test_execute_inprocess.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import InvalidQuery
from engine.inputs import InputPlan, SlicePlan
from engine.streaming import execute, footers
from engine.streaming.execute import temporal_sources, versions_view_name
from engine.streaming.rewrite import HIDDEN_PREFIX, RewrittenQuery, WindowSpec
from engine.streaming.state import MODE_CHANGELOG, MODE_WINDOW, StreamState
from fbs.model.engine import TransformRequest, TransformRequestInput
from fbs.model.events import DatasetVocabulary
from fbs.model.source import TemporalTable, TransformSql
from tests.engine.helpers import BASE_MS, make_input, make_request, write_input, write_schema

HOUR_US = 3_600_000_000
BASE_US = BASE_MS * 1_000


def _input(
    tmp: Path, alias: str, *, dataset: str | None = None, event_time: str = "event_time"
) -> TransformRequestInput:
    """A one-row input named ``alias`` (query) and ``dataset`` (dataset alias)."""
    path = tmp / f"{alias}.parquet"
    table = write_input(path, start_offset=0, cities=["a"], populations=[1])
    schema = tmp / f"schema-{alias}.parquet"
    write_schema(schema, table)
    inp = make_input(
        seed=alias.encode(), alias=alias, paths=[path], schema_file=schema, interval=(0, 0)
    )
    return inp.replace(
        dataset_alias=dataset or alias,
        vocab=DatasetVocabulary(event_time_column=event_time),
    )


def _request(
    tmp: Path, inputs: list[TransformRequestInput], temporal: tuple[TemporalTable, ...] = ()
) -> TransformRequest:
    request = make_request(tmp / "out", inputs, query="SELECT 1")
    return request.replace(
        transform=TransformSql(engine="spark", query="SELECT 1", temporal_tables=temporal or None),
    )


# -- temporal tables --------------------------------------------------------------------------


def test_versions_view_is_hidden_and_numbered_by_input() -> None:
    assert versions_view_name(0) == f"{HIDDEN_PREFIX}versions_0"
    assert versions_view_name(12) == f"{HIDDEN_PREFIX}versions_12"


def test_temporal_table_found_by_query_or_dataset_alias_any_case(tmp_path: Path) -> None:
    """A temporal table names an input by its query alias or its dataset alias, in any case;
    the source is found under both names, lower case, with that input's versions view,
    event-time column and the table's primary key."""
    trades = _input(tmp_path, "trades")
    rates = _input(tmp_path, "r", dataset="Acme.Rates", event_time="valid_from")
    for name in ("acme.RATES", "R"):
        request = _request(
            tmp_path, [trades, rates], (TemporalTable(name=name, primary_key=("cur", "venue")),)
        )
        sources = temporal_sources(request)
        assert set(sources) == {"r", "acme.rates"}
        source = sources["r"]
        assert source is sources["acme.rates"]
        assert source.versions_view == versions_view_name(1)
        assert source.event_time_column == "valid_from"
        assert source.primary_key == ("cur", "venue")


def test_temporal_table_takes_the_first_matching_input(tmp_path: Path) -> None:
    """Two inputs answering to the name: the first one is the temporal table."""
    a = _input(tmp_path, "a", dataset="rates")
    b = _input(tmp_path, "rates")
    request = _request(tmp_path, [a, b], (TemporalTable(name="rates", primary_key=("k",)),))
    assert temporal_sources(request)["a"].versions_view == versions_view_name(0)


def test_no_temporal_tables_means_no_sources(tmp_path: Path) -> None:
    assert temporal_sources(_request(tmp_path, [_input(tmp_path, "a")])) == {}


def test_temporal_table_must_be_an_input(tmp_path: Path) -> None:
    request = _request(
        tmp_path, [_input(tmp_path, "a")], (TemporalTable(name="b", primary_key=("k",)),)
    )
    with pytest.raises(InvalidQuery, match="'b' is not an input"):
        temporal_sources(request)


def test_temporal_table_needs_a_primary_key(tmp_path: Path) -> None:
    request = _request(
        tmp_path, [_input(tmp_path, "a")], (TemporalTable(name="a", primary_key=()),)
    )
    with pytest.raises(InvalidQuery, match="'a' needs a primary key"):
        temporal_sources(request)


# -- split planning ---------------------------------------------------------------------------


def _query(
    windows: int = 1, *, temporal: frozenset[str] = frozenset(), hold_back_us: int = 0
) -> RewrittenQuery:
    spec = WindowSpec(time_expr="event_time", size_us=HOUR_US, slide_us=HOUR_US)
    return RewrittenQuery(
        steps=(),
        windows=(spec,) * windows,
        temporal_joins=temporal,
        hold_back_us=hold_back_us,
        fingerprint="f",
    )


def test_only_a_one_input_one_window_query_is_planned_split(tmp_path: Path) -> None:
    """A query may be a window-mode query (worth planning across partitions) only with one
    input, one window, no temporal join and no hold-back."""
    one = _request(tmp_path, [_input(tmp_path, "a")])
    two = _request(tmp_path, [_input(tmp_path, "a"), _input(tmp_path, "b")])
    assert execute._parallel_candidate(one, _query())
    assert not execute._parallel_candidate(two, _query())
    assert not execute._parallel_candidate(one, _query(0))
    assert not execute._parallel_candidate(one, _query(2))
    assert not execute._parallel_candidate(one, _query(temporal=frozenset({"r"})))
    assert not execute._parallel_candidate(one, _query(hold_back_us=1))


# -- retractions by footer statistics ---------------------------------------------------------


def _ops_file(path: Path, groups: list[list[int]], *, stats: bool = True) -> Path:
    table = pa.table({"op": pa.array([o for g in groups for o in g], pa.int32())})
    size = max(len(g) for g in groups)
    pq.write_table(table, path, row_group_size=size, write_statistics=stats)
    return path


def test_max_op_is_the_largest_op_over_every_row_group(tmp_path: Path) -> None:
    """The footer's statistics of every row group count, not only the first or last."""
    assert footers.max_op(_ops_file(tmp_path / "a.parquet", [[0, 0], [3, 0], [0, 0]]), "op") == 3
    assert footers.max_op(_ops_file(tmp_path / "b.parquet", [[0, 2], [0, 1]]), "op") == 2
    assert footers.max_op(_ops_file(tmp_path / "c.parquet", [[0, 0], [0, 0]]), "op") == 0


def test_max_op_counts_a_negative_op_by_its_size(tmp_path: Path) -> None:
    """An op below zero is not an append either: its magnitude counts."""
    assert footers.max_op(_ops_file(tmp_path / "a.parquet", [[0, -2]]), "op") == 2


def test_max_op_unknown_without_statistics(tmp_path: Path) -> None:
    """No statistics prove nothing: None (the input is then folded)."""
    assert footers.max_op(_ops_file(tmp_path / "a.parquet", [[0]], stats=False), "op") is None


def test_max_op_of_a_file_without_the_op_column_is_zero(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), path)
    assert footers.max_op(path, "op") == 0
    assert footers.max_op(_ops_file(tmp_path / "b.parquet", [[3]]), "operation") == 0


def test_max_op_of_an_unreadable_file_is_unknown(tmp_path: Path) -> None:
    """Spark reports the unreadable file; the footer check only says it cannot tell."""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    assert footers.max_op(bad, "op") is None
    assert footers.max_op(tmp_path / "missing.parquet", "op") is None


def _plan(*paths: Path) -> InputPlan:
    return InputPlan(slices=tuple(SlicePlan(str(p), False) for p in paths), total_bytes=1)


def test_retractions_are_found_per_input_in_new_and_retained_rows(tmp_path: Path) -> None:
    """Each input is checked on its own: its new slices and, with a previous state, the
    retained rows of that input (found by dataset ID)."""
    a, b = _input(tmp_path, "a"), _input(tmp_path, "b")
    request = _request(tmp_path, [a, b])
    appends = _ops_file(tmp_path / "appends.parquet", [[0, 0]])
    retracts = _ops_file(tmp_path / "retracts.parquet", [[0, 1]])
    plans = [_plan(appends), _plan(retracts)]
    assert execute._holds_retractions(request, plans, None) == [False, True]
    # Retained rows of input b (folder input-1) hold a correction; a's retained are appends.
    state_root = tmp_path / "state"
    for folder, ops in (("input-0", [0]), ("input-1", [2])):
        (state_root / folder).mkdir(parents=True)
        _ops_file(state_root / folder / "part-0.parquet", [ops])
    state = StreamState(
        fingerprint="f",
        mode=MODE_CHANGELOG,
        frontier_us=None,
        inputs={"input-0": a.dataset_id.as_multibase(), "input-1": b.dataset_id.as_multibase()},
    )
    plans = [_plan(appends), _plan(appends)]
    assert execute._holds_retractions(request, plans, (state, state_root)) == [False, True]
    # With retained rows, the new slices still count.
    plans = [_plan(retracts), _plan(appends)]
    assert execute._holds_retractions(request, plans, (state, state_root)) == [True, True]
    plans = [_plan(appends), _plan(appends)]
    # An input the state does not know has no retained rows.
    other = StreamState(fingerprint="f", mode=MODE_CHANGELOG, frontier_us=None, inputs={})
    assert execute._holds_retractions(request, plans, (other, state_root)) == [False, False]


def test_unknown_op_statistics_count_as_retractions(tmp_path: Path) -> None:
    a = _input(tmp_path, "a")
    unknown = _ops_file(tmp_path / "u.parquet", [[0]], stats=False)
    assert execute._holds_retractions(_request(tmp_path, [a]), [_plan(unknown)], None) == [True]


# -- retained rows ----------------------------------------------------------------------------


def _events_file(path: Path, start: int, event_us: list[int]) -> Path:
    write_input(
        path,
        start_offset=start,
        cities=[f"c{i}" for i in range(len(event_us))],
        populations=list(range(len(event_us))),
        event_ms=[us // 1_000 for us in event_us],
    )
    return path


def _kept(folder: Path) -> list[int]:
    return pq.read_table(folder / "part-0.parquet").column("offset").to_pylist()


@pytest.mark.parametrize(
    ("size_h", "slide_h", "frontier_h", "cutoff_h"),
    [
        (1, 1, 3, 3),  # tumbling: the window [3, 4) is the oldest open one
        (2, 1, 3, 2),  # hopping: [2, 4) still open at 3
        (3, 1, 3, 1),  # [1, 4) still open
        (2, 1, 3.5, 2),  # frontier inside a slide: [2, 4) still open
        (1, 1, 2.5, 2),  # [2, 3) open at 2.5
    ],
)
def test_window_mode_keeps_the_rows_of_the_oldest_open_window(
    tmp_path: Path, size_h: int, slide_h: int, frontier_h: float, cutoff_h: int
) -> None:
    """Window mode keeps the input rows at or after the start of the oldest window still
    open at the frontier: the first aligned start whose window ends after it."""
    inp = _input(tmp_path, "ev")
    times = [BASE_US + h * HOUR_US // 2 for h in range(10)]  # every half hour from 00:00
    src = _events_file(tmp_path / "slice.parquet", 0, times)
    inp = inp.replace(data_paths=(str(src),), offset_interval=None)
    request = _request(tmp_path, [inp])
    spec = WindowSpec("event_time", size_h * HOUR_US, slide_h * HOUR_US)
    query = dataclasses.replace(_query(), windows=(spec,))
    frontier = BASE_US + int(frontier_h * HOUR_US)
    out = tmp_path / "next"
    inputs = execute._save_inputs(request, query, [_plan(src)], None, MODE_WINDOW, frontier, out)
    assert inputs == {"input-0": inp.dataset_id.as_multibase()}
    cutoff = BASE_US + cutoff_h * HOUR_US
    assert _kept(out / "input-0") == [i for i, t in enumerate(times) if t >= cutoff]


def test_changelog_mode_and_no_frontier_keep_every_row(tmp_path: Path) -> None:
    """Only window mode with a frontier drops rows: changelog mode needs every input row,
    and before the first watermark no window has closed."""
    inp = _input(tmp_path, "ev")
    times = [BASE_US + h * HOUR_US for h in range(4)]
    src = _events_file(tmp_path / "slice.parquet", 0, times)
    request = _request(tmp_path, [inp])
    late = BASE_US + 10 * HOUR_US
    for mode, frontier, name in (
        (MODE_CHANGELOG, late, "changelog"),
        (MODE_WINDOW, None, "no-frontier"),
    ):
        execute._save_inputs(request, _query(), [_plan(src)], None, mode, frontier, tmp_path / name)
        assert _kept(tmp_path / name / "input-0") == [0, 1, 2, 3]


def test_retained_rows_carry_over_per_input_by_dataset_id(tmp_path: Path) -> None:
    """Each input's folder is named by its position (input-<n>); the rows retained by the
    previous run are found by dataset ID and come first."""
    a, b = _input(tmp_path, "a"), _input(tmp_path, "b")
    request = _request(tmp_path, [a, b])
    prev_root = tmp_path / "prev"
    # The previous state listed the inputs the other way round.
    _events_file(_mkdir(prev_root / "input-0") / "part-0.parquet", 100, [BASE_US])
    _events_file(_mkdir(prev_root / "input-1") / "part-0.parquet", 200, [BASE_US])
    state = StreamState(
        fingerprint="f",
        mode=MODE_CHANGELOG,
        frontier_us=None,
        inputs={"input-0": b.dataset_id.as_multibase(), "input-1": a.dataset_id.as_multibase()},
    )
    new_a = _events_file(tmp_path / "a-new.parquet", 0, [BASE_US])
    new_b = _events_file(tmp_path / "b-new.parquet", 10, [BASE_US])
    out = tmp_path / "next"
    inputs = execute._save_inputs(
        request,
        _query(),
        [_plan(new_a), _plan(new_b)],
        (state, prev_root),
        MODE_CHANGELOG,
        None,
        out,
    )
    assert inputs == {
        "input-0": a.dataset_id.as_multibase(),
        "input-1": b.dataset_id.as_multibase(),
    }
    assert _kept(out / "input-0") == [200, 0]
    assert _kept(out / "input-1") == [100, 10]


def test_an_input_new_to_the_state_starts_with_no_retained_rows(tmp_path: Path) -> None:
    """An input the previous state does not know (a new query added it) keeps only its new
    rows."""
    inp = _input(tmp_path, "ev")
    state = StreamState(fingerprint="f", mode=MODE_CHANGELOG, frontier_us=None, inputs={})
    src = _events_file(tmp_path / "slice.parquet", 5, [BASE_US, BASE_US])
    out = tmp_path / "next"
    execute._save_inputs(
        _request(tmp_path, [inp]),
        _query(),
        [_plan(src)],
        (state, _mkdir(tmp_path / "prev")),
        MODE_CHANGELOG,
        None,
        out,
    )
    assert _kept(out / "input-0") == [5, 6]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_parquet_columns_are_the_first_file_schema_names(tmp_path: Path) -> None:
    """The retained rows' columns, read from the first file in name order (none: empty)."""
    assert execute._parquet_columns(tmp_path) == []
    pq.write_table(pa.table({"b": [1], "a": [2]}), tmp_path / "part-1.parquet")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "part-0.parquet")
    (tmp_path / "notes.txt").write_text("not a part")
    assert execute._parquet_columns(tmp_path) == ["x"]


def test_micros_truncates_nanoseconds_toward_the_past() -> None:
    from fbs.timestamp import Timestamp

    assert execute._micros(Timestamp(1_234_567_999)) == 1_234_567
    assert execute._decimal(-5) == "CAST('-5' AS DECIMAL(20, 0))"
