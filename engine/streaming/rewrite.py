"""Rewrite streaming SQL (Flink's and kamu's spellings, Spark's ``window``) into batch Spark SQL.

The stateful executor (`engine.streaming.execute`) runs a query as a batch over the rows it
retained plus the new input, so every streaming construct must become a batch construct
whose result, restricted to what the watermark has closed, is the streaming result:

- **Group windows**: ``TUMBLE(t, INTERVAL '1' DAY)`` becomes ``window(t, '1 DAY')``,
  ``HOP(t, slide, size)`` becomes ``window(t, 'size', 'slide')``; ``TUMBLE_START`` /
  ``_END`` / ``_ROWTIME`` (and ``HOP_*``) become ``window(...).start`` / ``.end`` /
  ``.end - 1 ms``. Spark's own ``window(t, size[, slide])`` is accepted as is. Each
  ``SELECT`` whose ``GROUP BY`` holds a window gets a hidden first column
  `WINDOW_END_COLUMN` (the window's end): it tells the executor when a result row is
  complete. It reaches the output through ``SELECT *`` of later steps.
- **Temporal joins**: ``JOIN t FOR SYSTEM_TIME AS OF x.ts [AS] a ON cond`` (``t`` declared in
  ``temporalTables``) becomes a join with a *versions* view of ``t`` in which every row
  knows when the next row of its primary key replaced it (`VALID_TO_COLUMN`):
  ``ON (x.ts >= a.<event time> AND (a.valid_to IS NULL OR x.ts < a.valid_to)) AND (cond)``.
- ``CAST(x AS TIMESTAMP(3))`` (Flink's precision) becomes ``CAST(x AS TIMESTAMP)``.
- Interval joins need no rewrite; the largest ``INTERVAL`` of a join condition is the
  *hold-back*: a row is complete only once the watermark is that far past it (Flink holds
  its output watermark back by the join's bound the same way).

Refused as `InvalidQuery`, naming the construct: SESSION windows, window table-valued
functions, calendar (month/year) windows, windows with an offset, and ``FOR SYSTEM_TIME
AS OF`` on a table missing from ``temporalTables``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from engine.errors import InvalidQuery
from engine.streaming.sqltext import (
    Token,
    call_args,
    join,
    matching_paren,
    scan_level,
    tokenize,
    unquote,
)
from fbs.model.source import SqlQueryStep

__all__ = [
    "HIDDEN_PREFIX",
    "VALID_TO_COLUMN",
    "WINDOW_END_COLUMN",
    "RewrittenQuery",
    "TemporalSource",
    "WindowSpec",
    "check_streaming_query",
    "parse_interval_micros",
    "rewrite_steps",
]

#: Columns the rewrite adds start with this; the executor drops them from the output.
HIDDEN_PREFIX: Final = "__odf_"
#: The end of a group window, added to every windowed aggregation's output.
WINDOW_END_COLUMN: Final = "__odf_window_end"
#: In a temporal table's versions view: when the next version of the key replaced a row.
VALID_TO_COLUMN: Final = "__odf_valid_to"

_MICROS: Final = {
    "MICROSECOND": 1,
    "MILLISECOND": 1_000,
    "SECOND": 1_000_000,
    "MINUTE": 60_000_000,
    "HOUR": 3_600_000_000,
    "DAY": 86_400_000_000,
    "WEEK": 7 * 86_400_000_000,
}
_CALENDAR_UNITS: Final = ("MONTH", "QUARTER", "YEAR")
_FLINK_WINDOWS: Final = {
    "TUMBLE": "",
    "TUMBLE_START": ".start",
    "TUMBLE_END": ".end",
    "TUMBLE_ROWTIME": ".end - INTERVAL 1 MILLISECOND",
    "HOP": "",
    "HOP_START": ".start",
    "HOP_END": ".end",
    "HOP_ROWTIME": ".end - INTERVAL 1 MILLISECOND",
}
_CLAUSE_END: Final = (
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
)
_ON_END: Final = (
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "JOIN",
    "LEFT",
    "RIGHT",
    "INNER",
    "FULL",
    "CROSS",
    "SEMI",
    "ANTI",
    "NATURAL",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "LATERAL",
)


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """One group window of the query: the time expression's text, size and slide (µs)."""

    time_expr: str
    size_us: int
    slide_us: int


