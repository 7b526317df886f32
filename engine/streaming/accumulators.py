"""Per-group accumulators of a decomposable GROUP BY: merge a run's partials, emit what changed.

The state is one row per group (written with pyarrow, no Spark job): the group's keys
(`key_column`), its net row count (`ROWS_COLUMN`), its accumulators (`acc_column`, and
`count_column`: the net count of each argument's non-null values), the output row
emitted for it (``__odf_o<m>``: needed to retract it, whatever the query outputs) and
whether that row is live (emitted and not retracted, ``__odf_live``).

A run (`merge_partials`) takes the partial accumulators of its new rows (one row per
group touched, computed by Spark with `engine.streaming.accumulate.partial_sql`), merges
them into the state, computes each group's output row, and emits, for each group whose
live row must change, in the order of the groups' keys:

- a new group (or one whose row just became final): ``+A`` (op 0) of its row;
- a changed group: ``-C`` (op 2) of the old row immediately followed by ``+C`` (op 3) of
  the new one (RFC-015's correction pair);
- a group whose new row is not final yet (its event time after the gate), or that has no
  rows left: ``-R`` (op 1) of the old row; a row not final is emitted once the watermark
  reaches it.

Input rows that take back an earlier row (``-R``, ``-C``) subtract: counts and sums are
exact under any well-formed changelog. A retractable ``min``/``max`` (one given its
multiset, `engine.streaming.multisets`) takes its extreme from the group's values, so
any retraction is exact. Any other ``min``/``max`` keeps only its extreme: a retraction
of a value beyond it is impossible, of a value short of it changes nothing, and of the
extreme itself, while other values remain, is refused (`InvalidQuery`), since the next
extreme is unknown; so is a count going below zero. A wrong answer is never emitted.

A row is final as in the changelog mode: its event time at or before the gate, or NULL,
or no gate yet (no watermark). Folded, the output is then the query's answer over all
input so far restricted to final rows: what the changelog mode's output folds to.

Every step is single-threaded pyarrow over rows sorted by the keys, so the same state and
partials give the same output and state bytes (replay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import InvalidQuery
from engine.streaming.accumulate import (
    ROWS_COLUMN,
    AccumulatorQuery,
    acc_column,
    copies_column,
    count_column,
    key_column,
    retract_column,
)
from engine.streaming.multisets import extremes_of

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
    values: Mapping[int, pa.Table] | None = None,
) -> AccumulatorRun:
    """Merge ``partial`` into ``state`` and emit the changed groups (module docstring).

    Args:
        query: the query's decomposition.
        state: the previous run's state (None: the first run).
        partial: the new rows' partial accumulators, one row per group.
        names: the output column names, one per ``query.items``.
        event_time: the output's event-time column (one of ``names``).
        gate_us: rows whose event time is at or before it (µs) are final; None: all.
        values: aggregate index -> the merged multiset of a retractable ``min``/``max``
            (`engine.streaming.multisets.merge_values`), whose extreme it gives.

    Raises:
        InvalidQuery: a retraction the state cannot take (`_check_retractions`).
        pyarrow.ArrowInvalid: a sum or count beyond a 64-bit integer (as Spark refuses).
    """
    partial = _with_extremes(query, _with_global_key(query, partial))
    merged = _merge(query, _with_global_key(query, state), partial)
    for j, table in (values or {}).items():
        at = merged.column_names.index(acc_column(j))
        exact = extremes_of(query, j, merged, table).cast(merged.schema.field(at).type)
        merged = merged.set_column(at, acc_column(j), exact)
    merged = _check_retractions(query, merged, frozenset(values or {}))
    merged = merged.take(pc.sort_indices(merged, sort_keys=_sort_keys(query)))
    new = _outputs(query, merged, names)
    final = _final(new.column(names.index(event_time)), gate_us)
    # A group all of whose rows were taken back is no longer in the answer (a global
    # aggregate always has its one row).
    present = (
        pc.greater(merged.column(ROWS_COLUMN), 0)
        if query.keys
        else pa.chunked_array([pa.array([True] * merged.num_rows, pa.bool_())])
    )
    live = pc.fill_null(merged.column(LIVE_COLUMN), False)
    if state is None or state.num_rows == 0 or emitted_column(0) not in state.column_names:
        old = new  # nothing emitted from this state yet: every group is not live
    else:
        old = pa.table(
            [merged.column(emitted_column(m)) for m in range(len(names))], names=list(names)
        )
    same = _rows_equal(old, new)
    shown = pc.and_(present, final)
    retract = pc.and_(live, pc.or_(pc.invert(shown), pc.invert(same)))
    add = pc.and_(shown, pc.or_(pc.invert(live), pc.invert(same)))
    changes = _interleave(old, new, retract, add, shown, live)
    keep = [key_column(i) for i in range(_key_count(query))] + _acc_names(query)
    state_cols = [merged.column(c) for c in keep] + list(new.columns) + [shown]
    state_names = keep + [emitted_column(m) for m in range(len(names))] + [LIVE_COLUMN]
    next_state = pa.table(state_cols, names=state_names).filter(present)
    return AccumulatorRun(changes=changes, state=next_state)


def _check_retractions(
    query: AccumulatorQuery, merged: pa.Table, exact: frozenset[int]
) -> pa.Table:
    """``merged`` with the extreme of every ``min``/``max`` whose values were all taken back
    cleared, after refusing what the state cannot take:

    - a net count below zero: the input takes back a row it never had;
    - a ``min`` (``max``) not in ``exact`` (retractable) whose taken-back values reach its
      extreme while values remain: the state keeps only the extreme, so the new one is
      unknown.

    Raises:
        InvalidQuery: naming the aggregate and what it cannot take.
    """
    counts = [ROWS_COLUMN] + [c for c in _acc_names(query) if c.startswith("__odf_n")]
    counts += [acc_column(j) for j, a in enumerate(query.aggregates) if a.kind == "COUNT"]
    for c in counts:
        if pc.any(pc.less(merged.column(c), 0)).as_py():
            raise InvalidQuery(
                "an input of this aggregation takes back (-R/-C) a row it never added: "
                "its changelog is malformed"
            )
    for j in _extreme_indexes(query):
        agg = query.aggregates[j]
        acc, back, copies, was, n = (
            merged.column(c)
            for c in (
                acc_column(j),
                retract_column(j),
                copies_column(j),
                _state_extreme(j),
                count_column(j),
            )
        )
        at = pc.fill_null(pc.equal(back, acc), False)
        # The extreme taken back is still held if the run adds back as many copies as it
        # takes (and the state held it), or more.
        held = pc.or_(
            pc.and_(pc.greater_equal(copies, 0), pc.fill_null(pc.equal(was, back), False)),
            pc.greater(copies, 0),
        )
        lost = pc.and_(pc.and_(at, pc.invert(held)), pc.greater(n, 0))
        if j not in exact and pc.any(lost).as_py():
            raise InvalidQuery(
                f"{agg.kind.lower()}({agg.arg}): an input takes back (-R/-C) the group's "
                f"{agg.kind.lower()}imum, and this query's state, made over rows that only "
                "added, keeps only that value, not the next one: add the derivative again "
                "(its first run then reads retractions and keeps each group's values)"
            )
        cleared = pc.if_else(pc.equal(n, 0), pa.nulls(len(acc), acc.type), acc)
        merged = merged.set_column(merged.column_names.index(acc_column(j)), acc_column(j), cleared)
    states = [_state_extreme(j) for j in _extreme_indexes(query)]
    return merged.drop_columns(_extreme_names(query) + states)


def _key_count(query: AccumulatorQuery) -> int:
    """Key columns in partials and state: a global aggregate has one constant key."""
    return len(query.keys) or 1


def _with_global_key(query: AccumulatorQuery, table: pa.Table | None) -> pa.Table | None:
    if table is None or query.keys or key_column(0) in table.column_names:
        return table
    return table.add_column(0, key_column(0), pa.array([0] * table.num_rows, pa.int8()))


def _acc_names(query: AccumulatorQuery) -> list[str]:
    """The accumulator columns kept in the state: the net row count, then per aggregate
    its accumulator and (all but ``count``) its net count of values."""
    out = [ROWS_COLUMN]
    for j, agg in enumerate(query.aggregates):
        out.append(acc_column(j))
        if agg.kind != "COUNT":
            out.append(count_column(j))
    return out


def _extreme_names(query: AccumulatorQuery) -> list[str]:
    """The partial's columns about the extremes taken back (``min``/``max`` only): the
    extreme, and the net count of the run's rows holding it."""
    out = []
    for j, agg in enumerate(query.aggregates):
        if agg.kind in ("MIN", "MAX"):
            out += [retract_column(j), copies_column(j)]
    return out


