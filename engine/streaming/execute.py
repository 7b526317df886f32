"""Run a stateful query incrementally: retain, recompute, emit what became final or changed.

A streaming query must give, folded, the same answer however its input was split into
runs. Spark's batch engine answers a query over a set of rows; this executor makes each run
a batch over *the rows the query still needs* (kept in the checkpoint) plus the new input,
and emits the part of that answer that is new. Three modes, chosen from the query's plan;
accumulate is chosen only when a state is first made, and an accumulator state keeps that
mode for its life (its runs have no input rows to recompute anything else from):

**Window** (`MODE_WINDOW`): one input, one group window over its event time, no other
stateful operator (the spec's own example, and the bulk of real pipelines). A window's row
is emitted once the watermark reaches the window's end (Flink: at ``end - 1 ms``), exactly
once, with the complete aggregate; nothing is emitted twice because only windows ending
after the previous frontier are kept. The checkpoint holds only the input rows of windows
still open (rows with event time >= the start of the oldest open window), so state and
run time follow the open windows, not the history. Rows arriving for a window already
emitted are late: they are dropped, as Flink drops them.

**Accumulate** (`MODE_ACCUMULATE`): a GROUP BY of plain columns (or a global aggregate)
with count/sum/avg/min/max of plain columns over one input keeps one accumulator row per
group and no input rows (`engine.streaming.accumulate_run`); when the input retracts in the
state's first run, each ``min``/``max`` also keeps its group's values
(`engine.streaming.multisets`).

**Changelog** (`MODE_CHANGELOG`): everything else -- top-N, other aggregations without windows,
OVER windows, interval and temporal-table joins, chains of them. The checkpoint holds every
input row and the *live* output (rows emitted and not retracted, with their offsets). Each
run recomputes the query, keeps the rows that are final by the watermark (see below), and
emits the multiset difference to the live output: retractions (``op`` = 1, ``-R``, in the
order of the offsets they were emitted at, every data column repeated) then appends
(``op`` = 0, in the query's output order). Folded, the output is always the query's batch
answer over all input so far (RFC-015's changelog; the ``-R``/``+A`` form kamu's
leaderboard example expects). State grows with the input (documented limit).

Finality (both modes): with ``W`` the output watermark (min over the inputs) and ``H`` the
hold-back (the longest interval of an interval-join condition, as Flink holds its
watermark back by the join's bound), a row is final when its window end (for windowed
results) or its event time (otherwise) is ``<= W - H``; a row whose event time is NULL
(an outer join's unmatched side) is final at once: no watermark would ever pass it. Rows
not yet final are not emitted. Before every input has a watermark no window closes, while
changelog rows are emitted as they are (and corrected later if need be).

Inputs: each input's view is the retained rows followed by the new rows, in offset order,
as one partition (so every run sees the same row order and replay is deterministic).
Temporal tables get a versions view (see `engine.streaming.rewrite`). An input holding
retractions or corrections (known from its files' ``op`` statistics) is presented folded:
its current state (`_fold`), unlike Flink, which treats ``op`` as a plain column. A
stateful query's output must not have an ``op`` column: the engine derives it.

Query changes (Migrate Query): the state records the query's fingerprint. A new query
starts from the carried-over retained rows and frontier; in changelog mode its first run
emits the difference between the old live output and the new answer, so the output's
folded state becomes the new query's answer without a gap or a duplicate.
"""

from __future__ import annotations

import collections
import math
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from engine.collected_output import write_output
from engine.errors import InvalidQuery
from engine.inputs import InputPlan, plan_node_names, read_input, schema_of_file, stateful_nodes
from engine.output import OP_APPEND, finish_output
from engine.sql import quote_identifier, register_view, run_steps
from engine.streaming.accumulate import parse_accumulator_query
from engine.streaming.accumulate_run import accumulator_query, run_accumulate
from engine.streaming.footers import max_op
from engine.streaming.retain import retain_rows
from engine.streaming.rewrite import (
    HIDDEN_PREFIX,
    VALID_TO_COLUMN,
    WINDOW_END_COLUMN,
    RewrittenQuery,
    TemporalSource,
)
from engine.streaming.state import (
    MODE_ACCUMULATE,
    MODE_CHANGELOG,
    MODE_WINDOW,
    OFFSET_COLUMN,
    StreamState,
)
from fbs.model.engine import TransformRequest, TransformRequestInput
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "OP_RETRACT",
    "StatefulRun",
    "run_stateful",
    "temporal_sources",
    "versions_view_name",
    "window_gate",
]

