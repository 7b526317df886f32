"""Retractable ``min``/``max``: each group's values of the argument, with their counts.

An accumulator that keeps only a group's extreme cannot tell the next one once the input
takes the extreme back. A *retractable* ``min``/``max`` keeps, per group, the multiset of
its argument's non-null values (value -> net count of rows holding it), so taking back
any value, the extreme included, leaves the exact extreme of what remains.

Which aggregates keep one: every ``min``/``max`` of an accumulator state whose input
takes rows back (``-R``/``-C``) in the state's first run, for every group, from that run
on. The engine sees only each run's new rows, so a multiset must hold a group's values
from its first row: one started at a group's first retraction would miss the values
before it. A state made over rows that only add keeps the extremes alone, and keeps
that for its life (`engine.streaming.accumulators` refuses, by name, a later retraction
of an extreme while other values remain).

A multiset is one Parquet file per aggregate (`values_file`), sorted by the group keys
and the value: the keys (`key_column`), `VALUE_COLUMN`, `COPIES_COLUMN` (at least 1). A
run adds the net counts of its new rows (`value_delta_sql`, computed by Spark) and drops
the values whose count reaches zero; a count below zero (a value taken back that the
group never held) is refused by name. Single-threaded pyarrow over sorted rows: the
same multiset and new rows give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import InvalidQuery
from engine.streaming.accumulate import AccumulatorQuery, key_column

__all__ = [
    "COPIES_COLUMN",
    "VALUE_COLUMN",
    "extremes_of",
    "merge_values",
    "value_delta_sql",
    "values_file",
    "write_values",
]

#: Column of a multiset's value.
VALUE_COLUMN: Final = "__odf_value"
#: Column of the net count of rows holding the value.
COPIES_COLUMN: Final = "__odf_copies"


def values_file(j: int) -> str:
    """Name of the ``j``-th aggregate's multiset file in the accumulators folder."""
    return f"values-{j}.parquet"


def value_delta_sql(query: AccumulatorQuery, j: int, retracts: str | None) -> str:
    """The query giving, over the new rows, the net count of each (group, value) of the
    ``j``-th aggregate's argument; ``retracts`` is the condition of a row taking one back
    (None: every row adds). NULL values are kept here and dropped by `merge_values`."""
    arg = query.aggregates[j].arg
    sign = "count(*)" if retracts is None else f"sum(CASE WHEN ({retracts}) THEN -1 ELSE 1 END)"
    cols = [f"{k} AS {key_column(i)}" for i, k in enumerate(query.keys)]
    cols += [f"{arg} AS {VALUE_COLUMN}", f"CAST({sign} AS BIGINT) AS {COPIES_COLUMN}"]
    return f"SELECT {', '.join(cols)} {query.source} GROUP BY {', '.join([*query.keys, arg])}"


def merge_values(
    query: AccumulatorQuery, j: int, old: pa.Table | None, delta: pa.Table
) -> pa.Table:
    """The ``j``-th aggregate's multiset after adding ``delta`` (`value_delta_sql`'s rows)
    to ``old`` (None: empty).

    Raises:
        InvalidQuery: a value's count below zero, naming the aggregate.
    """
    keys = _keys(query)
    delta = _with_global_key(query, delta)
    delta = delta.select([*keys, VALUE_COLUMN, COPIES_COLUMN]).filter(
        pc.is_valid(delta.column(VALUE_COLUMN))
    )
    both = delta if old is None else pa.concat_tables([old, delta.cast(old.schema)])
    out = both.group_by([*keys, VALUE_COLUMN], use_threads=False).aggregate(
        [(COPIES_COLUMN, "sum")]
    )
    out = out.rename_columns([COPIES_COLUMN if c.endswith("_sum") else c for c in out.column_names])
    out = out.select([*keys, VALUE_COLUMN, COPIES_COLUMN])
    if pc.any(pc.less(out.column(COPIES_COLUMN), 0)).as_py():
        agg = query.aggregates[j]
        raise InvalidQuery(
            f"{agg.kind.lower()}({agg.arg}): an input takes back (-R/-C) a value its group "
            "never held: its changelog is malformed"
        )
    out = out.filter(pc.greater(out.column(COPIES_COLUMN), 0))
    return out.sort_by([(c, "ascending") for c in [*keys, VALUE_COLUMN]])


def extremes_of(
    query: AccumulatorQuery, j: int, groups: pa.Table, values: pa.Table
) -> pa.ChunkedArray:
    """The ``j``-th aggregate's extreme for each row of ``groups`` (one row per group, its
    keys as `key_column`), from its multiset ``values``; NULL for a group with none."""
    keys = _keys(query)
    n = groups.num_rows
    probe = groups.select(keys).cast(values.select(keys).schema)
    probe = probe.append_column(VALUE_COLUMN, pa.nulls(n, values.schema.field(VALUE_COLUMN).type))
    both = pa.concat_tables([probe, values.select([*keys, VALUE_COLUMN])])
    how = query.aggregates[j].kind.lower()
    # Groups come out in the order they first appear: ``groups``' rows first, in order.
    out = both.group_by(keys, use_threads=False).aggregate([(VALUE_COLUMN, how)])
    return out.column(f"{VALUE_COLUMN}_{how}").slice(0, n)


def write_values(table: pa.Table, path: Path) -> None:
    """Write a multiset to ``path``. Its values are sorted within each group, so integer,
    date and timestamp values are delta-encoded (a group's event times take about half the
    bytes of plain encoding); the counts too."""
    import pyarrow.parquet as pq

    deltas = {COPIES_COLUMN: "DELTA_BINARY_PACKED"}
    kind = table.schema.field(VALUE_COLUMN).type
    if pa.types.is_integer(kind) or pa.types.is_temporal(kind):
        deltas[VALUE_COLUMN] = "DELTA_BINARY_PACKED"
    plain = [c for c in table.column_names if c not in deltas]
    pq.write_table(table, path, use_dictionary=plain, column_encoding=deltas)


def _keys(query: AccumulatorQuery) -> Sequence[str]:
    return [key_column(i) for i in range(len(query.keys) or 1)]


def _with_global_key(query: AccumulatorQuery, table: pa.Table) -> pa.Table:
    """``table`` with the one constant key of a global aggregate (as its accumulators)."""
    if query.keys or key_column(0) in table.column_names:
        return table
    return table.add_column(0, key_column(0), pa.array([0] * table.num_rows, pa.int8()))