def _extreme_indexes(query: AccumulatorQuery) -> list[int]:
    return [j for j, a in enumerate(query.aggregates) if a.kind in ("MIN", "MAX")]


def _state_extreme(j: int) -> str:
    """Name of the previous state's extreme of the ``j``-th aggregate, during a merge."""
    return f"__odf_s{j}"


def _sort_keys(query: AccumulatorQuery) -> list[tuple[str, str]]:
    return [(key_column(i), "ascending") for i in range(_key_count(query))]


def _merge(query: AccumulatorQuery, state: pa.Table | None, partial: pa.Table) -> pa.Table:
    """One row per group: accumulators merged, the extremes this run takes back, and the
    state's emitted row and live flag (null for a group the state does not have). Sums
    are added as 38-digit decimals and cast back, so that an overflow raises instead of
    wrapping."""
    keys = [key_column(i) for i in range(_key_count(query))]
    accs = _acc_names(query)
    extremes = _extreme_names(query)
    carried: list[str] = []
    if state is not None:
        carried = [c for c in state.column_names if c not in keys and c not in accs]
        partial = _conform(
            partial.select(keys + accs + extremes), _schema(state, partial, keys + accs, extremes)
        )
        partial = _with_nulls(partial, carried, state.schema)
        old = _with_nulls(state.select(keys + accs + carried), extremes, partial.schema)
        for j in _extreme_indexes(query):
            old = old.append_column(_state_extreme(j), old.column(acc_column(j)))
            partial = partial.append_column(
                _state_extreme(j), pa.nulls(partial.num_rows, old.schema.field(acc_column(j)).type)
            )
        extremes = extremes + [_state_extreme(j) for j in _extreme_indexes(query)]
        both = pa.concat_tables(
            [old, partial.select(keys + accs + carried + extremes)], promote_options="permissive"
        )
    else:
        both = partial.select(keys + accs + extremes)
        for j in _extreme_indexes(query):
            kind = both.schema.field(acc_column(j)).type
            both = both.append_column(_state_extreme(j), pa.nulls(both.num_rows, kind))
        extremes = extremes + [_state_extreme(j) for j in _extreme_indexes(query)]
    merges = {c: _MERGE[_kind(query, c)] for c in accs + extremes}
    sums = {c for c, how in merges.items() if how == "sum"}
    types = {c: both.schema.field(c).type for c in sums}
    both = pa.table(
        [
            both.column(c).cast(_SUM_TYPE) if c in sums else both.column(c)
            for c in both.column_names
        ],
        names=both.column_names,
    )
    first = pc.ScalarAggregateOptions(skip_nulls=False)
    aggs: list[tuple[str, str] | tuple[str, str, pc.FunctionOptions]] = list(merges.items())
    aggs += [(c, "first", first) for c in carried]
    # Ordered ("first": the state's row, which comes first), so single-threaded.
    out = both.group_by(keys, use_threads=False).aggregate(aggs)
    renamed = {f"{c}_{how}": c for c, how in merges.items()} | {f"{c}_first": c for c in carried}
    out = out.rename_columns([renamed.get(c, c) for c in out.column_names])
    cols = [out.column(c).cast(types[c]) if c in sums else out.column(c) for c in out.column_names]
    out = pa.table(cols, names=out.column_names)
    if LIVE_COLUMN not in out.column_names:
        out = out.append_column(LIVE_COLUMN, pa.nulls(out.num_rows, pa.bool_()))
    return out