#: ``op`` of a retracted row (``-R``).
OP_RETRACT: Final = 1
#: Plan nodes a window-mode query may have besides the narrow ones (``Expand``: hopping).
_WINDOW_NODES: Final = frozenset({"Aggregate", "Expand"})
_ROW_INDEX: Final = "__odf_row_index"
#: Aggregates whose value never depends on the order of the rows.
_ORDER_FREE_AGGREGATES: Final = frozenset({"Count", "Min", "Max"})
#: Aggregates that are order-free over exact types (`_EXACT_TYPES`, decimals).
_EXACT_SUM_AGGREGATES: Final = frozenset({"Sum", "Average"})
_EXACT_TYPES: Final = frozenset({"tinyint", "smallint", "int", "bigint"})
_DUP_INDEX: Final = "__odf_dup_index"
_NET: Final = "__odf_net"
#: Most queries whose plan facts (`_plan_facts`) the engine process remembers.
PLAN_FACTS_CACHE_SIZE: Final = 256
_RANK: Final = "__odf_rank"
_AQE_EXCLUDED_RULES: Final = "spark.sql.adaptive.optimizer.excludedRules"
_AQE_EMPTY_RELATION: Final = "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"


@dataclass(frozen=True, slots=True)
class StatefulRun:
    """The outcome of one stateful run: rows written and the state to checkpoint."""

    num_records: int
    state: StreamState


def versions_view_name(index: int) -> str:
    """Name of the versions view of the ``index``-th input."""
    return f"{HIDDEN_PREFIX}versions_{index}"


def temporal_sources(request: TransformRequest) -> dict[str, TemporalSource]:
    """The request's ``temporalTables`` by lower-case query and dataset alias.

    Raises:
        InvalidQuery: a temporal table that names no input or has no primary key.
    """
    tables = request.transform.temporal_tables or ()
    out: dict[str, TemporalSource] = {}
    for table in tables:
        name = table.name.lower()
        matches = [
            i
            for i, inp in enumerate(request.query_inputs)
            if name in (inp.query_alias.lower(), inp.dataset_alias.lower())
        ]
        if not matches:
            raise InvalidQuery(f"temporal table {table.name!r} is not an input of the transform")
        if not table.primary_key:
            raise InvalidQuery(f"temporal table {table.name!r} needs a primary key")
        inp = request.query_inputs[matches[0]]
        source = TemporalSource(
            versions_view=versions_view_name(matches[0]),
            event_time_column=inp.vocab.event_time_column,
            primary_key=tuple(table.primary_key),
        )
        out[inp.query_alias.lower()] = source
        out[inp.dataset_alias.lower()] = source
    return out


def run_stateful(
    session: SparkSession,
    request: TransformRequest,
    query: RewrittenQuery,
    plans: Sequence[InputPlan],
    watermark: Timestamp | None,
    prev: tuple[StreamState, Path] | None,
    state_dir: Path,
) -> StatefulRun:
    """Run ``query`` over the retained rows of ``prev`` plus the new input.

    Writes the output file at ``request.new_data_path`` and the new state's Parquet files
    into ``state_dir``; returns the state to save beside them.

    Raises:
        InvalidQuery: bad output columns, or an ``op`` column in the query's output.
        pyspark errors: Spark failures (the caller classifies them).
    """
    parallel = _parallel_candidate(request, query)
    views = _input_views(session, request, plans, prev, parallel=parallel)
    _register(request, views)
    result = run_steps(session, list(query.steps))
    facts = _plan_facts(request, query, views, result)
    mode = facts.mode
    gate_us = None if watermark is None else _micros(watermark) - query.hold_back_us
    if mode == MODE_CHANGELOG and (prev is None or prev[0].mode == MODE_ACCUMULATE):
        accumulated = _accumulated(session, request, query, result, plans, gate_us, prev, state_dir)
        if accumulated is not None:
            return accumulated
    replan = parallel and not (mode == MODE_WINDOW and facts.order_insensitive)
    parallel = parallel and not replan
    # The mode is decided on the plain views; an input holding retractions is then
    # presented folded (its current state), which adds plan nodes of its own.
    fold = _holds_retractions(request, plans, prev)
    if replan or any(fold):
        views = _input_views(session, request, plans, prev, parallel=parallel, fold=fold)
        _register(request, views)
        result = run_steps(session, list(query.steps))
    prev_state = prev[0] if prev else None
    frontier = prev_state.frontier_us if prev_state else None
    final = _final_rows(result, request, gate_us, frontier if mode == MODE_WINDOW else None)

    live = _live_output(session, final, mode, prev, state_dir)
    out, retracted = _changes(
        final, live, mode, sort=parallel, op=request.vocab.operation_type_column
    )
    columns, schema = _output_layout(out, request)
    if mode == MODE_WINDOW and parallel:
        # One aggregation, written sorted as one partition: adaptive execution has
        # nothing to adapt, and would split the write into two Spark jobs and re-plan
        # in between (a fixed cost on every run).
        session.conf.set("spark.sql.adaptive.enabled", "false")
    new_frontier = gate_us if gate_us is not None else frontier
    # The retained rows are read and written with pyarrow (no Spark job), so they are
    # saved on a thread while Spark computes the output: that job's last stage runs on
    # one core, and the py4j call only waits.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="odf-retain") as pool:
        saving = pool.submit(
            _save_inputs, request, query, plans, prev, mode, new_frontier, state_dir
        )
        bound = _output_bound(request, query, prev) if facts.bounded else None
        num = write_output(out, request.new_data_path, columns, spark_schema=schema, max_rows=bound)
        inputs = saving.result()
    has_output = False
    if retracted is not None:
        has_output = _save_live(session, request, live, retracted, result, state_dir)
        retracted.unpersist()
    state = StreamState(
        fingerprint=query.fingerprint,
        mode=mode,
        frontier_us=new_frontier,
        inputs=inputs,
        has_output=has_output,
    )
    return StatefulRun(num_records=num, state=state)


