"""The rules of the retained rows (engine.streaming.retain) that the pruned-read property of
tests/engine/test_retain.py does not pin: where they are written, which files are read in
which order, schema evolution, and when a row group's statistics may skip it. Each test names
the rule it pins (docs/mutation-testing.md). Pure pyarrow: no Spark.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.inputs import InputPlan, SlicePlan
from engine.streaming.retain import RETAINED_FILE, retain_rows
from fbs.model.engine import TransformRequestInput
from tests.engine.helpers import BASE_MS, make_input

BASE_US = BASE_MS * 1_000
_PER_US = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _rows(path: Path, offsets: list[int], micros: list[int], **extra: pa.Array) -> Path:
    """A file of rows (offset, op, event_time in µs, ``extra`` columns), one row group per row."""
    n = len(offsets)
    table = pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "op": pa.array([0] * n, pa.int32()),
            "event_time": pa.array(micros, pa.timestamp("us", tz="UTC")),
            **extra,
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=1)
    return path


def _plan(*paths: Path, needs_filter: bool = False) -> InputPlan:
    return InputPlan(
        slices=tuple(SlicePlan(str(p), needs_filter=needs_filter) for p in paths), total_bytes=0
    )


def _input(
    paths: list[Path], interval: tuple[int, int] | None = (0, 1_000)
) -> TransformRequestInput:
    return make_input(
        seed=b"retain-rules", alias="ev", paths=paths, schema_file=paths[0], interval=interval
    )


def _offsets(folder: Path) -> list[int]:
    offsets: list[int] = pq.read_table(folder / RETAINED_FILE).column("offset").to_pylist()
    return offsets


def test_retained_rows_come_first_then_the_slices_in_order(tmp_path: Path) -> None:
    """The file written holds the previously retained rows, then each slice's rows, in the
    order given, and the count returned is its number of rows."""
    old = _rows(tmp_path / "old.parquet", [0, 1], [BASE_US, BASE_US])
    s1 = _rows(tmp_path / "s1.parquet", [2, 3], [BASE_US, BASE_US])
    s2 = _rows(tmp_path / "s2.parquet", [4], [BASE_US])
    out = tmp_path / "state" / "input-0"
    n = retain_rows(_input([s1, s2]), _plan(s1, s2), [old], out, cutoff_us=None)
    assert (n, _offsets(out)) == (5, [0, 1, 2, 3, 4])


def test_the_folder_is_created_with_parents_and_may_exist(tmp_path: Path) -> None:
    """The folder is created with its parents; writing into an existing one replaces its
    file."""
    s = _rows(tmp_path / "s.parquet", [0], [BASE_US])
    out = tmp_path / "a" / "b" / "input-0"
    retain_rows(_input([s]), _plan(s), [], out, cutoff_us=None)
    t = _rows(tmp_path / "t.parquet", [7], [BASE_US])
    assert retain_rows(_input([t]), _plan(t), [], out, cutoff_us=None) == 1
    assert _offsets(out) == [7]


def test_nothing_to_retain_writes_no_file(tmp_path: Path) -> None:
    """No retained rows and no slices: zero rows, and no file (the next run finds none)."""
    out = tmp_path / "input-0"
    s = _rows(tmp_path / "s.parquet", [0], [BASE_US])
    assert retain_rows(_input([s]), _plan(), [], out, cutoff_us=None) == 0
    assert out.is_dir()
    assert list(out.iterdir()) == []


def test_only_slices_flagged_for_the_filter_are_cut_to_the_offset_interval(
    tmp_path: Path,
) -> None:
    """A slice that needs the offset filter keeps only the request's interval (both ends
    included); retained rows and unflagged slices are kept whole."""
    old = _rows(tmp_path / "old.parquet", [0, 1], [BASE_US] * 2)
    whole = _rows(tmp_path / "whole.parquet", [2, 3], [BASE_US] * 2)
    cut = _rows(tmp_path / "cut.parquet", [4, 5, 6, 7, 8], [BASE_US] * 5)
    plan = InputPlan(
        slices=(SlicePlan(str(whole), False), SlicePlan(str(cut), True)), total_bytes=0
    )
    out = tmp_path / "input-0"
    retain_rows(_input([whole, cut], (5, 7)), plan, [old], out, cutoff_us=None)
    assert _offsets(out) == [0, 1, 2, 3, 5, 6, 7]


def test_the_last_slice_schema_wins_when_the_input_schema_evolved(tmp_path: Path) -> None:
    """Rows retained under an older schema (other column order, a narrower type) are written
    in the newest slice's schema."""
    old = tmp_path / "old.parquet"
    pq.write_table(
        pa.table(
            {
                "v": pa.array([1], pa.int32()),
                "event_time": pa.array([BASE_US], pa.timestamp("us", tz="UTC")),
                "op": pa.array([0], pa.int32()),
                "offset": pa.array([0], pa.int64()),
            }
        ),
        old,
    )
    new = _rows(tmp_path / "new.parquet", [1], [BASE_US], v=pa.array([2], pa.int64()))
    out = tmp_path / "input-0"
    retain_rows(_input([new]), _plan(new), [old], out, cutoff_us=None)
    table = pq.read_table(out / RETAINED_FILE)
    assert table.schema.names == ["offset", "op", "event_time", "v"]
    assert table.schema.field("v").type == pa.int64()
    assert table.column("v").to_pylist() == [1, 2]


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_a_row_group_ending_exactly_at_the_cutoff_is_read(tmp_path: Path, unit: str) -> None:
    """A row group is skipped only when its statistics end strictly before the cut-off (in
    the column's own unit): rows exactly at the cut-off are kept, earlier ones dropped."""
    per = _PER_US[unit]
    values = [BASE_US // per - 1, BASE_US // per, BASE_US // per + 1]
    path = tmp_path / "s.parquet"
    pq.write_table(
        pa.table(
            {
                "offset": pa.array([0, 1, 2], pa.int64()),
                "event_time": pa.array(values, pa.timestamp(unit, tz="UTC")),
            }
        ),
        path,
        row_group_size=1,
    )
    out = tmp_path / "input-0"
    cutoff = (BASE_US // per) * per
    assert retain_rows(_input([path]), _plan(path), [], out, cutoff_us=cutoff) == 2
    assert _offsets(out) == [1, 2]


def test_nanosecond_statistics_round_up_to_the_microsecond(tmp_path: Path) -> None:
    """Nanosecond statistics are rounded up: a row group whose last value lies inside the
    cut-off's microsecond is read (its rows are then compared exactly)."""
    from engine.streaming.retain import _ends_before

    path = tmp_path / "s.parquet"
    ns = (BASE_US - 1) * 1_000 + 1  # 999 ns before the cut-off
    pq.write_table(pa.table({"t": pa.array([ns], pa.timestamp("ns", tz="UTC"))}), path)
    stats = pq.ParquetFile(path).metadata.row_group(0).column(0).statistics
    assert not _ends_before(stats, "ns", BASE_US)
    assert _ends_before(stats, "ns", BASE_US + 1)


def test_rows_without_usable_statistics_are_read_and_filtered(tmp_path: Path) -> None:
    """Row groups are skipped by their event-time statistics only: without statistics, or
    when the event time is not a top-level timestamp column that lines up with its leaf
    column (a nested column before it), every row group is read and each row compared."""
    micros = [BASE_US - 10, BASE_US + 10, BASE_US - 20, BASE_US + 20]
    no_stats = tmp_path / "no-stats.parquet"
    table = pa.table(
        {
            "offset": pa.array([0, 1, 2, 3], pa.int64()),
            "event_time": pa.array(micros, pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(table, no_stats, row_group_size=1, write_statistics=False)
    # A struct column first: its leaf (small integers) would be taken for the event time.
    nested = tmp_path / "nested.parquet"
    pq.write_table(
        pa.table(
            {
                "s": pa.array([{"a": 1, "b": 2}] * 4),
                "offset": pa.array([4, 5, 6, 7], pa.int64()),
                "event_time": pa.array(micros, pa.timestamp("us", tz="UTC")),
            }
        ),
        nested,
        row_group_size=1,
    )
    for path, kept in ((no_stats, [1, 3]), (nested, [5, 7])):
        out = tmp_path / path.stem
        retain_rows(_input([path]), _plan(path), [], out, cutoff_us=BASE_US)
        assert _offsets(out) == kept, path.stem


def test_a_file_wholly_before_the_cutoff_gives_no_rows_in_its_schema(tmp_path: Path) -> None:
    """A file whose every row group ends before the cut-off gives no rows (its schema kept);
    one with a late row group gives that group's rows."""
    micros = [BASE_US - 30, BASE_US - 20, BASE_US + 10]
    path = _rows(tmp_path / "s.parquet", [0, 1, 2], micros)
    out = tmp_path / "input-0"
    early = _rows(tmp_path / "early.parquet", [0, 1], micros[:2])
    assert retain_rows(_input([early]), _plan(early), [], out, cutoff_us=BASE_US) == 0
    assert pq.read_table(out / RETAINED_FILE).schema.names == ["offset", "op", "event_time"]
    assert retain_rows(_input([path]), _plan(path), [], out, cutoff_us=BASE_US) == 1
    assert _offsets(out) == [2]


def test_rows_retained_before_a_column_was_added_get_it_as_null(tmp_path: Path) -> None:
    """The input's schema gained a column (and lost one) since rows were retained: those rows
    are written in the new schema, the added column null for them, the dropped one gone.
    (Read in the old schema, a stateful query over an input whose schema evolved fails on
    its next run with KeyError.)"""
    old = _rows(tmp_path / "old.parquet", [0], [BASE_US], gone=pa.array([1], pa.int64()))
    new = _rows(tmp_path / "new.parquet", [1], [BASE_US], w=pa.array(["x"], pa.string()))
    out = tmp_path / "input-0"
    assert retain_rows(_input([new]), _plan(new), [old], out, cutoff_us=None) == 2
    table = pq.read_table(out / RETAINED_FILE)
    assert table.schema.names == ["offset", "op", "event_time", "w"]
    assert table.column("w").to_pylist() == [None, "x"]


def test_retained_rows_before_the_cutoff_are_dropped(tmp_path: Path) -> None:
    """The cut-off applies to the previously retained rows too, row by row: a row group that
    reaches the cut-off is read, and its rows before it are dropped."""
    old = tmp_path / "old.parquet"
    pq.write_table(
        pa.table(
            {
                "offset": pa.array([0, 1], pa.int64()),
                "event_time": pa.array([BASE_US - 1, BASE_US + 1], pa.timestamp("us", tz="UTC")),
            }
        ),
        old,
    )
    s = _rows(tmp_path / "s.parquet", [2], [BASE_US])
    out = tmp_path / "input-0"
    assert retain_rows(_input([s]), _plan(s), [old], out, cutoff_us=BASE_US) == 2
    assert _offsets(out) == [1, 2]


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_read_skips_exactly_the_row_groups_that_end_before_the_cutoff(
    tmp_path: Path, unit: str
) -> None:
    """The pruning itself (module docstring): the row groups whose event-time maximum is
    before the cut-off are not read, all others are; with every group kept the file is read
    whole, with none an empty table of its schema. The event time may be the first column."""
    from engine.streaming.retain import _read

    per = {"ms": 1_000, "us": 1}[unit]
    c = BASE_US // per
    path = tmp_path / "s.parquet"
    pq.write_table(
        pa.table(
            {
                "event_time": pa.array([c - 2, c - 1, c, c + 1], pa.timestamp(unit, tz="UTC")),
                "offset": pa.array([0, 1, 2, 3], pa.int64()),
            }
        ),
        path,
        row_group_size=1,
    )
    inp = _input([path])

    def offsets(cutoff_us: int | None) -> list[int]:
        got: list[int] = _read(path, inp, cutoff_us).column("offset").to_pylist()
        return got

    assert offsets(c * per) == [2, 3]
    assert offsets((c - 1) * per) == [1, 2, 3]
    assert offsets((c - 2) * per) == [0, 1, 2, 3]
    assert offsets(None) == [0, 1, 2, 3]
    assert offsets((c + 2) * per) == []
    assert _read(path, inp, (c + 2) * per).schema.names == ["event_time", "offset"]


def test_only_a_top_level_timestamp_event_time_prunes(tmp_path: Path) -> None:
    """Statistics prune only for an event-time column that is a top-level timestamp: an
    integer column of that name, or none, reads every row group."""
    from engine.streaming.retain import _event_time_field

    ts = pa.timestamp("ms", tz="UTC")
    assert _event_time_field(pa.schema([("event_time", ts)]), "event_time") == (0, "ms")
    assert _event_time_field(pa.schema([("a", pa.int64()), ("event_time", ts)]), "event_time") == (
        1,
        "ms",
    )
    assert _event_time_field(pa.schema([("event_time", pa.int64())]), "event_time") is None
    assert _event_time_field(pa.schema([("other", ts)]), "event_time") is None


def test_a_row_group_of_null_event_times_is_read_not_skipped(tmp_path: Path) -> None:
    """A row group whose event times are all null has statistics without a minimum or
    maximum: it proves nothing, so it is read (its rows, null, then fail the cut-off)."""
    path = tmp_path / "s.parquet"
    pq.write_table(
        pa.table(
            {
                "offset": pa.array([0, 1], pa.int64()),
                "event_time": pa.array([None, BASE_US], pa.timestamp("us", tz="UTC")),
            }
        ),
        path,
        row_group_size=1,
    )
    out = tmp_path / "input-0"
    assert retain_rows(_input([path]), _plan(path), [], out, cutoff_us=BASE_US) == 1
    assert _offsets(out) == [1]
