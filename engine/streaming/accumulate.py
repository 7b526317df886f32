"""Which GROUP BY queries can keep one accumulator row per group instead of every input row.

A query of the shape

    SELECT <group columns and aggregates> FROM <input> [[AS] alias] [WHERE <condition>]
    [GROUP BY <columns>]

whose aggregates are ``count``, ``sum``, ``avg``, ``min`` and ``max`` of a plain column
(``count(*)`` too) is *decomposable*: the answer over all input so far is a function of
per-group accumulators (a count, a sum, a sum and a count for ``avg``, a minimum, a
maximum), and the accumulators of the old rows merged with those of the new rows are
the accumulators of all rows. So a run needs the accumulators and the new rows only.

This module reads that shape from the query text, strictly: anything else (an expression
around an aggregate or as a key, ``DISTINCT``, ``HAVING``, a join, a subquery, several
steps ...) answers None and the query keeps the changelog state. It also writes the
*partial* query: the same FROM and WHERE over the new rows, grouped the same way, giving
one row of partial accumulators per group (`engine.streaming.accumulators` merges them).

What the text cannot tell is left to the caller's plan check on Spark's optimized plan
(one ``Aggregate`` over narrow nodes, deterministic) and types (exact sums; keys and
min/max over types whose order and equality are exact); see `accumulator_types_ok`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from engine.streaming.sqltext import Token, call_args, join, tokenize, unquote

__all__ = [
    "AGGREGATE_KINDS",
    "ROWS_COLUMN",
    "AccumulatorQuery",
    "AggregateCall",
    "OutputItem",
    "acc_column",
    "accumulator_types_ok",
    "copies_column",
    "count_column",
    "key_column",
    "parse_accumulator_query",
    "partial_sql",
    "retract_column",
]

#: Column of a group's net row count (appends minus retractions) in partials and state.
ROWS_COLUMN: Final = "__odf_nrows"
#: Aggregates with a decomposable accumulator.
AGGREGATE_KINDS: Final = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX"})
#: Spark types (``simpleString``) whose sum is exact and order-free.
EXACT_SUM_TYPES: Final = frozenset({"tinyint", "smallint", "int", "bigint"})
#: Spark types a key or a min/max argument may have: equality and order are exact (no
#: float ``-0.0``/``NaN`` rules, no collations, no nested values).
ORDERED_TYPES: Final = EXACT_SUM_TYPES | {"string", "date", "timestamp", "boolean"}
#: Clause keywords that end the WHERE condition; any other at its level is refused.
_REFUSED_CLAUSES: Final = frozenset(
    {
        "HAVING",
        "ORDER",
        "LIMIT",
        "WINDOW",
        "UNION",
        "EXCEPT",
        "INTERSECT",
        "QUALIFY",
        "CLUSTER",
        "DISTRIBUTE",
        "SORT",
        "JOIN",
        "LATERAL",
        "SELECT",
        "OFFSET",
        "PIVOT",
        "UNPIVOT",
        "TABLESAMPLE",
    }
)


@dataclass(frozen=True, slots=True)
class AggregateCall:
    """One aggregate of the query: its kind (upper case) and the argument's SQL text
    (a column, or ``*`` / ``1`` for a row count)."""

    kind: str
    arg: str


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One output column: a group key (``key`` True) or an aggregate, by index."""

    key: bool
    index: int


@dataclass(frozen=True, slots=True)
class AccumulatorQuery:
    """A decomposable GROUP BY query, as `parse_accumulator_query` read it.

    Attributes:
        source: the FROM clause and the WHERE condition, as written.
        keys: the group key columns' SQL text, in GROUP BY order (empty: one global group).
        aggregates: the aggregates, in SELECT order.
        items: the output columns, in SELECT order.
    """

    source: str
    keys: tuple[str, ...]
    aggregates: tuple[AggregateCall, ...]
    items: tuple[OutputItem, ...]


def key_column(i: int) -> str:
    """Name of the ``i``-th group key in partials and state."""
    return f"__odf_k{i}"


def acc_column(j: int) -> str:
    """Name of the ``j``-th aggregate's accumulator (a sum for ``avg``)."""
    return f"__odf_a{j}"


def count_column(j: int) -> str:
    """Name of the net count of non-null values of the ``j``-th aggregate's argument."""
    return f"__odf_n{j}"


def retract_column(j: int) -> str:
    """Name of the extreme of the values a run takes back (``min``/``max`` partials)."""
    return f"__odf_r{j}"


def copies_column(j: int) -> str:
    """Name of the net count of a run's rows holding the value of `retract_column`."""
    return f"__odf_m{j}"