def _accumulated(
    session: SparkSession,
    request: TransformRequest,
    query: RewrittenQuery,
    result: DataFrame,
    plans: Sequence[InputPlan],
    gate_us: int | None,
    prev: tuple[StreamState, Path] | None,
    state_dir: Path,
) -> StatefulRun | None:
    """The run of a query on accumulators (`engine.streaming.accumulate_run`), or None
    when it keeps another state. A state's mode is kept for its life: a new state takes
    accumulators when the query allows, an accumulator state is never left.

    Raises:
        InvalidQuery: a query that cannot run on the accumulator state it has.
    """
    visible = _visible(result)
    retracting = prev is None and any(_holds_retractions(request, plans, None))
    if prev is not None and prev[0].fingerprint == query.fingerprint:
        # The state was made for this query, whose shape was checked then.
        acc = parse_accumulator_query(query.steps[0].query)
    else:
        acc = accumulator_query(session, request, query, visible)
    if acc is None:
        if prev is not None:
            raise InvalidQuery(
                "this derivative keeps one accumulator row per group (its state has no input "
                "rows): a new query over it must also be a GROUP BY of plain columns with "
                "count/sum/avg/min/max of columns, over the same single input"
            )
        return None
    num, state = run_accumulate(
        session,
        request,
        query,
        acc,
        visible,
        plans,
        gate_us,
        prev,
        state_dir,
        retracting=retracting,
    )
    return StatefulRun(num_records=num, state=state)


def _live_output(
    session: SparkSession,
    final: DataFrame,
    mode: str,
    prev: tuple[StreamState, Path] | None,
    state_dir: Path,
) -> DataFrame | None:
    """The output rows still live from earlier runs (changelog mode), which this run's
    changes retract or correct; ``None`` when there are none to read."""
    live: DataFrame | None = None
    if mode == MODE_CHANGELOG and prev is not None and prev[0].has_output:
        live = session.read.parquet(str(prev[1] / "output"))
    tight = mode == MODE_CHANGELOG and _tight_nested(final.schema)
    if live is None and tight:
        live = _empty_live(session, final, state_dir.parent / "empty-live")
    if tight:
        # Adaptive execution would replace a union with an empty side (no retractions
        # this run) by the other side, and the write would take that side's tighter
        # nested types (see `_empty_live`): the output schema would follow the data.
        session.conf.set(_AQE_EXCLUDED_RULES, _AQE_EMPTY_RELATION)
    return live


# -- inputs -----------------------------------------------------------------------------------


def _input_views(
    session: SparkSession,
    request: TransformRequest,
    plans: Sequence[InputPlan],
    prev: tuple[StreamState, Path] | None,
    *,
    parallel: bool,
    fold: Sequence[bool] = (),
) -> list[DataFrame]:
    """Every input as its retained rows followed by the new rows, in offset order: one
    partition, or (``parallel``) Spark's own splits, partitions in offset order -- or, where
    `_one_scan` applies, one scan of all the files in Spark's order.

    Inputs flagged in ``fold`` are presented as their current state (`_fold`).
    """
    views = []
    folds = list(fold) or [False] * len(request.query_inputs)
    for inp, plan, folded in zip(request.query_inputs, plans, folds, strict=True):
        folder = None
        if prev is not None:
            folder = prev[0].input_dir(prev[1], inp.dataset_id.as_multibase())
        retained_files = sorted(folder.glob("*.parquet")) if folder is not None else []
        one = _one_scan(session, inp, plan, retained_files) if parallel and not folded else None
        if one is not None:
            views.append(one)
            continue
        df = read_input(session, inp, plan, parallel=parallel)
        if folder is not None and retained_files:
            # The retained rows were written from this input's view: same columns
            # unless the input's schema evolved, when Spark reads their own.
            same = _parquet_columns(folder) == [f.name for f in df.schema.fields]
            reader = session.read.schema(df.schema) if same else session.read
            df = reader.parquet(str(folder)).unionByName(df, allowMissingColumns=True)
        if folded:
            df = _fold(df, inp)
        views.append(df if parallel or folded else df.coalesce(1))
    return views


