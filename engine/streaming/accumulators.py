"""Per-group accumulators of a decomposable GROUP BY: merge a run's partials, emit what changed.

The state is one row per group (written with pyarrow, no Spark job): the group's keys
(`key_column`), its accumulators (`acc_column`, and `count_column` for ``avg``), the
output row emitted for it (``__odf_o<m>``: needed to retract it, whatever the query
outputs) and whether that row is live (emitted and not retracted, ``__odf_live``).

A run (`merge_partials`) takes the partial accumulators of its new rows (one row per
group touched, computed by Spark with `engine.streaming.accumulate.partial_sql`), merges
them into the state, computes each group's output row, and emits, for each group whose
live row must change, in the order of the groups' keys:

- a new group (or one whose row just became final): ``+A`` (op 0) of its row;
- a changed group: ``-C`` (op 2) of the old row immediately followed by ``+C`` (op 3) of
  the new one (RFC-015's correction pair);
- a group whose new row is not final yet (its event time after the gate): ``-R`` (op 1)
  of the old row; the new one is emitted once the watermark reaches it.

A row is final as in the changelog mode: its event time at or before the gate, or NULL,
or no gate yet (no watermark). Folded, the output is then the query's answer over all
input so far restricted to final rows: what the changelog mode's output folds to.

Every step is single-threaded pyarrow over rows sorted by the keys, so the same state and
partials give the same output and state bytes (replay).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from engine.streaming.accumulate import (
    AccumulatorQuery,
    acc_column,
    count_column,
    key_column,
)

__all__ = ["LIVE_COLUMN", "AccumulatorRun", "emitted_column", "merge_partials"]

#: Whether a group's output row is live (emitted, not retracted).
LIVE_COLUMN: Final = "__odf_live"
#: The key of the one group of a global aggregate (no GROUP BY).
_GLOBAL_KEY: Final = "__odf_global"
_SUM_TYPE: Final = pa.decimal128(38, 0)
_TS_US: Final = pa.timestamp("us", tz="UTC")
_US_PER_DAY: Final = 86_400_000_000
_MERGE: Final = {"COUNT": "sum", "SUM": "sum", "AVG": "sum", "MIN": "min", "MAX": "max"}


def emitted_column(m: int) -> str:
    """Name of the ``m``-th output column of the row emitted for a group."""
    return f"__odf_o{m}"


@dataclass(frozen=True, slots=True)
class AccumulatorRun:
    """One run's changes (``op`` first, then the output columns) and the new state."""

    changes: pa.Table
    state: pa.Table


def merge_partials(
    query: AccumulatorQuery,
    state: pa.Table | None,
    partial: pa.Table,
    names: Sequence[str],
    event_time: str,
    gate_us: int | None,
) -> AccumulatorRun:
    """Merge ``partial`` into ``state`` and emit the changed groups (module docstring).

    Args:
        query: the query's decomposition.
        state: the previous run's state (None: the first run).
        partial: the new rows' partial accumulators, one row per group.
        names: the output column names, one per ``query.items``.
        event_time: the output's event-time column (one of ``names``).
        gate_us: rows whose event time is at or before it (µs) are final; None: all.

    Raises:
        pyarrow.ArrowInvalid: a sum or count beyond a 64-bit integer (as Spark refuses).
    """
    merged = _merge(query, _with_global_key(query, state), _with_global_key(query, partial))
    merged = merged.take(pc.sort_indices(merged, sort_keys=_sort_keys(query)))
    new = _outputs(query, merged, names)
    final = _final(new.column(names.index(event_time)), gate_us)
    live = pc.fill_null(merged.column(LIVE_COLUMN), False)
    if state is None or state.num_rows == 0:
        old = new  # nothing was emitted yet: every group is not live
    else:
        old = pa.table(
            [merged.column(emitted_column(m)) for m in range(len(names))], names=list(names)
        )
    same = _rows_equal(old, new)
    retract = pc.and_(live, pc.or_(pc.invert(final), pc.invert(same)))
    add = pc.and_(final, pc.or_(pc.invert(live), pc.invert(same)))
    changes = _interleave(old, new, retract, add, final, live)
    keep = [key_column(i) for i in range(_key_count(query))] + _acc_names(query)
    state_cols = [merged.column(c) for c in keep] + list(new.columns) + [final]
    state_names = keep + [emitted_column(m) for m in range(len(names))] + [LIVE_COLUMN]
    return AccumulatorRun(changes=changes, state=pa.table(state_cols, names=state_names))


def _key_count(query: AccumulatorQuery) -> int:
    """Key columns in partials and state: a global aggregate has one constant key."""
    return len(query.keys) or 1


def _with_global_key(query: AccumulatorQuery, table: pa.Table | None) -> pa.Table | None:
    if table is None or query.keys or key_column(0) in table.column_names:
        return table
    return table.add_column(0, key_column(0), pa.array([0] * table.num_rows, pa.int8()))


def _acc_names(query: AccumulatorQuery) -> list[str]:
    out = []
    for j, agg in enumerate(query.aggregates):
        out.append(acc_column(j))
        if agg.kind == "AVG":
            out.append(count_column(j))
    return out


def _sort_keys(query: AccumulatorQuery) -> list[tuple[str, str]]:
    return [(key_column(i), "ascending") for i in range(_key_count(query))]