def parse_accumulator_query(sql: str) -> AccumulatorQuery | None:
    """The decomposable GROUP BY query ``sql`` is, or None (see the module docstring)."""
    full = tokenize(sql)
    at = [i for i, t in enumerate(full) if not t.trivia]  # significant token -> its index
    tokens = [full[i] for i in at]
    while tokens and tokens[-1].is_punct(";"):
        tokens.pop()
    if len(tokens) < 4 or not tokens[0].is_word("SELECT"):
        return None
    from_at = _level0(tokens, 1, lambda t: t.is_word("FROM"))
    group_at = _level0(tokens, from_at, lambda t: t.is_word("GROUP"))
    if from_at >= len(tokens) or any(t.is_word("DISTINCT", "ALL") for t in tokens[1:2]):
        return None
    source = _source(tokens[from_at:group_at])
    keys = _group_keys(tokens[group_at:]) if group_at < len(tokens) else ()
    if source is None or keys is None:
        return None
    names = {_name(k) for k in keys}
    items: list[OutputItem] = []
    aggregates: list[AggregateCall] = []
    for item in _split(tokens[1:from_at]):
        parsed = _item(item)
        if parsed is None:
            return None
        if isinstance(parsed, AggregateCall):
            items.append(OutputItem(key=False, index=len(aggregates)))
            aggregates.append(parsed)
        elif parsed in names:
            items.append(OutputItem(key=True, index=[_name(k) for k in keys].index(parsed)))
        else:
            return None  # a column that is neither a key nor aggregated
    if not aggregates:
        return None  # a DISTINCT in disguise: no accumulator to keep
    return AccumulatorQuery(
        source=join(full[at[from_at] : at[group_at - 1] + 1]),
        keys=tuple(join(k) for k in keys),
        aggregates=tuple(aggregates),
        items=tuple(items),
    )


def partial_sql(query: AccumulatorQuery, retracts: str | None = None) -> str:
    """The query giving, over the new rows, one row of partial accumulators per group.

    Columns: the keys as `key_column`; `ROWS_COLUMN`, the group's net row count; per
    aggregate, `acc_column` (a count; a sum for ``sum`` and ``avg``; the extreme of the
    added values for ``min``/``max``) and, except for ``count``, `count_column` (the net
    count of non-null values) and, for ``min``/``max``, `retract_column` (the extreme of
    the values taken back) and `copies_column` (the net count of the new rows holding
    that value). ``retracts`` is the SQL condition of a row that takes back an earlier
    one (``op`` of ``-R`` or ``-C``): such rows count -1 and subtract from sums. Without
    it every row adds, and there are neither `retract_column` s nor `copies_column` s.
    """
    if retracts is None:
        return _appends_sql(query)
    sign, net = "__odf_sign", "CAST(coalesce(sum(__odf_sign), 0) AS BIGINT)"
    inner = [f"{k} AS {key_column(i)}" for i, k in enumerate(query.keys)]
    inner.append(f"CASE WHEN ({retracts}) THEN -1 ELSE 1 END AS {sign}")
    over = f"OVER (PARTITION BY {', '.join(query.keys)})" if query.keys else "OVER ()"
    keys = [key_column(i) for i in range(len(query.keys))]
    cols = [*keys, f"{net} AS {ROWS_COLUMN}"]
    for j, agg in enumerate(query.aggregates):
        if agg.kind == "COUNT" and agg.arg in ("*", "1"):
            cols.append(f"{net} AS {acc_column(j)}")
            continue
        v, w = f"__odf_v{j}", f"__odf_w{j}"
        inner.append(f"{agg.arg} AS {v}")
        counted = f"CAST(coalesce(sum(CASE WHEN {v} IS NULL THEN 0 ELSE {sign} END), 0) AS BIGINT)"
        if agg.kind == "COUNT":
            cols.append(f"{counted} AS {acc_column(j)}")
            continue
        if agg.kind in ("SUM", "AVG"):
            cols.append(f"sum({sign} * {v}) AS {acc_column(j)}")
        else:
            f = agg.kind.lower()
            inner.append(f"{f}(CASE WHEN ({retracts}) THEN {agg.arg} END) {over} AS {w}")
            cols.append(f"{f}(CASE WHEN {sign} > 0 THEN {v} END) AS {acc_column(j)}")
            cols.append(f"{f}({w}) AS {retract_column(j)}")
            at = f"CASE WHEN {v} = {w} THEN {sign} ELSE 0 END"
            cols.append(f"CAST(coalesce(sum({at}), 0) AS BIGINT) AS {copies_column(j)}")
        cols.append(f"{counted} AS {count_column(j)}")
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join(cols)} FROM (SELECT {', '.join(inner)} {query.source}){group}"


def _appends_sql(query: AccumulatorQuery) -> str:
    """`partial_sql` over rows that all add: plain aggregates."""
    cols = [f"{k} AS {key_column(i)}" for i, k in enumerate(query.keys)]
    cols.append(f"count(*) AS {ROWS_COLUMN}")
    for j, agg in enumerate(query.aggregates):
        kind = "SUM" if agg.kind == "AVG" else agg.kind
        cols.append(f"{kind.lower()}({agg.arg}) AS {acc_column(j)}")
        if agg.kind != "COUNT":
            cols.append(f"count({agg.arg}) AS {count_column(j)}")
    group = f" GROUP BY {', '.join(query.keys)}" if query.keys else ""
    return f"SELECT {', '.join(cols)} {query.source}{group}"