def _one_scan(
    session: SparkSession,
    inp: TransformRequestInput,
    plan: InputPlan,
    retained: Sequence[Path],
) -> DataFrame | None:
    """The retained rows and the new slices of ``inp`` as ONE scan, when the input needs no
    offset filter and the retained rows have the input's columns; else None.

    Only for a parallel view, whose result is used only when the query does not depend on
    the order of its rows (`_order_insensitive`; otherwise the executor plans again on
    ordered views): one scan plans and runs with less fixed work on every pull than a
    union of per-file scans (one file listing, one broadcast of the Hadoop settings, one
    generated scan loop).
    """
    schema_file = Path(inp.schema_file) if inp.schema_file else None
    if (
        not retained
        or not plan.slices
        or inp.offset_interval is None
        or any(s.needs_filter for s in plan.slices)
        or schema_file is None
        or not schema_file.is_file()
    ):
        return None
    schema = schema_of_file(session, schema_file)
    if _parquet_columns(retained[0].parent) != [f.name for f in schema.fields]:
        return None
    paths = [*(str(p) for p in retained), *(s.path for s in plan.slices)]
    return session.read.schema(schema).parquet(*paths)


def _holds_retractions(
    request: TransformRequest, plans: Sequence[InputPlan], prev: tuple[StreamState, Path] | None
) -> list[bool]:
    """Per input: whether its retained or new rows may hold retractions or corrections
    (``op`` other than append), by the Parquet footers' statistics (no data read)."""
    out = []
    for inp, plan in zip(request.query_inputs, plans, strict=True):
        files = [Path(s.path) for s in plan.slices]
        if prev is not None:
            folder = prev[0].input_dir(prev[1], inp.dataset_id.as_multibase())
            files += sorted(folder.glob("*.parquet")) if folder is not None else []
        out.append(any(max_op(f, inp.vocab.operation_type_column) != 0 for f in files))
    return out


def _fold(df: DataFrame, inp: TransformRequestInput) -> DataFrame:
    """The current state of a changelog (RFC-015): every retraction (``-R``) and
    correction-before (``-C``) removes one earlier row with the same data; the rest, in
    offset order, one partition. A retraction of a row no longer held (late, for a window
    already emitted) removes nothing.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    vocab = inp.vocab
    system = {vocab.offset_column, vocab.operation_type_column, vocab.system_time_column}
    keys = [
        _col(f.name)
        for f in df.schema.fields
        if f.name not in system and not isinstance(f.dataType, MapType)
    ]
    op = _col(vocab.operation_type_column)
    offset = _col(vocab.offset_column)
    removes = F.coalesce(op.isin(1, 2), F.lit(False))
    same = Window.partitionBy(*keys)
    net = F.sum(F.when(removes, -1).otherwise(1)).over(same)
    newest = F.row_number().over(Window.partitionBy(*keys).orderBy(offset.desc()))
    return (
        df.withColumn(_NET, net)
        .where(~removes)
        .withColumn(_RANK, newest)
        .where(F.col(_RANK) <= F.col(_NET))
        .drop(_NET, _RANK)
        .coalesce(1)
        .sortWithinPartitions(offset)
    )


def _register(request: TransformRequest, views: list[DataFrame]) -> None:
    """Register the input views under their aliases, and the temporal tables' versions."""
    temporal = temporal_sources(request)
    for inp, df in zip(request.query_inputs, views, strict=True):
        register_view(df, inp.query_alias)
        source = temporal.get(inp.query_alias.lower())
        if source is not None:
            register_view(_versions(df, inp, source), source.versions_view)


def _parquet_columns(folder: Path) -> list[str]:
    import pyarrow.parquet as pq

    files = sorted(folder.glob("*.parquet"))
    return list(pq.read_schema(files[0]).names) if files else []