@dataclass(frozen=True, slots=True)
class TemporalSource:
    """A temporal table as the rewrite needs it: the view of its versions to join with,
    its event-time column and its primary key."""

    versions_view: str
    event_time_column: str
    primary_key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RewrittenQuery:
    """The batch form of a streaming query.

    Attributes:
        steps: the rewritten SQL steps, in order.
        windows: every group window found.
        temporal_joins: names (lower case) of the temporal tables joined ``AS OF``.
        hold_back_us: how far the watermark must pass a row's time before it is complete.
        fingerprint: a digest of the rewritten steps (changes when the query changes).
    """

    steps: tuple[SqlQueryStep, ...]
    windows: tuple[WindowSpec, ...]
    temporal_joins: frozenset[str]
    hold_back_us: int
    fingerprint: str


def rewrite_steps(
    steps: list[SqlQueryStep], temporal: Mapping[str, TemporalSource]
) -> RewrittenQuery:
    """Rewrite every step (see the module docstring).

    Args:
        steps: the transform's steps, output last.
        temporal: temporal tables by lower-case name (query alias and dataset alias).

    Raises:
        InvalidQuery: for a construct the engine cannot run with streaming semantics.
    """
    out: list[SqlQueryStep] = []
    windows: list[WindowSpec] = []
    joined: set[str] = set()
    hold_back = 0
    for step in steps:
        tokens = tokenize(step.query)
        tokens = _rewrite_casts(tokens)
        tokens = _rewrite_flink_windows(tokens)
        tokens, found = _mark_windowed_selects(tokens)
        windows.extend(found)
        tokens, used, bound = _rewrite_joins(tokens, temporal)
        joined |= used
        hold_back += bound
        out.append(SqlQueryStep(alias=step.alias, query=join(tokens)))
    digest = hashlib.sha256()
    for s in out:
        digest.update(f"{s.alias}\x00{s.query}\x00".encode())
    return RewrittenQuery(
        steps=tuple(out),
        windows=tuple(windows),
        temporal_joins=frozenset(joined),
        hold_back_us=hold_back,
        fingerprint=digest.hexdigest(),
    )


def check_streaming_query(
    steps: list[SqlQueryStep],
    temporal_tables: Sequence[tuple[str, Sequence[str]]],
    input_names: Sequence[str],
) -> None:
    """Refuse, before any data flows (``odf add``), a query the engine cannot run with
    streaming semantics: the same checks as `rewrite_steps`, plus temporal tables that
    name no input or have no primary key.

    Args:
        steps: the transform's steps.
        temporal_tables: (name, primary key) of each declared temporal table.
        input_names: the inputs' query aliases and dataset references.

    Raises:
        InvalidQuery: naming the construct.
    """
    names = {n.lower() for n in input_names}
    temporal = {}
    for name, key in temporal_tables:
        if name.lower() not in names:
            raise InvalidQuery(f"temporal table {name!r} is not an input of the transform")
        if not key:
            raise InvalidQuery(f"temporal table {name!r} needs a primary key")
        temporal[name.lower()] = TemporalSource(f"{HIDDEN_PREFIX}check", "event_time", tuple(key))
    rewrite_steps(steps, temporal)


# -- intervals --------------------------------------------------------------------------------

_DURATION_RE: Final = re.compile(r"^\s*(\d+)\s*([A-Za-z]+?)S?\s*$", re.IGNORECASE)


