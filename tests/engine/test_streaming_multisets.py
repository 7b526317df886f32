"""The multiset merge of retractable min/max, in pyarrow alone (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import InvalidQuery
from engine.streaming.accumulate import parse_accumulator_query
from engine.streaming.multisets import extremes_of, merge_values, write_values

QUERY = parse_accumulator_query("SELECT k, min(v) AS lo, max(v) AS hi FROM ev GROUP BY k")
GLOBAL = parse_accumulator_query("SELECT max(v) AS hi FROM ev")


def _delta(rows: list[tuple[str | None, int | None, int]]) -> pa.Table:
    k, v, n = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {
            "__odf_k0": pa.array(k, pa.string()),
            "__odf_value": pa.array(v, pa.int64()),
            "__odf_copies": pa.array(n, pa.int64()),
        }
    )


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


def test_counts_add_and_values_at_zero_leave() -> None:
    assert QUERY is not None
    one = merge_values(QUERY, 1, None, _delta([("b", 3, 1), ("a", 9, 2), ("a", None, 1)]))
    assert _rows(one) == [("a", 9, 2), ("b", 3, 1)]
    two = merge_values(QUERY, 1, one, _delta([("a", 9, -2), ("a", 4, 1), ("b", 3, 1)]))
    assert _rows(two) == [("a", 4, 1), ("b", 3, 2)]


def test_a_count_below_zero_is_refused_by_name() -> None:
    assert QUERY is not None
    one = merge_values(QUERY, 1, None, _delta([("a", 9, 1)]))
    with pytest.raises(InvalidQuery, match=r"max\(v\).*never held"):
        merge_values(QUERY, 1, one, _delta([("a", 9, -2)]))
    with pytest.raises(InvalidQuery, match="never held"):
        merge_values(QUERY, 1, one, _delta([("a", 8, -1), ("a", 8, 0)]))


def test_extremes_follow_the_groups_rows() -> None:
    assert QUERY is not None
    values = merge_values(
        QUERY, 1, None, _delta([("a", 9, 1), ("a", 4, 3), ("b", 3, 1), (None, 7, 1)])
    )
    groups = pa.table({"__odf_k0": pa.array(["c", "b", None, "a"], pa.string())})
    assert extremes_of(QUERY, 0, groups, values).to_pylist() == [None, 3, 7, 4]
    assert extremes_of(QUERY, 1, groups, values).to_pylist() == [None, 3, 7, 9]


def test_a_global_aggregate_has_one_group() -> None:
    assert GLOBAL is not None
    delta = _delta([(None, 5, 1), (None, 8, 1)]).drop_columns(["__odf_k0"])
    values = merge_values(GLOBAL, 0, None, delta)
    groups = pa.table({"__odf_k0": pa.array([0], pa.int8())})
    assert extremes_of(GLOBAL, 0, groups, values).to_pylist() == [8]
    less = merge_values(GLOBAL, 0, values, _delta([(None, 8, -1)]).drop_columns(["__odf_k0"]))
    assert extremes_of(GLOBAL, 0, groups, less).to_pylist() == [5]


def test_a_global_key_is_the_accumulators_and_never_doubled() -> None:
    assert GLOBAL is not None
    delta = _delta([(None, 5, 1)]).drop_columns(["__odf_k0"])
    values = merge_values(GLOBAL, 0, None, delta)
    assert values.column_names == ["__odf_k0", "__odf_value", "__odf_copies"]
    assert values.schema.field("__odf_k0").type == pa.int8()
    keyed = delta.add_column(0, "__odf_k0", pa.array([0], pa.int8()))
    assert _rows(merge_values(GLOBAL, 0, values, keyed)) == [(0, 5, 2)]


def test_extremes_are_only_for_the_groups_asked() -> None:
    assert QUERY is not None
    values = merge_values(QUERY, 1, None, _delta([("a", 9, 1), ("z", 1, 1)]))
    groups = pa.table({"__odf_k0": pa.array(["a"], pa.string())})
    assert extremes_of(QUERY, 1, groups, values).to_pylist() == [9]


@pytest.mark.parametrize(
    "kind",
    [pa.int8(), pa.int64(), pa.date32(), pa.timestamp("us", tz="UTC"), pa.string(), pa.bool_()],
)
def test_a_multiset_of_any_ordered_type_reads_back(kind: pa.DataType, tmp_path: Path) -> None:
    assert QUERY is not None
    raw = {"string": ["x", "y"], "bool": [False, True]}.get(str(kind), [1, 2])
    delta = _delta([("a", 0, 1), ("b", 0, 2)]).set_column(1, "__odf_value", pa.array(raw, kind))
    values = merge_values(QUERY, 1, None, delta)
    write_values(values, tmp_path / "values-1.parquet")
    assert pq.read_table(tmp_path / "values-1.parquet").equals(values)
