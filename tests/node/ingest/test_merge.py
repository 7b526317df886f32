"""Merge strategies (RFC-015 changelog): unit tests and state-model properties."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.model import (
    MergeStrategyAppend,
    MergeStrategyChangelogStream,
    MergeStrategyLedger,
    MergeStrategySnapshot,
    MergeStrategyUpsertStream,
)
from node.ingest.errors import MergeError
from node.ingest.merge import current_state, merge, required_columns

KEY = ("k",)


def changelog(rows: list[tuple[int, Any, Any]]) -> pa.Table:
    """A changelog table from (op, k, v) rows with offsets 0..n-1."""
    return pa.table(
        {
            "offset": pa.array(range(len(rows)), pa.int64()),
            "op": pa.array([r[0] for r in rows], pa.int32()),
            "k": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def data(ks: list[Any], vs: list[Any], ops: list[int] | None = None) -> pa.Table:
    cols: dict[str, Any] = {"k": pa.array(ks, pa.string()), "v": pa.array(vs, pa.int64())}
    if ops is not None:
        cols["op"] = pa.array(ops, pa.int32())
    return pa.table(cols)


def rows(t: pa.Table) -> list[tuple[Any, ...]]:
    d = t.to_pydict()
    return list(zip(d["op"], d["k"], d["v"], strict=True))


def append_to(log: pa.Table | None, merged: pa.Table) -> pa.Table:
    start = 0 if log is None else log.num_rows
    new = merged.add_column(
        0, "offset", pa.array(range(start, start + merged.num_rows), pa.int64())
    )
    new = new.select(["offset", "op", "k", "v"])
    return new if log is None else pa.concat_tables([log, new])


def live(log: pa.Table | None) -> dict[Any, Any]:
    if log is None:
        return {}
    d = current_state(log, KEY).to_pydict()
    return dict(zip(d["k"], d["v"], strict=True))


# -- Append / Ledger ---------------------------------------------------------------------------


def test_append_marks_every_row_as_append_in_input_order() -> None:
    out = merge(MergeStrategyAppend(), data(["b", "a", "b"], [1, 2, 3]), None)
    assert rows(out) == [(0, "b", 1), (0, "a", 2), (0, "b", 3)]
    assert out.schema.field("op").type == pa.int32()
    assert out.column_names == ["op", "k", "v"]


def test_append_refuses_an_op_column() -> None:
    with pytest.raises(MergeError, match="reserved"):
        merge(MergeStrategyAppend(), data(["a"], [1], [0]), None)


def test_ledger_skips_keys_already_in_the_dataset_and_in_the_batch() -> None:
    old = changelog([(0, "a", 1), (0, None, 2)])
    out = merge(
        MergeStrategyLedger(primary_key=KEY), data(["a", "z", "z", None, "y"], [9, 1, 2, 3, 4]), old
    )
    # "a" and the null key were seen; the second "z" repeats the first.
    assert rows(out) == [(0, "z", 1), (0, "y", 4)]


def test_required_columns() -> None:
    assert required_columns(MergeStrategyAppend()) == []
    assert required_columns(MergeStrategyLedger(primary_key=KEY)) == ["offset", "k"]
    assert required_columns(MergeStrategySnapshot(primary_key=KEY)) is None


# -- Snapshot ----------------------------------------------------------------------------------


def test_snapshot_emits_append_retract_and_correction_pairs() -> None:
    old = changelog([(0, "a", 1), (0, "b", 2), (0, "c", 3)])
    out = merge(MergeStrategySnapshot(primary_key=KEY), data(["d", "b", "a"], [4, 20, 1]), old)
    # -R first (by old offset), then in snapshot order: +A d, -C/+C b; "a" is unchanged.
    assert rows(out) == [(1, "c", 3), (0, "d", 4), (2, "b", 2), (3, "b", 20)]


def test_snapshot_first_time_is_all_appends() -> None:
    out = merge(MergeStrategySnapshot(primary_key=KEY), data(["x", "y"], [1, 2]), None)
    assert rows(out) == [(0, "x", 1), (0, "y", 2)]


def test_snapshot_refuses_duplicate_keys_naming_them() -> None:
    with pytest.raises(MergeError, match=r"duplicate primary key.*'k': 'a'"):
        merge(MergeStrategySnapshot(primary_key=KEY), data(["a", "b", "a"], [1, 2, 3]), None)


def test_snapshot_compare_columns_limit_what_counts_as_a_change() -> None:
    old = pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "op": pa.array([0], pa.int32()),
            "k": ["a"],
            "v": [1],
            "note": ["x"],
        }
    )
    new = pa.table({"k": ["a"], "v": [1], "note": ["changed"]})
    same = merge(MergeStrategySnapshot(primary_key=KEY, compare_columns=("v",)), new, old)
    assert same.num_rows == 0
    changed = merge(MergeStrategySnapshot(primary_key=KEY), new, old)
    assert changed.column("op").to_pylist() == [2, 3]


def test_snapshot_ignores_event_time_by_default() -> None:
    ts = pa.timestamp("ms", "UTC")
    old = pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "op": pa.array([0], pa.int32()),
            "event_time": pa.array([0], ts),
            "k": ["a"],
            "v": [1],
        }
    )
    new = pa.table({"event_time": pa.array([1000], ts), "k": ["a"], "v": [1]})
    assert merge(MergeStrategySnapshot(primary_key=KEY), new, old).num_rows == 0


def test_snapshot_missing_key_column() -> None:
    with pytest.raises(MergeError, match="primary key column"):
        merge(MergeStrategySnapshot(primary_key=("id",)), data(["a"], [1]), None)


def test_snapshot_null_keys_match_each_other() -> None:
    old = changelog([(0, None, 1)])
    out = merge(MergeStrategySnapshot(primary_key=KEY), data([None], [2]), old)
    assert rows(out) == [(2, None, 1), (3, None, 2)]


NESTED = {
    "list": (pa.list_(pa.string()), [["x"], ["x", "y"], [], None]),
    "struct": (
        pa.struct([("a", pa.int64()), ("b", pa.string())]),
        [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": None, "b": None}, None],
    ),
    "map": (pa.map_(pa.string(), pa.int64()), [[("a", 1)], [("a", 2)], [], None]),
}


def _nested_log(t: pa.DataType, value: Any) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "op": pa.array([0], pa.int32()),
            "k": ["a"],
            "n": pa.array([value], t),
        }
    )


@pytest.mark.parametrize("kind", list(NESTED))
@pytest.mark.parametrize(
    "strategy",
    [MergeStrategySnapshot(primary_key=KEY), MergeStrategyUpsertStream(primary_key=KEY)],
    ids=["snapshot", "upsert"],
)
def test_nested_value_columns_are_compared_by_value(kind: str, strategy: Any) -> None:
    """Arrow has no comparison kernel for lists, structs or maps: such a column is
    still compared, never ending the ingest with a traceback (exit 1), even on its first
    snapshot."""
    t, values = NESTED[kind]
    for old_v in values:
        for new_v in values:
            old = _nested_log(t, old_v)
            new = pa.table({"k": ["a"], "n": pa.array([new_v], t)})
            ops = merge(strategy, new, old).column("op").to_pylist()
            assert ops == ([] if old_v == new_v else [2, 3]), (old_v, new_v)
    first = merge(strategy, pa.table({"k": ["a", "b"], "n": pa.array(values[:2], t)}), None)
    assert first.column("op").to_pylist() == [0, 0]


@pytest.mark.parametrize(
    "strategy",
    [
        MergeStrategySnapshot(primary_key=("n",)),
        MergeStrategyUpsertStream(primary_key=("n",)),
        MergeStrategyLedger(primary_key=("n",)),
        MergeStrategyChangelogStream(primary_key=("n",)),
    ],
    ids=["snapshot", "upsert", "ledger", "changelog"],
)
def test_nested_primary_key_is_refused_by_name(strategy: Any) -> None:
    t, values = NESTED["list"]
    new = pa.table({"n": pa.array(values[:1], t), "op": pa.array([0], pa.int32())})
    if not isinstance(strategy, (MergeStrategyChangelogStream, MergeStrategyUpsertStream)):
        new = new.drop_columns(["op"])
    with pytest.raises(MergeError, match=r"primary key column 'n': type list<.*not supported"):
        merge(strategy, new, None)


# -- ChangelogStream ---------------------------------------------------------------------------


def test_changelog_stream_passes_valid_input_through() -> None:
    inp = data(["a", "a", "a", "a"], [1, 1, 2, 2], [0, 2, 3, 1])
    assert rows(merge(MergeStrategyChangelogStream(primary_key=KEY), inp, None)) == [
        (0, "a", 1),
        (2, "a", 1),
        (3, "a", 2),
        (1, "a", 2),
    ]


@pytest.mark.parametrize(
    ("ops", "match"),
    [
        ([0, 7], "not in 0..3"),
        ([2, 0], "followed by a \\+C"),
        ([3], "must immediately follow"),
        ([0, 2], "followed by a \\+C"),
    ],
)
def test_changelog_stream_validation(ops: list[int], match: str) -> None:
    inp = data(["a"] * len(ops), [1] * len(ops), ops)
    with pytest.raises(MergeError, match=match):
        merge(MergeStrategyChangelogStream(primary_key=KEY), inp, None)


def test_changelog_stream_needs_op_and_same_key_in_pairs() -> None:
    with pytest.raises(MergeError, match="must carry"):
        merge(MergeStrategyChangelogStream(primary_key=KEY), data(["a"], [1]), None)
    with pytest.raises(MergeError, match="changes primary key"):
        merge(MergeStrategyChangelogStream(primary_key=KEY), data(["a", "b"], [1, 2], [2, 3]), None)


# -- UpsertStream ------------------------------------------------------------------------------


def test_upsert_resolves_against_current_state() -> None:
    old = changelog([(0, "a", 1), (0, "b", 2), (0, "c", 3)])
    inp = data(["a", "b", "x", "c", "d"], [1, 20, 0, 0, 4], [0, 0, 1, 1, 0])
    out = merge(MergeStrategyUpsertStream(primary_key=KEY), inp, old)
    # a unchanged → dropped; b updated; x deleted but missing → dropped; c deleted; d new.
    assert rows(out) == [(2, "b", 2), (3, "b", 20), (1, "c", 3), (0, "d", 4)]


def test_upsert_last_row_per_key_wins() -> None:
    inp = data(["a", "a", "b", "b"], [1, 2, 5, 0], [0, 0, 0, 1])
    out = merge(MergeStrategyUpsertStream(primary_key=KEY), inp, None)
    assert rows(out) == [(0, "a", 2)]  # b's last op is a delete of a missing key


def test_upsert_without_op_column_means_upsert() -> None:
    out = merge(MergeStrategyUpsertStream(primary_key=KEY), data(["a"], [1]), None)
    assert rows(out) == [(0, "a", 1)]


def test_upsert_rejects_bad_op_values() -> None:
    with pytest.raises(MergeError, match="0 \\(upsert\\) or 1 \\(delete\\)"):
        merge(MergeStrategyUpsertStream(primary_key=KEY), data(["a"], [1], [3]), None)


def test_upsert_after_delete_reinserts() -> None:
    log = changelog([(0, "a", 1), (1, "a", 1)])
    out = merge(MergeStrategyUpsertStream(primary_key=KEY), data(["a"], [5]), log)
    assert rows(out) == [(0, "a", 5)]


def test_current_state_applies_retractions_and_corrections() -> None:
    log = changelog([(0, "a", 1), (0, "b", 2), (2, "a", 1), (3, "a", 5), (1, "b", 2), (0, "c", 7)])
    assert live(log) == {"a": 5, "c": 7}


# -- properties --------------------------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "d", None])
_snapshots = st.dictionaries(_keys, st.integers(0, 3), max_size=5)


@settings(max_examples=60, deadline=None)
@given(st.lists(_snapshots, min_size=1, max_size=4))
def test_snapshot_sequence_state_equals_latest_snapshot(snaps: list[dict[Any, int]]) -> None:
    log: pa.Table | None = None
    for snap in snaps:
        merged = merge(
            MergeStrategySnapshot(primary_key=KEY), data(list(snap), list(snap.values())), log
        )
        ops = merged.column("op").to_pylist()
        for i, op in enumerate(ops):  # every -C is followed by its +C
            if op == 2:
                assert ops[i + 1] == 3
        log = append_to(log, merged)
        assert live(log) == snap


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(_keys, st.integers(0, 3), st.sampled_from([0, 1])), max_size=6),
        min_size=1,
        max_size=4,
    )
)
def test_upsert_state_matches_a_dict_model(batches: list[list[tuple[Any, int, int]]]) -> None:
    log: pa.Table | None = None
    model: dict[Any, int] = {}
    for batch in batches:
        inp = data([b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch])
        log = append_to(log, merge(MergeStrategyUpsertStream(primary_key=KEY), inp, log))
        for k, v, op in batch:
            if op == 1:
                model.pop(k, None)
            else:
                model[k] = v
        assert live(log) == model


def test_merge_output_is_deterministic() -> None:
    old = changelog([(0, str(i), i) for i in range(200)])
    inp = data([str(i) for i in range(100, 300)], [i * 2 for i in range(100, 300)])
    first = merge(MergeStrategySnapshot(primary_key=KEY), inp, old)
    for _ in range(3):
        assert merge(MergeStrategySnapshot(primary_key=KEY), inp, old).equals(first)