def _schema(
    state: pa.Table, partial: pa.Table, kept: Sequence[str], extremes: Sequence[str]
) -> pa.Schema:
    """The types a partial takes in a merge: the state's for what the state keeps, the
    partial's own for the extremes taken back."""
    fields = [state.schema.field(c) for c in kept] + [partial.schema.field(c) for c in extremes]
    return pa.schema(fields)


def _with_extremes(query: AccumulatorQuery, partial: pa.Table | None) -> pa.Table:
    """``partial`` with its taken-back extremes (NULL, with no copies, when it has none:
    only appends)."""
    assert partial is not None
    for j, agg in enumerate(query.aggregates):
        if agg.kind in ("MIN", "MAX") and retract_column(j) not in partial.column_names:
            kind = partial.schema.field(acc_column(j)).type
            partial = partial.append_column(retract_column(j), pa.nulls(partial.num_rows, kind))
            zeros = pa.array([0] * partial.num_rows, pa.int64())
            partial = partial.append_column(copies_column(j), zeros)
    return partial


def _with_nulls(table: pa.Table, columns: Sequence[str], schema: pa.Schema) -> pa.Table:
    """``table`` with ``columns`` (typed as in ``schema``) appended, all NULL."""
    for c in columns:
        table = table.append_column(c, pa.nulls(table.num_rows, schema.field(c).type))
    return table


def _kind(query: AccumulatorQuery, column: str) -> str:
    """The aggregate kind of an accumulator or taken-back-extreme column; counts of rows
    and values are summed, as counts."""
    for prefix in ("__odf_a", "__odf_r", "__odf_s"):
        if column.startswith(prefix):
            return query.aggregates[int(column[len(prefix) :])].kind
    return "COUNT"


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
        elif query.aggregates[j].kind == "SUM":
            # The sum of no values is NULL, also once every value was taken back.
            none = pc.fill_null(pc.equal(merged.column(count_column(j)), 0), True)
            cols.append(pc.if_else(none, pa.nulls(len(acc), acc.type), acc))
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