def _versions(df: DataFrame, inp: TransformRequestInput, source: TemporalSource) -> DataFrame:
    """``df`` with `VALID_TO_COLUMN`: the event time of the key's next change (NULL: none).

    Retractions (``op`` 1 and 2) end a version and are no version themselves.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    et = F.col(quote_identifier(source.event_time_column))
    offset = F.col(quote_identifier(inp.vocab.offset_column))
    op = F.col(quote_identifier(inp.vocab.operation_type_column))
    keys = [F.col(quote_identifier(k)) for k in source.primary_key]
    w = Window.partitionBy(*keys).orderBy(et, offset)
    return df.withColumn(VALID_TO_COLUMN, F.lead(et).over(w)).where(op.isNull() | ~op.isin(1, 2))


# -- query analysis ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PlanFacts:
    """What the executor decides from a query's plan: its mode, (window mode) whether its
    aggregates are order-free (`_order_insensitive`), and whether its output rows are
    bounded by its input rows (`_output_bound`: window mode without a generator)."""

    mode: str
    order_insensitive: bool
    bounded: bool = False


_PLAN_FACTS: collections.OrderedDict[tuple[Any, ...], _PlanFacts] = collections.OrderedDict()
_PLAN_FACTS_LOCK: Final = threading.Lock()


def _plan_facts(
    request: TransformRequest,
    query: RewrittenQuery,
    views: Sequence[DataFrame],
    result: DataFrame,
) -> _PlanFacts:
    """Check the output of ``result`` and decide its mode, once per query and input schemas.

    Both depend only on the rewritten query, the input views' schemas and the
    vocabularies, which stay the same from one pull to the next; deciding them means
    optimizing the plan and walking it over py4j, so the engine process remembers them
    (`PLAN_FACTS_CACHE_SIZE` entries). Failures are not remembered.

    Raises:
        InvalidQuery: see `_check_output`.
    """
    key = (
        query.fingerprint,
        request.vocab,
        tuple(
            (inp.query_alias, inp.vocab, v._jdf.schema().json())
            for inp, v in zip(request.query_inputs, views, strict=True)
        ),
    )
    with _PLAN_FACTS_LOCK:
        cached = _PLAN_FACTS.get(key)
        if cached is not None:
            _PLAN_FACTS.move_to_end(key)
            return cached
    _check_output(result, request)
    mode = _mode(request, query, result)
    window = mode == MODE_WINDOW
    facts = _PlanFacts(
        mode,
        window and _order_insensitive(result),
        bounded=window and "Generate" not in plan_node_names(result),
    )
    with _PLAN_FACTS_LOCK:
        _PLAN_FACTS[key] = facts
        while len(_PLAN_FACTS) > PLAN_FACTS_CACHE_SIZE:
            _PLAN_FACTS.popitem(last=False)
    return facts


def _check_output(result: DataFrame, request: TransformRequest) -> None:
    vocab = request.vocab
    names = {f.name.lower() for f in result.schema.fields}
    if vocab.operation_type_column.lower() in names:
        raise InvalidQuery(
            f"a stateful query must not output the operation type column "
            f"{vocab.operation_type_column!r}: the engine derives it (appends and retractions)"
        )
    finish_output(_visible(result), request)  # raises InvalidQuery for bad columns


def _mode(request: TransformRequest, query: RewrittenQuery, result: DataFrame) -> str:
    """`MODE_WINDOW` when only a group window over the single input's event time is
    stateful; `MODE_CHANGELOG` otherwise."""
    if (
        len(request.query_inputs) != 1
        or len(query.windows) != 1
        or query.temporal_joins
        or query.hold_back_us
        or WINDOW_END_COLUMN not in result.columns
    ):
        return MODE_CHANGELOG
    nodes = stateful_nodes(result)
    if not set(nodes) <= _WINDOW_NODES or nodes.count("Aggregate") != 1:
        return MODE_CHANGELOG
    column = query.windows[0].time_expr.split(".")[-1].strip().strip("`").lower()
    event_time = request.query_inputs[0].vocab.event_time_column.lower()
    if column != event_time or not _windows_read_event_time(result, event_time):
        return MODE_CHANGELOG
    return MODE_WINDOW


def _windows_read_event_time(result: DataFrame, event_time: str) -> bool:
    """True if every group window of ``result``'s plan buckets the input's event-time
    column as read from its files, not a column of that name computed from it.

    Window mode's lateness and retention compare the *input's* event time with window
    ends: a window over ``event_time - INTERVAL 2 HOURS AS event_time`` (or a time-zone
    shift, or another column renamed) in a subquery has the same name but other values,
    so its windows would close before their rows arrive (dropped as late) or lose rows
    still needed (retained by the wrong time). In Spark's optimized plan, projections are
    collapsed into the window computation, which converts its time column to a long
    (``PreciseTimestampConversion``): that column must be an attribute the input's scan
    reads. Anything unexpected answers False (a changelog query: exact, only costlier).
    """
    plan: Any = result._jdf.queryExecution().optimizedPlan()
    jvm: Any = result.sparkSession._jvm
    try:
        cls = jvm.java.lang.Class.forName
        conversion = cls("org.apache.spark.sql.catalyst.expressions.PreciseTimestampConversion")
        attribute = cls("org.apache.spark.sql.catalyst.expressions.AttributeReference")
    except Exception:
        return False
    read: set[int] = set()  # expression IDs of the event-time columns the scans output
    times: list[Any] = []  # the time columns the windows convert
    stack = [plan]
    while stack:
        node = stack.pop()
        children = node.children()
        if children.size() == 0:
            out = node.output()
            for i in range(out.size()):
                a = out.apply(i)
                if str(a.name()).lower() == event_time:
                    read.add(int(a.exprId().id()))
        exprs = node.expressions()
        pending = [exprs.apply(i) for i in range(exprs.size())]
        while pending:
            e = pending.pop()
            if conversion.isInstance(e) and str(e.child().dataType().typeName()).startswith(
                "timestamp"
            ):
                times.append(e.child())
            kids = e.children()
            pending.extend(kids.apply(i) for i in range(kids.size()))
        stack.extend(children.apply(i) for i in range(children.size()))

    def as_read(t: Any) -> bool:
        # A DATE event time reaches the window cast to a timestamp: the same instants.
        if str(t.nodeName()) == "Cast" and str(t.child().dataType().typeName()) == "date":
            t = t.child()
        return bool(attribute.isInstance(t)) and int(t.exprId().id()) in read

    return bool(times) and all(as_read(t) for t in times)


def _parallel_candidate(request: TransformRequest, query: RewrittenQuery) -> bool:
    """Whether the query may be a window-mode query (then worth planning split)."""
    return (
        len(request.query_inputs) == 1
        and len(query.windows) == 1
        and not query.temporal_joins
        and not query.hold_back_us
    )


def _order_insensitive(result: DataFrame) -> bool:
    """True if every aggregate of ``result``'s plan gives the same value whatever the order
    of its rows: count, min, max, and sum/avg of integers and decimals. (A float sum
    depends on the order of additions: such queries read their input as one partition,
    so that a replay on any machine adds in the same order.)"""
    plan: Any = result._jdf.queryExecution().optimizedPlan()
    jvm: Any = result.sparkSession._jvm
    agg_class = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction"
    )
    stack = [plan]
    exprs: list[Any] = []
    while stack:
        node = stack.pop()
        if node.nodeName() == "Aggregate":
            seq = node.aggregateExpressions()
            exprs.extend(seq.apply(i) for i in range(seq.size()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    while exprs:
        e = exprs.pop()
        if agg_class.isInstance(e):
            name = str(e.getClass().getSimpleName())
            if name in _ORDER_FREE_AGGREGATES:
                pass
            elif name in _EXACT_SUM_AGGREGATES:
                child_types = [
                    str(e.children().apply(i).dataType().simpleString())
                    for i in range(e.children().size())
                ]
                if not all(t in _EXACT_TYPES or t.startswith("decimal") for t in child_types):
                    return False
            else:
                return False
        children = e.children()
        exprs.extend(children.apply(i) for i in range(children.size()))
    return True


def _output_bound(
    request: TransformRequest, query: RewrittenQuery, prev: tuple[StreamState, Path] | None
) -> int:
    """Most rows a window-mode run can write: one aggregate per window and group, so at
    most the run's input rows (retained + new) times the windows a row falls into."""
    import pyarrow.parquet as pq

    inp = request.query_inputs[0]
    rows = 0
    if inp.offset_interval is not None:
        rows = inp.offset_interval.end - inp.offset_interval.start + 1
    folder = prev[0].input_dir(prev[1], inp.dataset_id.as_multibase()) if prev else None
    for path in sorted(folder.glob("*.parquet")) if folder is not None else []:
        rows += pq.read_metadata(path).num_rows
    window = query.windows[0]
    return rows * -(-window.size_us // window.slide_us)


# -- emission ---------------------------------------------------------------------------------


def _final_rows(
    result: DataFrame, request: TransformRequest, gate_us: int | None, after_us: int | None
) -> DataFrame:
    """The rows of ``result`` that are final (hidden columns dropped, `_ROW_INDEX` added).

    Window results are final when their window ended by the gate, others when their event
    time is at or before it or NULL; ``after_us`` excludes windows emitted by earlier runs.
    """
    # Conditions are SQL text: a PySpark column expression costs a dozen py4j calls, a
    # fixed cost of every run.
    indexed = result.selectExpr("*", f"monotonically_increasing_id() AS {_ROW_INDEX}")
    if gate_us is None:
        # No watermark yet: a window can never close without one, while any other row
        # is emitted now and corrected later if need be (the output stays the answer).
        none = WINDOW_END_COLUMN in result.columns
        return _visible(indexed.where("false") if none else indexed)
    windowed = WINDOW_END_COLUMN in result.columns
    # Flink fires a window at end - 1 ms; with millisecond watermarks that is end <= W.
    time = quote_identifier(WINDOW_END_COLUMN if windowed else request.vocab.event_time_column)
    if not windowed:
        # A row without an event time (an outer join's unmatched side, an aggregate over
        # no rows) has no time to wait for: it is final now, as in the batch answer.
        # Were it held back, no watermark would ever release it.
        cond = f"({time} <= timestamp_micros({int(gate_us)}) OR {time} IS NULL)"
        if after_us is not None:
            cond += f" AND {time} > timestamp_micros({int(after_us)})"
        return _visible(indexed.where(cond))
    return _visible(indexed.where(window_gate(time, gate_us, after_us)))


def window_gate(end: str, gate_us: int, after_us: int | None) -> str:
    """The SQL condition selecting the windows whose end (SQL expression ``end``) is at or
    before ``gate_us`` and, with ``after_us``, after it (µs since the epoch), over rows
    that have the row index column (`_final_rows`).

    Generated code inlines timestamp and integer literals, so a condition holding this
    run's gate would be new Java code in every run: compiled by Janino, loaded, and run
    cold until the JIT has compiled it again (measured on 1M-row pulls: 2 compilations
    and ~0.5-0.9 CPU s more per pull than with the same literal; JIT compiler threads
    took about half of a pull's CPU). Decimal literals reach generated code as
    references instead, so the condition's code is the same in every run:
    ``unix_micros(end) - gate <= 0`` with a DECIMAL gate (the subtraction keeps the
    optimizer from unwrapping it into a BIGINT comparison). Spark would also push a
    condition on the window end (a grouping key) below the aggregation into the scan;
    the conjunct on the non-deterministic row index keeps it on the few aggregated rows
    (no filter is pushed through a non-deterministic projection; ``IS NOT NULL`` would
    be dropped, the index is never null).
    """
    micros = f"unix_micros({end})"
    cond = f"{micros} - {_decimal(gate_us)} <= 0"
    if after_us is not None:
        cond += f" AND {micros} - {_decimal(after_us)} > 0"
    return cond + f" AND {_ROW_INDEX} >= 0"


def _changes(
    final: DataFrame, live: DataFrame | None, mode: str, *, sort: bool, op: str = "op"
) -> tuple[DataFrame, DataFrame | None]:
    """The rows to write (the operation type first, named ``op``: the output vocabulary's
    name) and, in changelog mode, the retracted live rows (with their offsets).

    With ``sort`` (a result computed across partitions, whose row order may follow the
    partitioning) the rows are written sorted by their columns, so that every run and
    replay writes them in the same order.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    data = [c for c in final.columns if c != _ROW_INDEX]
    if mode == MODE_WINDOW or live is None:
        # A filter keeps the result's order, which the row index only records: no sort.
        # SQL text, not column expressions: far fewer py4j calls on every run.
        adds = final.selectExpr(
            f"CAST({OP_APPEND} AS INT) AS {quote_identifier(op)}",
            *[quote_identifier(c) for c in data],
        )
        if sort:
            order = [
                quote_identifier(f.name)
                for f in final.schema.fields
                if f.name in data and not isinstance(f.dataType, MapType)
            ]
            adds = _sorted_one_partition(adds, order)
        if mode == MODE_WINDOW:
            return adds, None
        return adds, final.sparkSession.createDataFrame([], f"{OFFSET_COLUMN} long")
    keys = [f"c{i}" for i in range(len(data))]
    cand = _dup_indexed(
        final.select(
            *[_col(c).alias(k) for c, k in zip(data, keys, strict=True)], F.col(_ROW_INDEX)
        ),
        keys,
        F.col(_ROW_INDEX),
    )
    old = _dup_indexed(
        live.select(
            *[_col(c).alias(k) for c, k in zip(data, keys, strict=True)], F.col(OFFSET_COLUMN)
        ),
        keys,
        F.col(OFFSET_COLUMN),
    )
    on = [cand[k].eqNullSafe(old[k]) for k in [*keys, _DUP_INDEX]]
    cond = on[0]
    for c in on[1:]:
        cond = cond & c
    # Cached: the write and the new live output both need it, and it is small.
    retract = old.join(cand, cond, "left_anti").persist()
    adds = cand.join(old, cond, "left_anti")
    renamed = [F.col(k).alias(c) for k, c in zip(keys, data, strict=True)]
    out = (
        retract.orderBy(OFFSET_COLUMN)
        .select(F.lit(OP_RETRACT).cast("int").alias(op), *renamed)
        .unionByName(
            adds.orderBy(_ROW_INDEX).select(F.lit(OP_APPEND).cast("int").alias(op), *renamed)
        )
    )
    return out, retract.select(OFFSET_COLUMN)


def _sorted_one_partition(df: DataFrame, order: list[str]) -> DataFrame:
    """``df.coalesce(1).sortWithinPartitions(*order)`` for SQL identifiers ``order``,
    built with two py4j calls instead of a dozen per column."""
    from pyspark.sql import DataFrame as PyDataFrame

    one = df.coalesce(1)
    if not order:
        return one
    jdf: Any = one._jdf
    sc: Any = df.sparkSession.sparkContext
    rest = sc._jvm.PythonUtils.toSeq(order[1:])
    return PyDataFrame(jdf.sortWithinPartitions(order[0], rest), df.sparkSession)


def _dup_indexed(df: DataFrame, keys: list[str], order: Column) -> DataFrame:
    """Number equal rows 1, 2, ... so that a multiset difference becomes an anti-join."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(order)
    return df.withColumn(_DUP_INDEX, F.row_number().over(w))


def _output_layout(out: DataFrame, request: TransformRequest) -> tuple[list[Any], StructType]:
    """The merge's columns and the Spark schema of the output file (see `finish_output`)."""
    _, columns, schema = finish_output(out, request)
    return columns, schema


# -- state ------------------------------------------------------------------------------------


def _save_inputs(
    request: TransformRequest,
    query: RewrittenQuery,
    plans: Sequence[InputPlan],
    prev: tuple[StreamState, Path] | None,
    mode: str,
    frontier_us: int | None,
    state_dir: Path,
) -> dict[str, str]:
    """Write the rows each input still needs; return folder name -> dataset ID."""
    cutoff = None
    if mode == MODE_WINDOW and frontier_us is not None:
        w = query.windows[0]
        # The oldest window still open: the first aligned start whose window ends after
        # the frontier. Rows before it can only reach windows already emitted.
        cutoff = (math.floor((frontier_us - w.size_us) / w.slide_us) + 1) * w.slide_us
    inputs = {}
    for index, (inp, plan) in enumerate(zip(request.query_inputs, plans, strict=True)):
        retained: list[Path] = []
        if prev is not None:
            folder = prev[0].input_dir(prev[1], inp.dataset_id.as_multibase())
            retained = sorted(folder.glob("*.parquet")) if folder is not None else []
        name = f"input-{index}"
        retain_rows(inp, plan, retained, state_dir / name, cutoff_us=cutoff)
        # Listed only with a file: an input with no rows yet leaves an empty folder, which
        # the checkpoint archive (files only) does not keep, and a listed folder that is
        # missing is a damaged checkpoint. Unlisted means no retained rows, the same.
        if any((state_dir / name).iterdir()):
            inputs[name] = inp.dataset_id.as_multibase()
    return inputs


def _tight_nested(schema: StructType) -> bool:
    """Whether a column of ``schema`` nests a non-nullable element, value or field."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    def tight(t: Any) -> bool:
        if isinstance(t, ArrayType):
            return not t.containsNull or tight(t.elementType)
        if isinstance(t, MapType):
            return not t.valueContainsNull or tight(t.keyType) or tight(t.valueType)
        if isinstance(t, StructType):
            return any(not f.nullable or tight(f.dataType) for f in t.fields)
        return False

    return any(tight(f.dataType) for f in schema.fields)


def _empty_live(session: SparkSession, final: DataFrame, folder: Path) -> DataFrame:
    """No live output yet, read from a Parquet file as every later run's live output is
    (for outputs with `_tight_nested` types only: top-level nullability is left alone).

    Spark reads every nested field from Parquet as nullable, and a union takes the looser
    type: later runs write array elements and struct fields nullable (their retractions
    come from the live file), so the first run must too. Its appends alone kept the
    query's own types (``collect_list``: elements not null), the output schema changed at
    the second run, and the dataset refused it. (A cast cannot loosen them: the optimizer
    drops casts that only relax nullability.)
    """
    from pyspark.sql import functions as F

    data = [c for c in final.columns if c != _ROW_INDEX]
    empty = final.where("false").select(
        *[_col(c) for c in data], F.lit(0).cast("long").alias(OFFSET_COLUMN)
    )
    _write_parquet(empty, folder)
    return session.read.parquet(str(folder))


def _save_live(
    session: SparkSession,
    request: TransformRequest,
    live: DataFrame | None,
    retracted: DataFrame,
    result: DataFrame,
    state_dir: Path,
) -> bool:
    """Write the new live output: the old one minus retractions, plus this run's appends."""
    from pyspark.sql import functions as F

    vocab = request.vocab
    data = [c for c in _visible(result).columns]
    written = session.read.parquet(request.new_data_path)
    op = F.col(quote_identifier(vocab.operation_type_column))
    appended = written.where(op == OP_APPEND).select(
        *[_col(c) for c in data],
        F.col(quote_identifier(vocab.offset_column)).alias(OFFSET_COLUMN),
    )
    new_live = appended
    if live is not None:
        kept = live.join(retracted, OFFSET_COLUMN, "left_anti").select(
            *[_col(c) for c in data], F.col(OFFSET_COLUMN)
        )
        new_live = kept.unionByName(appended)
    _write_parquet(new_live.orderBy(OFFSET_COLUMN), state_dir / "output")
    return True


def _write_parquet(df: DataFrame, folder: Path) -> None:
    """Write ``df`` as one Parquet file in ``folder`` (Spark's markers removed)."""
    df.coalesce(1).write.mode("overwrite").parquet(str(folder))
    for p in folder.iterdir():
        if not p.name.endswith(".parquet"):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()


# -- helpers ----------------------------------------------------------------------------------


def _visible(df: DataFrame) -> DataFrame:
    """``df`` without the rewrite's hidden columns (the row index is kept)."""
    hidden = [c for c in df.columns if c.startswith(HIDDEN_PREFIX) and c != _ROW_INDEX]
    return df.drop(*hidden) if hidden else df


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(quote_identifier(name))


def _ts(micros: int) -> Column:
    from pyspark.sql import functions as F

    return F.timestamp_micros(F.lit(micros))


def _decimal(value: int) -> str:
    """``value`` as a SQL DECIMAL literal (see `window_gate`: not inlined in generated code)."""
    return f"CAST('{int(value)}' AS DECIMAL(20, 0))"


def _micros(ts: Timestamp) -> int:
    return ts.nanos // 1_000