def parse_interval_micros(text: str) -> int:
    """Microseconds of a duration such as ``1 day``, ``10 MINUTES``, ``2 hours``.

    Raises:
        InvalidQuery: for calendar units (month, quarter, year) or an unknown form.
    """
    m = _DURATION_RE.match(text)
    if m is None:
        raise InvalidQuery(f"cannot read the window duration {text!r} (write e.g. '1 day')")
    unit = m.group(2).upper()
    if unit in _CALENDAR_UNITS:
        raise InvalidQuery(
            f"{unit} windows are not supported: windows must have a fixed length "
            "(use days or weeks), as in Flink"
        )
    if unit not in _MICROS:
        raise InvalidQuery(f"unknown time unit {m.group(2)!r} in window duration {text!r}")
    micros = int(m.group(1)) * _MICROS[unit]
    if micros <= 0:
        raise InvalidQuery(f"window duration {text!r} must be positive")
    return micros


def _interval_text(arg: list[Token]) -> str:
    """``INTERVAL '1' DAY`` / ``INTERVAL '1 day'`` / ``'1 day'`` -> ``1 DAY``."""
    words = [t for t in arg if not t.trivia]
    if words and words[0].is_word("INTERVAL"):
        words = words[1:]
    parts = []
    for t in words:
        parts.append(t.text[1:-1] if t.kind == "string" else t.text)
    text = " ".join(parts).strip()
    if not text:
        raise InvalidQuery("a window needs a duration such as INTERVAL '1' DAY")
    return text


# -- casts ------------------------------------------------------------------------------------


def _rewrite_casts(tokens: list[Token]) -> list[Token]:
    """``AS TIMESTAMP(3)`` / ``TIMESTAMP_LTZ(3)`` -> ``AS TIMESTAMP`` (Spark has no precision)."""
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.is_word("TIMESTAMP", "TIMESTAMP_LTZ") and _prev_word_is(out, "AS"):
            j = _skip_trivia(tokens, i + 1)
            if j < len(tokens) and tokens[j].is_punct("("):
                args, close = call_args(tokens, j)
                if len(args) == 1 and len(args[0]) == 1 and args[0][0].kind == "number":
                    out.append(Token("word", "TIMESTAMP"))
                    i = close + 1
                    continue
        out.append(t)
        i += 1
    return out


# -- group windows ----------------------------------------------------------------------------