def accumulator_types_ok(
    query: AccumulatorQuery, key_types: list[str], arg_types: list[str | None]
) -> bool:
    """Whether the keys' and aggregate arguments' Spark types (``simpleString``; None for
    ``count(*)``) keep the accumulators exact: sums and averages of integers only (a float
    sum depends on the order of additions, a decimal sum widens its type), keys and
    min/max of `ORDERED_TYPES`; a count of anything."""
    if len(key_types) != len(query.keys) or len(arg_types) != len(query.aggregates):
        return False
    if any(t not in ORDERED_TYPES for t in key_types):
        return False
    for agg, t in zip(query.aggregates, arg_types, strict=True):
        if agg.kind in ("SUM", "AVG") and t not in EXACT_SUM_TYPES:
            return False
        if agg.kind in ("MIN", "MAX") and t not in ORDERED_TYPES:
            return False
    return True


# -- parsing ----------------------------------------------------------------------------------


def _level0(tokens: list[Token], start: int, stop: object) -> int:
    """Index of the first token from ``start`` outside parentheses for which ``stop``
    holds (len(tokens) if none)."""
    depth = 0
    for k in range(start, len(tokens)):
        t = tokens[k]
        if t.is_punct("("):
            depth += 1
        elif t.is_punct(")"):
            depth -= 1
        elif depth == 0 and callable(stop) and stop(t):
            return k
    return len(tokens)


def _split(tokens: list[Token]) -> list[list[Token]]:
    """``tokens`` split at the commas outside parentheses."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        depth += t.is_punct("(") - t.is_punct(")")
        if depth == 0 and t.is_punct(","):
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _is_name(t: Token) -> bool:
    return t.kind == "quoted" or (t.kind == "word" and t.text.upper() not in _KEYWORDS)


def _column(tokens: list[Token]) -> str | None:
    """The lower-case name of a plain column (``c``, ``q.c``, quoted or not), else None."""
    if len(tokens) == 1 and _is_name(tokens[0]):
        return unquote(tokens[0]).lower()
    if len(tokens) == 3 and _is_name(tokens[0]) and tokens[1].is_punct(".") and _is_name(tokens[2]):
        return unquote(tokens[2]).lower()
    return None


def _name(tokens: list[Token]) -> str:
    return _column(tokens) or ""


def _item(tokens: list[Token]) -> AggregateCall | str | None:
    """An output column: an aggregate call or a column name (lower case), optionally
    aliased; None for anything else."""
    body = tokens
    if len(tokens) >= 2 and _is_name(tokens[-1]) and not tokens[-2].is_punct("."):
        body = tokens[:-2] if tokens[-2].is_word("AS") else tokens[:-1]
    if not body:
        return None
    column = _column(body)
    if column is not None:
        return column
    head = body[0]
    if len(body) < 3 or head.kind != "word" or head.text.upper() not in AGGREGATE_KINDS:
        return None
    if not body[1].is_punct("(") or not body[-1].is_punct(")"):
        return None
    args, close = call_args(body, 1)
    if close != len(body) - 1 or len(args) != 1:
        return None
    arg = args[0]
    kind = head.text.upper()
    if kind == "COUNT" and len(arg) == 1 and (arg[0].is_punct("*") or arg[0].text == "1"):
        return AggregateCall(kind, arg[0].text)
    return AggregateCall(kind, join(arg)) if _column(arg) is not None else None


def _source(tokens: list[Token]) -> list[Token] | None:
    """``FROM table [[AS] alias] [WHERE condition]``, else None (joins, subqueries ...)."""
    if len(tokens) < 2 or not _is_name(tokens[1]):
        return None
    k = 2
    if k < len(tokens) and tokens[k].is_word("AS"):
        k += 1
    if k < len(tokens) and _is_name(tokens[k]):
        k += 1
    if k == len(tokens):
        return tokens
    if not tokens[k].is_word("WHERE") or k + 1 == len(tokens):
        return None
    for t in tokens[k + 1 :]:
        if t.is_word(*_REFUSED_CLAUSES):
            return None
    return tokens


def _group_keys(tokens: list[Token]) -> tuple[list[Token], ...] | None:
    """The plain columns of ``GROUP BY c1, c2``, else None (expressions, ordinals,
    GROUPING SETS, a clause after it)."""
    if len(tokens) < 3 or not tokens[1].is_word("BY"):
        return None
    keys = _split(tokens[2:])
    if any(_column(k) is None for k in keys):
        return None
    names = [_name(k) for k in keys]
    if len(set(names)) != len(names):
        return None
    return tuple(keys)


#: Words that are never a column or alias here (clause and join keywords).
_KEYWORDS: Final = frozenset(
    {"SELECT", "FROM", "WHERE", "GROUP", "BY", "AS", "ON", "USING", "AND", "OR", "NOT"}
    | _REFUSED_CLAUSES
    | {"LEFT", "RIGHT", "INNER", "FULL", "CROSS", "SEMI", "ANTI", "NATURAL", "OUTER"}
    | {"DISTINCT", "ALL", "GROUPING", "ROLLUP", "CUBE", "SETS", "FOR"}
)
