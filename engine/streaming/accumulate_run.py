"""Run a decomposable GROUP BY (or global aggregate) on its accumulators, not its history.

`accumulator_query` decides, from the query text (`engine.streaming.accumulate`), its
optimized plan and its types, whether a query can keep `MODE_ACCUMULATE` state: one
input, one step, one deterministic ``Aggregate`` over narrow nodes, exact types, and
its output columns those of the parsed shape. A ``min``/``max`` whose input takes rows
back in the state's first run is retractable: it keeps each group's values
(`engine.streaming.multisets`) beside the accumulators, from that run on; otherwise it
keeps only its extreme. A state's mode never changes afterwards.

`run_accumulate` is one run: Spark aggregates the new rows alone into partial
accumulators (one row per group touched; rows taking back an earlier one subtract),
`engine.streaming.accumulators.merge_partials` merges them into the previous state and
gives the changes of the groups whose row changed, which are written as the output file
(pyarrow, `engine.collected_output.write_arrow_output`), and the merged accumulators
are the whole new state. So a run's cost and its checkpoint follow the new rows and the
number of groups, not the history, and a run is a pure function of the previous state
and the new input (replay writes the same rows).

A new query over an accumulator state (Migrate Query) cannot be computed over the
earlier input, which the state does not keep: `carry_over` takes the accumulators of the
aggregates it shares with the old query (same input, WHERE and keys; the old query's text
is in the state file's footer), the first run retracts every live row of the old query
and appends the new query's rows; a new query needing an accumulator the state lacks is
refused by name, as is one that is not decomposable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from engine.collected_output import write_arrow_output
from engine.errors import InvalidQuery
from engine.inputs import (
    NARROW_PLAN_NODES,
    PARTITIONING_PLAN_NODES,
    InputPlan,
    read_input,
)
from engine.output import finish_output
from engine.sql import quote_identifier, register_view
from engine.streaming.accumulate import (
    ROWS_COLUMN,
    AccumulatorQuery,
    AggregateCall,
    acc_column,
    accumulator_types_ok,
    count_column,
    key_column,
    parse_accumulator_query,
    partial_sql,
)
from engine.streaming.accumulators import LIVE_COLUMN, emitted_column, merge_partials
from engine.streaming.footers import max_op
from engine.streaming.multisets import merge_values, value_delta_sql, values_file, write_values
from engine.streaming.rewrite import RewrittenQuery
from engine.streaming.state import ACCUMULATORS_DIR, MODE_ACCUMULATE, StreamState
from fbs.model.engine import TransformRequest

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ACCUMULATORS_FILE", "QUERY_KEY", "accumulator_query", "carry_over", "run_accumulate"]

#: Footer key of the state file holding the query that made it (for Migrate Query).
QUERY_KEY: Final = b"odf.accumulator.query"
#: The state's one file, in `ACCUMULATORS_DIR`.
ACCUMULATORS_FILE: Final = "state.parquet"
#: Analyzed plan nodes an accumulator query may have besides its one ``Aggregate``.
_PASSING_NODES: Final = (
    NARROW_PLAN_NODES - {"Generate"}
    | PARTITIONING_PLAN_NODES
    | {
        "SubqueryAlias",
        "View",
    }
)
_NEW_GROUPS: Final = (
    "a new query over an aggregation's state must read the same input with the same WHERE "
    "and GROUP BY (the state keeps one accumulator row per group, not input rows): add the "
    "derivative again to compute it over all its input"
)
_KEEP_COLUMNS: Final = "a new query over an aggregation's state must keep its output columns"
#: ``op`` values of rows that take back an earlier row (``-R``, ``-C``).
_TAKE_BACK: Final = "IN (1, 2)"


def accumulator_query(
    session: SparkSession,
    request: TransformRequest,
    query: RewrittenQuery,
    result: DataFrame,
) -> AccumulatorQuery | None:
    """The decomposition of ``query`` if it can keep accumulators, else None.

    ``result``: the query's output (hidden columns dropped) over its input views.
    """
    if (
        len(request.query_inputs) != 1
        or len(query.steps) != 1
        or query.windows
        or query.temporal_joins
        or query.hold_back_us
    ):
        return None
    acc = parse_accumulator_query(query.steps[0].query)
    if acc is None or len(acc.items) != len(result.columns):
        return None
    if not _one_aggregate(result):
        return None
    args = [a.arg for a in acc.aggregates if a.arg not in ("*", "1")]
    typed = session.sql(f"SELECT {', '.join([*acc.keys, *args])} {acc.source}")
    types = [f.dataType.simpleString() for f in typed.schema.fields]
    keys, rest = types[: len(acc.keys)], iter(types[len(acc.keys) :])
    arg_types = [None if a.arg in ("*", "1") else next(rest) for a in acc.aggregates]
    return acc if accumulator_types_ok(acc, keys, arg_types) else None


def _one_aggregate(result: DataFrame) -> bool:
    """Whether ``result``'s analyzed plan is deterministic and one ``Aggregate`` over
    narrow nodes, views and repartitions only (a subquery's plan counts too).

    The analyzed plan, not the optimized one: over an input with no new rows the
    optimizer replaces the aggregation by an empty relation, and the shape is the same
    whatever rows come.
    """
    plan: Any = result._jdf.queryExecution().analyzed()
    if not bool(plan.deterministic()):
        return False
    names: list[str] = []
    stack = [plan]
    while stack:
        node = stack.pop()
        names.append(str(node.nodeName()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
        subqueries = node.subqueries()
        stack.extend(subqueries.apply(i) for i in range(subqueries.size()))
    others = set(names) - _PASSING_NODES - {"Aggregate"}
    return names.count("Aggregate") == 1 and not others


def run_accumulate(
    session: SparkSession,
    request: TransformRequest,
    query: RewrittenQuery,
    acc: AccumulatorQuery,
    result: DataFrame,
    plans: Sequence[InputPlan],
    gate_us: int | None,
    prev: tuple[StreamState, Path] | None,
    state_dir: Path,
    *,
    retracting: bool,
) -> tuple[int, StreamState]:
    """One run (module docstring): write the output file and the new state's files into
    ``state_dir``; return the number of rows written and the state to save.
    ``retracting``: whether the input takes rows back in a new state's first run (its
    ``min``/``max`` are then retractable).

    Raises:
        InvalidQuery: a retraction the state cannot take (`merge_partials`,
            `merge_values`), or a new query whose output columns differ from the old one's.
    """
    import pyarrow.parquet as pq

    old = _previous(prev)
    same_query = prev is not None and prev[0].fingerprint == query.fingerprint
    start = old if same_query or old is None else carry_over(old, acc)
    olds = _old_values(acc, old, prev, same_query=same_query, retracting=retracting)
    partial, deltas = _partials(session, request, acc, plans, sorted(olds))
    values = {j: merge_values(acc, j, olds[j], deltas[j]) for j in sorted(olds)}
    names = list(result.columns)
    event_time = _named(names, request.vocab.event_time_column)
    run = merge_partials(acc, start, partial, names, event_time, gate_us, values)
    changes = run.changes
    if old is not None and not same_query:
        changes = _retract_live(old, changes)
    num = _write(session, request, result, changes)
    folder = state_dir / ACCUMULATORS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    text = query.steps[0].query.encode()
    pq.write_table(run.state.replace_schema_metadata({QUERY_KEY: text}), folder / ACCUMULATORS_FILE)
    for j, table in values.items():
        write_values(table, folder / values_file(j))
    frontier = gate_us if gate_us is not None else (prev[0].frontier_us if prev else None)
    state = StreamState(fingerprint=query.fingerprint, mode=MODE_ACCUMULATE, frontier_us=frontier)
    return num, state


def _old_values(
    acc: AccumulatorQuery,
    old: pa.Table | None,
    prev: tuple[StreamState, Path] | None,
    *,
    same_query: bool,
    retracting: bool,
) -> dict[int, pa.Table | None]:
    """Aggregate index -> the previous multiset (None: empty) of each retractable
    ``min``/``max`` (`engine.streaming.multisets`): in a new state, all of them when the
    input takes rows back; else those the previous state kept, a new query's taken from
    the old aggregate of the same kind and argument."""
    import pyarrow.parquet as pq

    extremes = [j for j, a in enumerate(acc.aggregates) if a.kind in ("MIN", "MAX")]
    if old is None or prev is None:
        return dict.fromkeys(extremes) if retracting else {}
    folder = prev[1] / ACCUMULATORS_DIR
    source: dict[int, int | None] = dict(zip(extremes, extremes, strict=True))
    if not same_query:
        was = parse_accumulator_query((old.schema.metadata or {}).get(QUERY_KEY, b"").decode())
        source = {j: _same_extreme(was, acc.aggregates[j]) for j in extremes}
    out: dict[int, pa.Table | None] = {}
    for j, i in source.items():
        if i is not None and (folder / values_file(i)).is_file():
            out[j] = pq.read_table(folder / values_file(i))
    return out


def _same_extreme(was: AccumulatorQuery | None, agg: AggregateCall) -> int | None:
    """The index of ``was``'s aggregate of ``agg``'s kind and argument, if any."""
    for i, old in enumerate(was.aggregates if was is not None else ()):
        if old.kind == agg.kind and _norm(old.arg) == _norm(agg.arg):
            return i
    return None


def carry_over(old: pa.Table, acc: AccumulatorQuery) -> pa.Table:
    """The accumulators of a new query ``acc``, taken from the state ``old`` of another
    query (its footer names it) over the same input, WHERE and group keys: each new
    aggregate's from an old aggregate of the same argument that keeps what it needs
    (``count(*)``: the row count; ``count(v)``: any count of ``v``'s values; ``sum``,
    ``avg``: a sum or average of ``v``; ``min``, ``max``: the same). Nothing emitted is
    carried: every group's row is new.

    Raises:
        InvalidQuery: naming what the old state does not keep.
    """
    import pyarrow as pa

    meta = old.schema.metadata or {}
    was = parse_accumulator_query(meta.get(QUERY_KEY, b"").decode())
    if (
        was is None
        or _norm(was.source) != _norm(acc.source)
        or _norms(was.keys) != _norms(acc.keys)
    ):
        raise InvalidQuery(_NEW_GROUPS)
    keys = [key_column(i) for i in range(len(acc.keys))]
    names = [*keys, ROWS_COLUMN]
    cols = [old.column(c) for c in names]
    for j, agg in enumerate(acc.aggregates):
        found = _source_of(was, agg)
        if found is None:
            raise InvalidQuery(
                f"{agg.kind.lower()}({agg.arg}): the old query's state does not keep it (a "
                "GROUP BY keeps accumulators, not input rows): add the derivative again to "
                "compute the new query over all its input"
            )
        for have, want in zip(found, _wanted(acc, j), strict=True):
            cols.append(old.column(have))
            names.append(want)
    return pa.table(cols, names=names)


def _wanted(acc: AccumulatorQuery, j: int) -> list[str]:
    """The state columns of the ``j``-th aggregate: its accumulator, then its count."""
    return [acc_column(j)] + ([] if acc.aggregates[j].kind == "COUNT" else [count_column(j)])


def _source_of(was: AccumulatorQuery, agg: AggregateCall) -> list[str] | None:
    """The old state's columns holding what ``agg`` needs (`_wanted`'s order), or None."""
    arg = _norm(agg.arg)
    if agg.kind == "COUNT" and arg in ("*", "1"):
        return [ROWS_COLUMN]
    sums = {"SUM", "AVG"}
    for i, old in enumerate(was.aggregates):
        if _norm(old.arg) != arg:
            continue
        if agg.kind == "COUNT":
            return [acc_column(i) if old.kind == "COUNT" else count_column(i)]
        if old.kind == agg.kind or {old.kind, agg.kind} <= sums:
            return [acc_column(i), count_column(i)]
    return None


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _norms(texts: Sequence[str]) -> list[str]:
    return [_norm(t) for t in texts]


def _previous(prev: tuple[StreamState, Path] | None) -> pa.Table | None:
    """The accumulators of the previous state (None: none, or another mode's)."""
    import pyarrow.parquet as pq

    if prev is None or prev[0].mode != MODE_ACCUMULATE:
        return None
    return pq.read_table(prev[1] / ACCUMULATORS_DIR / ACCUMULATORS_FILE)


def _partials(
    session: SparkSession,
    request: TransformRequest,
    acc: AccumulatorQuery,
    plans: Sequence[InputPlan],
    retractable: Sequence[int],
) -> tuple[pa.Table, dict[int, pa.Table]]:
    """The new rows' partial accumulators, computed by Spark across partitions (every
    accumulator is order-free) and collected: one row per group touched; and, for each
    aggregate index in ``retractable``, the net count of each of its (group, value)."""
    inp, plan = request.query_inputs[0], plans[0]
    register_view(read_input(session, inp, plan, parallel=True), inp.query_alias)
    op = inp.vocab.operation_type_column
    retracts = f"{quote_identifier(op)} {_TAKE_BACK}" if _may_take_back(plan, op) else None
    partial = session.sql(partial_sql(acc, retracts)).toArrow()
    deltas = {j: session.sql(value_delta_sql(acc, j, retracts)).toArrow() for j in retractable}
    return partial, deltas


def _may_take_back(plan: InputPlan, op_column: str) -> bool:
    """Whether the new slices may hold rows that take one back, by their footers."""
    return any(max_op(Path(s.path), op_column) != 0 for s in plan.slices)


def _named(names: Sequence[str], wanted: str) -> str:
    """The output column named ``wanted`` (case-insensitive), as the query spells it."""
    return next(n for n in names if n.lower() == wanted.lower())


def _retract_live(old: pa.Table, changes: pa.Table) -> pa.Table:
    """``changes`` after a retraction (``-R``) of every live row of the old query.

    Raises:
        InvalidQuery: the old rows' columns are not the new query's.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    data = [c for c in changes.column_names if c != "op"]
    emitted = [emitted_column(m) for m in range(len(data))]
    if not set(emitted) <= set(old.column_names) or emitted_column(len(data)) in old.column_names:
        raise InvalidQuery(_KEEP_COLUMNS)
    types = [f.type for f in changes.schema if f.name != "op"]
    try:
        columns = [old.column(c).cast(t) for c, t in zip(emitted, types, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InvalidQuery(_KEEP_COLUMNS) from None
    gone = pa.table(columns, names=data).filter(pc.fill_null(old.column(LIVE_COLUMN), False))
    gone = gone.add_column(0, "op", pa.array([1] * gone.num_rows, changes.schema.field("op").type))
    return pa.concat_tables([gone, changes])


def _write(
    session: SparkSession, request: TransformRequest, result: DataFrame, changes: pa.Table
) -> int:
    """Write ``changes`` (``op``, then the output columns) as the output file."""
    op = quote_identifier(request.vocab.operation_type_column)
    cols = [quote_identifier(c) for c in result.columns]
    shaped = result.selectExpr(f"CAST(0 AS INT) AS {op}", *cols)
    out, columns, schema = finish_output(shaped, request)
    table = changes.rename_columns(list(out.columns))
    return write_arrow_output(
        table,
        request.new_data_path,
        columns,
        spark_schema=schema,
        row_schema=out.schema,
        session=session,
    )