def _rewrite_flink_windows(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        j = _skip_trivia(tokens, i + 1)
        is_call = t.kind == "word" and j < len(tokens) and tokens[j].is_punct("(")
        name = t.text.upper()
        if is_call and name.startswith("SESSION"):
            raise InvalidQuery(f"{t.text}: session windows are not supported by the Spark engine")
        if is_call and name in _FLINK_WINDOWS and not _prev_is_dot(out):
            args, close = call_args(tokens, j)
            out.extend(tokenize(_spark_window(name, args) + _FLINK_WINDOWS[name]))
            i = close + 1
            continue
        out.append(t)
        i += 1
    return out


def _spark_window(name: str, args: list[list[Token]]) -> str:
    hop = name.startswith("HOP")
    if args and args[0] and args[0][0].is_word("TABLE"):
        raise InvalidQuery(
            f"{name} as a table-valued function is not supported: write "
            f"GROUP BY {name}(time_column, INTERVAL ...) instead"
        )
    if len(args) != (3 if hop else 2):
        raise InvalidQuery(
            f"{name} takes (time column, {'slide, size' if hop else 'size'}); "
            f"got {len(args)} arguments"
        )
    time_expr = join(args[0])
    if hop:
        slide, size = _interval_text(args[1]), _interval_text(args[2])
        return f"window({time_expr}, '{size}', '{slide}')"
    return f"window({time_expr}, '{_interval_text(args[1])}')"


def _mark_windowed_selects(tokens: list[Token]) -> tuple[list[Token], list[WindowSpec]]:
    """Add `WINDOW_END_COLUMN` to every SELECT whose GROUP BY holds a ``window(...)``."""
    depth = _depths(tokens)
    inserts: list[tuple[int, str]] = []
    windows: list[WindowSpec] = []
    for i, t in enumerate(tokens):
        if not t.is_word("GROUP"):
            continue
        j = _skip_trivia(tokens, i + 1)
        if j >= len(tokens) or not tokens[j].is_word("BY"):
            continue
        d = depth[i]
        k = j + 1
        call: tuple[int, int] | None = None
        while k < len(tokens) and depth[k] >= d:
            tk = tokens[k]
            p = _skip_trivia(tokens, k + 1)
            if tk.is_word("WINDOW") and p < len(tokens) and tokens[p].is_punct("("):
                if call is None and not _prev_is_dot(tokens[:k]):
                    call = (k, matching_paren(tokens, p))
            elif depth[k] == d and tk.is_word(*_CLAUSE_END):
                # A ')' at this level closes a key such as lower(k); the one closing an
                # enclosing subquery is a level up and ends the loop by its depth.
                break
            k += 1
        if call is None:
            continue
        start, close = call
        spec = _window_spec(tokens, start)
        windows.append(spec)
        select = _select_before(tokens, depth, i, d)
        if select is None:
            continue
        after = _skip_trivia(tokens, select + 1)
        if after < len(tokens) and tokens[after].is_word("DISTINCT", "ALL"):
            select = after
        text = join(tokens[start : close + 1])
        inserts.append((select + 1, f" {text}.end AS {WINDOW_END_COLUMN},"))
    for pos, text in sorted(inserts, reverse=True):
        tokens = [*tokens[:pos], *tokenize(text), *tokens[pos:]]
    return tokens, windows


def _window_spec(tokens: list[Token], start: int) -> WindowSpec:
    p = _skip_trivia(tokens, start + 1)
    args, _ = call_args(tokens, p)
    if len(args) not in (2, 3):
        raise InvalidQuery(
            "window() takes (time column, duration[, slide]); a start offset is not supported"
        )
    size = parse_interval_micros(_interval_text(args[1]))
    slide = parse_interval_micros(_interval_text(args[2])) if len(args) == 3 else size
    if slide > size:
        raise InvalidQuery("a hopping window's slide must not exceed its size")
    return WindowSpec(time_expr=join(args[0]), size_us=size, slide_us=slide)


def _select_before(tokens: list[Token], depth: list[int], index: int, d: int) -> int | None:
    for k in range(index - 1, -1, -1):
        if depth[k] < d:
            return None
        if depth[k] == d and tokens[k].is_word("SELECT"):
            return k
    return None


# -- joins ------------------------------------------------------------------------------------


def _rewrite_joins(
    tokens: list[Token], temporal: Mapping[str, TemporalSource]
) -> tuple[list[Token], set[str], int]:
    """Rewrite ``FOR SYSTEM_TIME AS OF`` joins; measure interval-join bounds."""
    used: set[str] = set()
    bound = 0
    i = 0
    while i < len(tokens):
        if not tokens[i].is_word("JOIN"):
            i += 1
            continue
        table_at = _skip_trivia(tokens, i + 1)
        k = _skip_trivia(tokens, table_at + 1)
        if k < len(tokens) and tokens[k].is_word("FOR"):
            tokens, next_i, name = _rewrite_temporal(tokens, table_at, k, temporal)
            used.add(name)
            i = next_i
            continue
        on = _find_on(tokens, table_at)
        if on is not None:
            end = _on_end(tokens, on + 1)
            bound = max(bound, _max_interval(tokens[on + 1 : end]))
        i += 1
    return tokens, used, bound


def _rewrite_temporal(
    tokens: list[Token], table_at: int, for_at: int, temporal: Mapping[str, TemporalSource]
) -> tuple[list[Token], int, str]:
    words = []
    k = for_at
    for expected in ("FOR", "SYSTEM_TIME", "AS", "OF"):
        k = _skip_trivia(tokens, k)
        if k >= len(tokens) or not tokens[k].is_word(expected):
            raise InvalidQuery("expected FOR SYSTEM_TIME AS OF <time column> after the table")
        words.append(k)
        k += 1
    # The time expression: a dotted column path.
    expr_start = _skip_trivia(tokens, k)
    k = expr_start
    while k < len(tokens) and (tokens[k].kind in ("word", "quoted") or tokens[k].is_punct(".")):
        if tokens[k].is_word("AS", "ON"):
            break
        k += 1
        if k < len(tokens) and tokens[k].trivia:
            break
    time_expr = join(tokens[expr_start:k]).strip()
    if not time_expr:
        raise InvalidQuery("FOR SYSTEM_TIME AS OF needs a time column")
    table_name = unquote(tokens[table_at])
    source = temporal.get(table_name.lower())
    if source is None:
        raise InvalidQuery(
            f"FOR SYSTEM_TIME AS OF on {table_name!r}: declare it in the transform's "
            "temporalTables with its primary key"
        )
    k = _skip_trivia(tokens, k)
    alias_token: Token | None = None
    if k < len(tokens) and tokens[k].is_word("AS"):
        k = _skip_trivia(tokens, k + 1)
    if k < len(tokens) and not tokens[k].is_word("ON") and tokens[k].kind in ("word", "quoted"):
        alias_token = tokens[k]
        k = _skip_trivia(tokens, k + 1)
    if k >= len(tokens) or not tokens[k].is_word("ON"):
        raise InvalidQuery(f"the temporal join with {table_name!r} needs an ON condition")
    end = _on_end(tokens, k + 1)
    alias = join([alias_token]) if alias_token else _quote(table_name)
    et = _quote(source.event_time_column)
    valid_to = f"{alias}.{VALID_TO_COLUMN}"
    cond = join(tokens[k + 1 : end]).strip()
    text = (
        f"{_quote(source.versions_view)} AS {alias} ON ({time_expr} >= {alias}.{et} AND "
        f"({valid_to} IS NULL OR {time_expr} < {valid_to})) AND ({cond}) "
    )
    new = [*tokens[:table_at], *tokenize(text), *tokens[end:]]
    return new, table_at + len(tokenize(text)), table_name.lower()


def _find_on(tokens: list[Token], start: int) -> int | None:
    """Index of the ``ON`` of the join whose table starts at ``start`` (None: no ON)."""
    k = scan_level(tokens, start, lambda t: t.is_word("ON", "USING", *_ON_END))
    return k if k < len(tokens) and tokens[k].is_word("ON") else None


def _on_end(tokens: list[Token], start: int) -> int:
    """Index just past the ON condition that starts at ``start``."""
    return scan_level(tokens, start, lambda t: t.is_word(*_ON_END) or t.is_punct(";"))


def _max_interval(tokens: list[Token]) -> int:
    """The longest ``INTERVAL`` literal in ``tokens`` (0 if none)."""
    best = 0
    sig = [t for t in tokens if not t.trivia]
    for k, t in enumerate(sig):
        if not t.is_word("INTERVAL") or k + 1 >= len(sig):
            continue
        parts = [sig[k + 1]]
        whole = sig[k + 1].kind == "string" and " " in sig[k + 1].text.strip()
        if not whole and k + 2 < len(sig) and sig[k + 2].kind == "word":
            parts.append(sig[k + 2])
        try:
            best = max(best, parse_interval_micros(_interval_text(parts)))
        except InvalidQuery:
            continue
    return best


# -- helpers ----------------------------------------------------------------------------------


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _depths(tokens: list[Token]) -> list[int]:
    out = []
    d = 0
    for t in tokens:
        if t.is_punct(")"):
            d -= 1
        out.append(d)
        if t.is_punct("("):
            d += 1
    return out


def _skip_trivia(tokens: list[Token], i: int) -> int:
    while i < len(tokens) and tokens[i].trivia:
        i += 1
    return i


def _prev_word_is(out: list[Token], word: str) -> bool:
    for t in reversed(out):
        if not t.trivia:
            return t.is_word(word)
    return False


def _prev_is_dot(out: list[Token]) -> bool:
    for t in reversed(out):
        if not t.trivia:
            return t.is_punct(".")
    return False