def _merge(query: AccumulatorQuery, state: pa.Table | None, partial: pa.Table) -> pa.Table:
    """One row per group: accumulators merged, and the state's emitted row and live flag
    (null for a group the state does not have). Sums are added as 38-digit decimals and
    cast back, so that an overflow raises instead of wrapping."""
    keys = [key_column(i) for i in range(_key_count(query))]
    accs = _acc_names(query)
    carried: list[str] = []
    if state is not None:
        carried = [c for c in state.column_names if c not in keys and c not in accs]
        partial = _conform(partial.select(keys + accs), state.select(keys + accs).schema)
        for c in carried:
            partial = partial.append_column(
                c, pa.nulls(partial.num_rows, state.schema.field(c).type)
            )
        both = pa.concat_tables([state.select(keys + accs + carried), partial])
    else:
        both = partial.select(keys + accs)
    sums = {c for c in accs if _MERGE[_kind(query, c)] == "sum"}
    both = pa.table(
        [
            both.column(c).cast(_SUM_TYPE) if c in sums else both.column(c)
            for c in both.column_names
        ],
        names=both.column_names,
    )
    first = pc.ScalarAggregateOptions(skip_nulls=False)
    aggs: list[tuple[str, str] | tuple[str, str, pc.FunctionOptions]] = [
        (c, _MERGE[_kind(query, c)]) for c in accs
    ]
    aggs += [(c, "first", first) for c in carried]
    # Ordered ("first": the state's row, which comes first), so single-threaded.
    out = both.group_by(keys, use_threads=False).aggregate(aggs)
    renamed = {f"{c}_{_MERGE[_kind(query, c)]}": c for c in accs} | {
        f"{c}_first": c for c in carried
    }
    out = out.rename_columns([renamed.get(c, c) for c in out.column_names])
    types = {c: partial.schema.field(c).type for c in accs}
    cols = [out.column(c).cast(types[c]) if c in sums else out.column(c) for c in out.column_names]
    out = pa.table(cols, names=out.column_names)
    if LIVE_COLUMN not in out.column_names:
        out = out.append_column(LIVE_COLUMN, pa.nulls(out.num_rows, pa.bool_()))
    return out


def _kind(query: AccumulatorQuery, column: str) -> str:
    """The aggregate kind of an accumulator column (``avg``'s count is summed too)."""
    return (
        query.aggregates[int(column[len("__odf_a") :])].kind
        if column.startswith("__odf_a")
        else "COUNT"
    )


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema`` (a partial's types follow the input's, the state's the
    first run's: the same unless the input's schema evolved)."""
    return table if table.schema == schema else table.cast(schema)


def _outputs(query: AccumulatorQuery, merged: pa.Table, names: Sequence[str]) -> pa.Table:
    """Each group's output row, computed from its merged accumulators as Spark computes
    the aggregates: counts and sums as they are, ``avg`` as a double division of the sum
    by the count (NULL over no values)."""
    cols = []
    for item in query.items:
        if item.key:
            cols.append(merged.column(key_column(item.index)))
            continue
        j = item.index
        acc = merged.column(acc_column(j))
        if query.aggregates[j].kind == "COUNT":
            cols.append(pc.fill_null(acc, 0))
        elif query.aggregates[j].kind == "AVG":
            n = merged.column(count_column(j))
            empty = pc.fill_null(pc.equal(n, 0), True)
            ratio = pc.divide(
                pc.cast(acc, pa.float64()), pc.cast(pc.if_else(empty, 1, n), pa.float64())
            )
            cols.append(pc.if_else(empty, pa.nulls(len(ratio), pa.float64()), ratio))
        else:
            cols.append(acc)
    return pa.table(cols, names=list(names))


def _final(event_time: pa.ChunkedArray, gate_us: int | None) -> pa.ChunkedArray:
    """Whether each row is final by the gate (NULL event times are final at once)."""
    if gate_us is None:
        return pa.chunked_array([pa.array([True] * len(event_time), pa.bool_())])
    if pa.types.is_date(event_time.type):
        micros = pc.multiply(pc.cast(pc.cast(event_time, pa.int32()), pa.int64()), _US_PER_DAY)
    else:
        micros = pc.cast(pc.cast(event_time, _TS_US), pa.int64())
    return pc.fill_null(pc.less_equal(micros, gate_us), True)


def _rows_equal(old: pa.Table, new: pa.Table) -> pa.ChunkedArray:
    """Row by row, whether every column is equal (two NULLs are equal)."""
    same: pa.ChunkedArray | None = None
    for a, b in zip(old.columns, new.columns, strict=True):
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        eq = pc.or_(both_null, pc.fill_null(pc.equal(a, b), False))
        same = eq if same is None else pc.and_(same, eq)
    assert same is not None
    return same


def _interleave(
    old: pa.Table,
    new: pa.Table,
    retract: pa.ChunkedArray,
    add: pa.ChunkedArray,
    final: pa.ChunkedArray,
    live: pa.ChunkedArray,
) -> pa.Table:
    """The changes in group order, each group's retraction right before its append (so a
    ``-C`` is immediately followed by its ``+C``)."""
    n = old.num_rows
    pos = pa.array(range(n), pa.int64())
    gone = old.append_column("__pos", pos).append_column("__seq", pa.array([0] * n, pa.int8()))
    gone = gone.append_column("op", pc.cast(pc.if_else(final, 2, 1), pa.int32())).filter(retract)
    came = new.append_column("__pos", pos).append_column("__seq", pa.array([1] * n, pa.int8()))
    came = came.append_column("op", pc.cast(pc.if_else(live, 3, 0), pa.int32())).filter(add)
    both = pa.concat_tables([gone, _conform(came, gone.schema)])
    both = both.take(
        pc.sort_indices(both, sort_keys=[("__pos", "ascending"), ("__seq", "ascending")])
    )
    return both.select(["op", *new.column_names])
