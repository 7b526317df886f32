"""The streaming SQL rewrite and its tokenizer, rule by rule (pure text: no Spark).

Written for mutation testing (docs/mutation-testing.md): each test names the rule
of `engine.streaming.sqltext` or `engine.streaming.rewrite` it pins, one that could be
deleted or inverted with `tests/engine/test_rewrite.py` still passing.
"""

from __future__ import annotations

import hashlib

import pytest

from engine.errors import InvalidQuery
from engine.streaming.rewrite import (
    HIDDEN_PREFIX,
    VALID_TO_COLUMN,
    WINDOW_END_COLUMN,
    TemporalSource,
    WindowSpec,
    check_streaming_query,
    parse_interval_micros,
    rewrite_steps,
)
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

SECOND_US = 1_000_000
MINUTE_US = 60 * SECOND_US
HOUR_US = 60 * MINUTE_US
DAY_US = 24 * HOUR_US

BQ = "`"  # a backtick, spelled out where an f-string would make it hard to read


def _kinds(sql: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in tokenize(sql)]


def _step(sql: str, alias: str | None = None) -> SqlQueryStep:
    return SqlQueryStep(alias=alias, query=sql)


def _one(sql: str, temporal: dict[str, TemporalSource] | None = None) -> str:
    return rewrite_steps([_step(sql)], temporal or {}).steps[0].query


def _windows(sql: str) -> tuple[WindowSpec, ...]:
    return rewrite_steps([_step(sql)], {}).windows


# -- sqltext: tokens --------------------------------------------------------------------------


def test_token_kinds() -> None:
    assert _kinds("SELECT a1_$b, 1.5e-3 FROM t -- c\n") == [
        ("word", "SELECT"),
        ("space", " "),
        ("word", "a1_$b"),
        ("punct", ","),
        ("space", " "),
        ("number", "1.5e-3"),
        ("space", " "),
        ("word", "FROM"),
        ("space", " "),
        ("word", "t"),
        ("space", " "),
        ("comment", "-- c"),
        ("space", "\n"),
    ]


@pytest.mark.parametrize("number", ["7", "12", "1.5", "2.", "1e5", "2E+3", "3e-2", "4.25e10"])
def test_numbers_are_one_token(number: str) -> None:
    assert _kinds(number) == [("number", number)]


@pytest.mark.parametrize(
    "text",
    [
        "'it''s'",  # a doubled quote stays in the string
        "'a\\'b'",  # so does an escaped one
        "'x -- y /* z'",
        "''",
        "'multi\nline'",
    ],
)
def test_strings_are_one_token(text: str) -> None:
    assert _kinds(text) == [("string", text)]


@pytest.mark.parametrize(
    "text", [BQ + "a" + BQ * 2 + "b" + BQ, '"q""x"', BQ + "a b(c)" + BQ, '""', BQ * 2]
)
def test_quoted_identifiers_are_one_token(text: str) -> None:
    assert _kinds(text) == [("quoted", text)]


@pytest.mark.parametrize("text", ["-- to the end", "/* one */", "/* two\nlines */", "/**/"])
def test_comments_are_one_token(text: str) -> None:
    assert _kinds(text) == [("comment", text)]


def test_a_line_comment_ends_at_the_newline_and_a_block_comment_at_its_first_close() -> None:
    assert _kinds("--a\nb") == [("comment", "--a"), ("space", "\n"), ("word", "b")]
    assert _kinds("/* a */ b /* c */") == [
        ("comment", "/* a */"),
        ("space", " "),
        ("word", "b"),
        ("space", " "),
        ("comment", "/* c */"),
    ]


def test_unterminated_string_is_punctuation_and_words() -> None:
    assert _kinds("'ab") == [("punct", "'"), ("word", "ab")]
    assert _kinds("/* x") == [("punct", "/"), ("punct", "*"), ("space", " "), ("word", "x")]


def test_tokens_round_trip_exactly() -> None:
    sql = "SELECT\t`a``b`, 'x''y' /* c */ -- d\n FROM \"t\"\"u\" WHERE a >= 1.5e3;"
    assert join(tokenize(sql)) == sql
    assert join([]) == ""


def test_trivia_is_space_and_comments_only() -> None:
    kinds = {t.kind: t.trivia for t in tokenize("a 'b' `c` 1 ( /* d */ -- e")}
    assert kinds == {
        "word": False,
        "space": True,
        "string": False,
        "quoted": False,
        "number": False,
        "punct": False,
        "comment": True,
    }


def test_is_word_is_case_insensitive_for_unquoted_words_only() -> None:
    word = Token("word", "Group")
    assert word.is_word("GROUP") and word.is_word("BY", "GROUP") and not word.is_word("BY")
    assert not Token("quoted", "`GROUP`").is_word("`GROUP`")
    assert not Token("quoted", "GROUP").is_word("GROUP")
    assert not Token("string", "GROUP").is_word("GROUP")
    assert not word.is_word()


def test_is_punct_needs_a_punct_token_with_that_text() -> None:
    assert Token("punct", "(").is_punct("(")
    assert not Token("punct", ")").is_punct("(")
    assert not Token("string", "(").is_punct("(")


def test_unquote_undoes_doubled_quotes_of_its_own_kind() -> None:
    assert unquote(Token("quoted", BQ + "a" + BQ * 2 + 'b"' + BQ)) == "a" + BQ + 'b"'
    assert unquote(Token("quoted", '"a""b`"')) == 'a"b' + BQ
    assert unquote(Token("word", "Plain")) == "Plain"
    assert unquote(Token("string", "'s'")) == "'s'"


# -- sqltext: levels and calls ----------------------------------------------------------------


def test_matching_paren_skips_nested_levels() -> None:
    tokens = tokenize("f(a, (b), g(c)) + d)")
    close = matching_paren(tokens, 1)
    assert join(tokens[: close + 1]) == "f(a, (b), g(c))"
    assert matching_paren(tokenize("f(a, (b)"), 1) == len(tokenize("f(a, (b)"))


def test_scan_level_stops_at_its_own_level_only() -> None:
    tokens = tokenize("a (x, y) , b) c")
    comma = scan_level(tokens, 0, lambda t: t.is_punct(","))
    assert join(tokens[:comma]) == "a (x, y) "
    # No stop at the starting level: the ")" that closes it.
    close = scan_level(tokens, 0, lambda t: t.is_word("c"))
    assert tokens[close].is_punct(")") and join(tokens[:close]) == "a (x, y) , b"
    # A stop token at the start is found at once; nothing: the length.
    assert scan_level(tokens, 0, lambda t: t.is_word("A")) == 0
    assert scan_level(tokens, 13, lambda t: t.is_word("ZZZ")) == len(tokens)
    assert scan_level(tokenize("a b"), 0, lambda t: False) == 3


def test_call_args_split_at_top_level_commas_trimmed() -> None:
    tokens = tokenize("f( a , g(b, c) /* x */,\n 'd,e' ) tail")
    args, close = call_args(tokens, 1)
    assert [join(a) for a in args] == ["a", "g(b, c)", "'d,e'"]
    assert join(tokens[close:]) == ") tail"
    assert call_args(tokenize("f()"), 1) == ([], 2)
    assert call_args(tokenize("f( )"), 1) == ([], 3)
    empty, _ = call_args(tokenize("f(a,,)"), 1)
    assert [join(a) for a in empty] == ["a", "", ""]


def test_levels_are_counted_at_any_depth() -> None:
    tokens = tokenize("f(((a)), g(h(b), c)) + d")
    close = matching_paren(tokens, 1)
    assert join(tokens[: close + 1]) == "f(((a)), g(h(b), c))"
    comma = scan_level(tokenize("((x)) , y"), 0, lambda t: t.is_punct(","))
    assert comma == 6  # ( ( x ) ) space ,
    args, _ = call_args(tokenize("f(g(h(a), b), c)"), 1)
    assert [join(a) for a in args] == ["g(h(a), b)", "c"]


def test_call_args_of_an_unclosed_call_run_to_the_end() -> None:
    tokens = tokenize("f(a, b")
    args, close = call_args(tokens, 1)
    assert [join(a) for a in args] == ["a", "b"] and close == len(tokens)


# -- intervals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1 microsecond", 1),
        ("3 MICROSECONDS", 3),
        ("1 millisecond", 1_000),
        ("5 milliseconds", 5_000),
        ("1 second", SECOND_US),
        ("7 seconds", 7 * SECOND_US),
        ("1 minute", MINUTE_US),
        ("1 hour", HOUR_US),
        ("1 day", DAY_US),
        ("2 weeks", 14 * DAY_US),
        ("  4\tHours ", 4 * HOUR_US),
        ("10minutes", 10 * MINUTE_US),
        ("1 Day", DAY_US),
    ],
)
def test_every_fixed_unit_in_microseconds(text: str, micros: int) -> None:
    assert parse_interval_micros(text) == micros


@pytest.mark.parametrize("text", ["1 month", "2 MONTHS", "1 quarter", "1 year", "3 years"])
def test_calendar_units_are_refused_by_name(text: str) -> None:
    unit = text.split()[1].upper().removesuffix("S")
    with pytest.raises(InvalidQuery, match=f"{unit} windows are not supported"):
        parse_interval_micros(text)


@pytest.mark.parametrize("text", ["1 fortnight", "1 ms", "1 d", "1 dayss"])
def test_unknown_units_are_refused(text: str) -> None:
    with pytest.raises(InvalidQuery, match="unknown time unit"):
        parse_interval_micros(text)


@pytest.mark.parametrize("text", ["day", "1", "-1 day", "1.5 days", "1 day extra", "", "x 1 day"])
def test_unreadable_durations_are_refused(text: str) -> None:
    with pytest.raises(InvalidQuery, match="cannot read the window duration"):
        parse_interval_micros(text)


def test_a_duration_must_be_positive() -> None:
    assert parse_interval_micros("1 microsecond") == 1
    for zero in ("0 microseconds", "0 days", "00 hours"):
        with pytest.raises(InvalidQuery, match="must be positive"):
            parse_interval_micros(zero)


@pytest.mark.parametrize(
    ("arg", "size"),
    [
        ("INTERVAL '2' HOUR", 2 * HOUR_US),
        ("interval '2 hours'", 2 * HOUR_US),
        ("'2 hours'", 2 * HOUR_US),
        ("INTERVAL 2 HOURS", 2 * HOUR_US),
        ("INTERVAL /* c */ '3' MINUTE", 3 * MINUTE_US),
    ],
)
def test_window_durations_in_every_spelling(arg: str, size: int) -> None:
    (w,) = _windows(f"SELECT count(*) FROM x GROUP BY TUMBLE(t, {arg})")
    assert (w.size_us, w.slide_us) == (size, size)


def test_a_window_needs_a_duration() -> None:
    for arg in ("INTERVAL", "/* nothing */", "''"):
        with pytest.raises(InvalidQuery, match="needs a duration"):
            _one(f"SELECT count(*) FROM x GROUP BY TUMBLE(t, {arg})")


# -- casts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "out"),
    [
        ("CAST(a AS TIMESTAMP(3))", "CAST(a AS TIMESTAMP)"),
        ("CAST(a AS TIMESTAMP_LTZ(3))", "CAST(a AS TIMESTAMP)"),
        ("cast(a as timestamp (6))", "cast(a as TIMESTAMP)"),
        ("CAST(a AS /* p */ TIMESTAMP( 9 ))", "CAST(a AS /* p */ TIMESTAMP)"),
        ("CAST(a AS TIMESTAMP) + 1", "CAST(a AS TIMESTAMP) + 1"),
        ("CAST(a AS TIMESTAMP(p))", "CAST(a AS TIMESTAMP(p))"),
        ("CAST(a AS TIMESTAMP(3, 4))", "CAST(a AS TIMESTAMP(3, 4))"),
        ("CAST(a AS TIMESTAMP())", "CAST(a AS TIMESTAMP())"),
        ("TIMESTAMP(3)", "TIMESTAMP(3)"),
        ("x AS TIMESTAMP", "x AS TIMESTAMP"),
        ("CAST(a AS `TIMESTAMP`(3))", "CAST(a AS `TIMESTAMP`(3))"),
        ("CAST(a AS DATE) AS d, TIMESTAMP(3)", "CAST(a AS DATE) AS d, TIMESTAMP(3)"),
    ],
)
def test_timestamp_precision_dropped_only_after_as_with_one_number(sql: str, out: str) -> None:
    assert _one(f"SELECT {sql} FROM x") == f"SELECT {out} FROM x"


def test_every_cast_of_a_query_is_rewritten() -> None:
    sql = "SELECT CAST(a AS TIMESTAMP(3)) AS a, CAST(b AS TIMESTAMP_LTZ(3)) AS b FROM x"
    assert _one(sql) == "SELECT CAST(a AS TIMESTAMP) AS a, CAST(b AS TIMESTAMP) AS b FROM x"


# -- Flink group windows ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "spark"),
    [
        ("TUMBLE(t, INTERVAL '1' DAY)", "window(t, '1 DAY')"),
        ("TUMBLE_START(t, INTERVAL '1' DAY)", "window(t, '1 DAY').start"),
        ("TUMBLE_END(t, INTERVAL '1' DAY)", "window(t, '1 DAY').end"),
        ("TUMBLE_ROWTIME(t, INTERVAL '1' DAY)", "window(t, '1 DAY').end - INTERVAL 1 MILLISECOND"),
        ("HOP(t, INTERVAL '1' HOUR, INTERVAL '2' HOUR)", "window(t, '2 HOUR', '1 HOUR')"),
        (
            "HOP_START(t, INTERVAL '1' HOUR, INTERVAL '2' HOUR)",
            "window(t, '2 HOUR', '1 HOUR').start",
        ),
        ("HOP_END(t, INTERVAL '1' HOUR, INTERVAL '2' HOUR)", "window(t, '2 HOUR', '1 HOUR').end"),
        (
            "HOP_ROWTIME(t, INTERVAL '1' HOUR, INTERVAL '2' HOUR)",
            "window(t, '2 HOUR', '1 HOUR').end - INTERVAL 1 MILLISECOND",
        ),
        ("tumble (x.ts, '5 minutes')", "window(x.ts, '5 minutes')"),
        ("Tumble_End(`t t`, INTERVAL '1 day')", "window(`t t`, '1 day').end"),
    ],
)
def test_flink_window_functions_become_spark_windows(call: str, spark: str) -> None:
    assert _one(f"SELECT {call} AS w FROM x") == f"SELECT {spark} AS w FROM x"


def test_flink_window_names_not_called_or_after_a_dot_are_kept() -> None:
    for sql in (
        "SELECT tumble, hop_end FROM x",
        "SELECT s.TUMBLE(t, INTERVAL '1' DAY) FROM x",
        "SELECT s . HOP(t, INTERVAL '1' DAY, INTERVAL '2' DAY) FROM x",
        "SELECT 'TUMBLE(t, 1)' FROM x",
        "SELECT tumbled(t) FROM x",
    ):
        assert _one(sql) == sql


def test_flink_window_rewritten_at_the_start_of_a_query() -> None:
    assert _one("TUMBLE_END(t, INTERVAL '1' DAY)") == "window(t, '1 DAY').end"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM x GROUP BY SESSION(t, INTERVAL '1' HOUR)",
        "SELECT SESSION_START(t, INTERVAL '1' HOUR) FROM x",
        "SELECT session_end (t, INTERVAL '1' HOUR) FROM x",
    ],
)
def test_session_windows_are_refused(sql: str) -> None:
    with pytest.raises(InvalidQuery, match="session windows are not supported"):
        _one(sql)


def test_a_column_named_session_is_not_a_session_window() -> None:
    sql = "SELECT session, sessions FROM x"
    assert _one(sql) == sql


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        ("TUMBLE(t)", r"TUMBLE takes \(time column, size\); got 1 arguments"),
        (
            "TUMBLE(t, INTERVAL '1' DAY, INTERVAL '1' DAY)",
            r"TUMBLE takes \(time column, size\); got 3 arguments",
        ),
        ("HOP(t, INTERVAL '1' DAY)", r"HOP takes \(time column, slide, size\); got 2 arguments"),
        ("HOP_END(t, '1 day', '2 days', '3 days')", "HOP_END takes .*got 4 arguments"),
        ("TUMBLE()", "got 0 arguments"),
    ],
)
def test_flink_windows_take_their_arguments(call: str, needle: str) -> None:
    with pytest.raises(InvalidQuery, match=needle):
        _one(f"SELECT count(*) FROM x GROUP BY {call}")


def test_window_table_valued_functions_are_refused() -> None:
    for fn in ("TUMBLE", "HOP"):
        with pytest.raises(InvalidQuery, match=f"{fn} as a table-valued function"):
            _one(f"SELECT * FROM TABLE({fn}(TABLE x, DESCRIPTOR(t), INTERVAL '1' DAY))")


# -- windowed selects -------------------------------------------------------------------------


def test_the_window_end_column_is_the_first_column_of_its_select() -> None:
    out = _one("SELECT k, count(*) FROM x GROUP BY k, window(t, '1 hour')")
    assert out == (
        f"SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k, count(*) FROM x "
        "GROUP BY k, window(t, '1 hour')"
    )
    assert WINDOW_END_COLUMN.startswith(HIDDEN_PREFIX)
    assert VALID_TO_COLUMN.startswith(HIDDEN_PREFIX)


@pytest.mark.parametrize("modifier", ["DISTINCT", "ALL", "distinct"])
def test_the_window_end_column_follows_distinct_or_all(modifier: str) -> None:
    out = _one(f"SELECT {modifier} k FROM x GROUP BY window(t, '1 hour'), k")
    assert out.startswith(f"SELECT {modifier} window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k")


def test_group_and_by_may_be_apart() -> None:
    out = _one("SELECT k FROM x GROUP /* c */\n BY window(t, '1 hour')")
    assert out.startswith(f"SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k")


def test_group_without_by_is_no_grouping() -> None:
    for sql in ("SELECT `group` FROM x", "SELECT group FROM x WHERE window(t, '1 hour') > 0"):
        assert _one(sql) == sql
        assert _windows(sql) == ()


def test_only_a_window_of_the_group_by_clause_counts() -> None:
    for tail in (
        "HAVING window(t, '1 hour') IS NOT NULL",
        "ORDER BY window(t, '1 hour')",
        "LIMIT 1 UNION SELECT window(t, '1 hour') FROM y",
        "WINDOW w AS (PARTITION BY window(t, '1 hour'))",
        "QUALIFY window(t, '1 hour') IS NULL",
        "SORT BY window(t, '1 hour')",
        "CLUSTER BY window(t, '1 hour')",
        "DISTRIBUTE BY window(t, '1 hour')",
        "EXCEPT SELECT window(t, '1 hour') FROM y",
        "INTERSECT SELECT window(t, '1 hour') FROM y",
    ):
        sql = f"SELECT k FROM x GROUP BY k {tail}"
        assert _one(sql) == sql, tail
        assert _windows(sql) == (), tail


def test_a_group_by_inside_parentheses_ends_at_its_close() -> None:
    sql = "SELECT * FROM (SELECT k FROM x GROUP BY k) AS a JOIN y ON window(a.t, '1 hour') = y.w"
    assert _one(sql) == sql
    assert _windows(sql) == ()


def test_a_window_nested_in_a_group_by_expression_counts() -> None:
    sql = "SELECT k FROM x GROUP BY k, (window(t, '1 hour'))"
    assert _windows(sql) == (WindowSpec("t", HOUR_US, HOUR_US),)


def test_a_method_named_window_is_not_a_window() -> None:
    sql = "SELECT k FROM x GROUP BY k, s.window(t, '1 hour')"
    assert _one(sql) == sql and _windows(sql) == ()


def test_a_window_column_is_not_a_window_call() -> None:
    sql = "SELECT window.start, count(*) FROM x GROUP BY window, k"
    assert _one(sql) == sql and _windows(sql) == ()


def test_only_the_first_window_of_a_group_by_is_used() -> None:
    sql = "SELECT k FROM x GROUP BY window(t, '1 hour'), window(u, '2 hours')"
    out = _one(sql)
    assert out.count(WINDOW_END_COLUMN) == 1
    assert out.startswith(f"SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k")
    assert _windows(sql) == (WindowSpec("t", HOUR_US, HOUR_US),)


def test_every_windowed_select_of_a_query_is_marked() -> None:
    sql = (
        "SELECT a.k FROM (SELECT k FROM x GROUP BY window(t, '1 hour'), k) AS a "
        "JOIN (SELECT k FROM y GROUP BY window(u, '2 hours'), k) AS b ON a.k = b.k"
    )
    out = _one(sql)
    assert out == (
        f"SELECT a.k FROM (SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k FROM x "
        "GROUP BY window(t, '1 hour'), k) AS a "
        f"JOIN (SELECT window(u, '2 hours').end AS {WINDOW_END_COLUMN}, k FROM y "
        "GROUP BY window(u, '2 hours'), k) AS b ON a.k = b.k"
    )
    assert _windows(sql) == (
        WindowSpec("t", HOUR_US, HOUR_US),
        WindowSpec("u", 2 * HOUR_US, 2 * HOUR_US),
    )


def test_a_group_by_without_its_select_is_counted_but_not_marked() -> None:
    sql = "FROM x GROUP BY window(t, '1 hour')"
    assert _one(sql) == sql
    assert _windows(sql) == (WindowSpec("t", HOUR_US, HOUR_US),)
    # The SELECT of an enclosing level is not this GROUP BY's.
    nested = "SELECT * FROM (FROM x GROUP BY window(t, '1 hour'))"
    assert _one(nested) == nested
    assert len(_windows(nested)) == 1


def test_the_window_end_goes_to_the_select_of_its_own_level() -> None:
    sql = "SELECT (SELECT 1), k FROM x GROUP BY window(t, '1 hour')"
    assert _one(sql).startswith(
        f"SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, (SELECT 1)"
    )


def test_window_specs_keep_the_time_expression_text() -> None:
    sql = "SELECT 1 FROM x GROUP BY window(CAST(a.ts AS TIMESTAMP(3)), '1 minute', '30 seconds')"
    assert _windows(sql) == (WindowSpec("CAST(a.ts AS TIMESTAMP)", MINUTE_US, 30 * SECOND_US),)


def test_a_window_takes_two_or_three_arguments() -> None:
    for args in ("t", "t, '1 hour', '1 hour', '1 minute'"):
        with pytest.raises(InvalidQuery, match="a start offset is not supported"):
            _one(f"SELECT 1 FROM x GROUP BY window({args})")


def test_a_slide_may_equal_the_size_but_not_exceed_it() -> None:
    sql = "SELECT 1 FROM x GROUP BY window(t, '1 hour', '60 minutes')"
    assert _windows(sql) == (WindowSpec("t", HOUR_US, HOUR_US),)
    with pytest.raises(InvalidQuery, match="slide must not exceed its size"):
        _one("SELECT 1 FROM x GROUP BY window(t, '1 hour', '3601 seconds')")


def test_window_spec_durations_are_checked() -> None:
    with pytest.raises(InvalidQuery, match="MONTH windows"):
        _one("SELECT 1 FROM x GROUP BY window(t, '1 hour', '1 month')")
    with pytest.raises(InvalidQuery, match="must be positive"):
        _one("SELECT 1 FROM x GROUP BY window(t, '0 hours')")


# -- temporal joins ---------------------------------------------------------------------------

RATES = TemporalSource("__odf_versions_0", "event_time", ("k",))


def _temporal_out(a: str, time_expr: str, cond: str, join_word: str = "JOIN") -> str:
    return (
        f"{join_word} `__odf_versions_0` AS {a} ON ({time_expr} >= {a}.`event_time` AND "
        f"({a}.{VALID_TO_COLUMN} IS NULL OR {time_expr} < {a}.{VALID_TO_COLUMN})) AND ({cond}) "
    )


@pytest.mark.parametrize(
    ("join_sql", "alias"),
    [
        ("JOIN r FOR SYSTEM_TIME AS OF a.t AS x ON a.k = x.k", "x"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t x ON a.k = x.k", "x"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t `x y` ON a.k = x.k", "`x y`"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t ON a.k = x.k", "`r`"),
        ("join R for system_time as of a.t on a.k = x.k", "`R`"),
        ("JOIN `r` FOR SYSTEM_TIME AS OF a.t ON a.k = x.k", "`r`"),
    ],
)
def test_temporal_join_alias_forms(join_sql: str, alias: str) -> None:
    out = _one(f"SELECT * FROM a {join_sql}", {"r": RATES})
    word = join_sql.split()[0]
    assert out == "SELECT * FROM a " + _temporal_out(alias, "a.t", "a.k = x.k", word)


@pytest.mark.parametrize("time_expr", ["a.t", "t", "`a`.`t t`", "db.a.t", "a.`t`"])
def test_temporal_join_time_expression_is_a_column_path(time_expr: str) -> None:
    out = _one(f"SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF {time_expr} ON c", {"r": RATES})
    assert out == "SELECT * FROM a " + _temporal_out("`r`", time_expr, "c")


def test_temporal_join_time_expression_ends_at_a_space() -> None:
    # The path stops at the first space: what follows is the alias.
    out = _one("SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t r2 ON c", {"r": RATES})
    assert out == "SELECT * FROM a " + _temporal_out("r2", "a.t", "c")


def test_temporal_join_time_expression_stops_at_on() -> None:
    out = _one("SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF t\nON c", {"r": RATES})
    assert out == "SELECT * FROM a " + _temporal_out("`r`", "t", "c")


def test_temporal_join_condition_ends_where_the_next_clause_starts() -> None:
    tail = " WHERE a.v > 1 GROUP BY a.k"
    out = _one(
        f"SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t ON (a.k = r.k){tail}", {"r": RATES}
    )
    assert out == "SELECT * FROM a " + _temporal_out("`r`", "a.t", "(a.k = r.k)") + tail.lstrip()


def test_two_temporal_joins_in_one_query() -> None:
    other = TemporalSource("__odf_versions_1", "date", ("id",))
    q = rewrite_steps(
        [
            _step(
                "SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t ON a.k = r.k "
                "LEFT JOIN s FOR SYSTEM_TIME AS OF a.t AS s2 ON a.i = s2.id"
            )
        ],
        {"r": RATES, "s": other},
    )
    out = q.steps[0].query
    assert out == (
        "SELECT * FROM a "
        + _temporal_out("`r`", "a.t", "a.k = r.k")
        + "LEFT JOIN `__odf_versions_1` AS s2 ON (a.t >= s2.`date` AND "
        f"(s2.{VALID_TO_COLUMN} IS NULL OR a.t < s2.{VALID_TO_COLUMN})) AND (a.i = s2.id) "
    )
    assert q.temporal_joins == frozenset({"r", "s"})


def test_temporal_tables_are_found_by_lower_case_name() -> None:
    q = rewrite_steps(
        [_step("SELECT * FROM a JOIN `Rates` FOR SYSTEM_TIME AS OF a.t ON c")], {"rates": RATES}
    )
    assert q.temporal_joins == frozenset({"rates"})


def test_a_quoted_temporal_table_name_is_unquoted_and_requoted() -> None:
    source = TemporalSource("v`1", "e`t", ("k",))
    out = _one("SELECT * FROM a JOIN `we``ird` FOR SYSTEM_TIME AS OF a.t ON c", {"we`ird": source})
    assert out == (
        "SELECT * FROM a JOIN `v``1` AS `we``ird` ON (a.t >= `we``ird`.`e``t` AND "
        f"(`we``ird`.{VALID_TO_COLUMN} IS NULL OR a.t < `we``ird`.{VALID_TO_COLUMN})) AND (c) "
    )


@pytest.mark.parametrize(
    ("join_sql", "needle"),
    [
        ("JOIN r FOR SYSTEM_TIME OF a.t ON c", "expected FOR SYSTEM_TIME AS OF"),
        ("JOIN r FOR SYSTEM AS OF a.t ON c", "expected FOR SYSTEM_TIME AS OF"),
        ("JOIN r FOR SYSTEM_TIME AS a.t ON c", "expected FOR SYSTEM_TIME AS OF"),
        ("JOIN r FOR", "expected FOR SYSTEM_TIME AS OF"),
        ("JOIN r FOR SYSTEM_TIME AS OF ON c", "needs a time column"),
        ("JOIN r FOR SYSTEM_TIME AS OF", "needs a time column"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t", "needs an ON condition"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t AS x", "needs an ON condition"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t x USING (k)", "needs an ON condition"),
    ],
)
def test_malformed_temporal_joins_are_refused(join_sql: str, needle: str) -> None:
    with pytest.raises(InvalidQuery, match=needle):
        _one(f"SELECT * FROM a {join_sql}", {"r": RATES})


def test_the_temporal_rewrite_does_not_touch_other_joins() -> None:
    sql = "SELECT * FROM a JOIN b ON a.k = b.k JOIN c USING (k) CROSS JOIN d"
    assert _one(sql, {"r": RATES}) == sql


# -- interval joins: the hold-back ------------------------------------------------------------


@pytest.mark.parametrize(
    ("cond", "hold"),
    [
        ("a.t = b.t + INTERVAL '2' HOUR", 2 * HOUR_US),
        ("a.t = b.t + INTERVAL '2 hours'", 2 * HOUR_US),
        ("a.t = b.t + INTERVAL 2 HOURS", 2 * HOUR_US),
        ("a.t = b.t + interval '90' minute", 90 * MINUTE_US),
        ("a.t BETWEEN b.t - INTERVAL '1' DAY AND b.t + INTERVAL '3' DAY", 3 * DAY_US),
        ("a.t > b.t - INTERVAL '3' DAY AND a.t < b.t + INTERVAL '1' DAY", 3 * DAY_US),
        ("a.t = b.t + INTERVAL '1' MONTH", 0),  # not a fixed length: no bound from it
        ("a.t = b.t + INTERVAL", 0),
        ("a.t = b.t", 0),
    ],
)
def test_hold_back_is_the_largest_interval_of_a_join_condition(cond: str, hold: int) -> None:
    q = rewrite_steps([_step(f"SELECT * FROM a JOIN b ON {cond}")], {})
    assert q.hold_back_us == hold


def test_hold_back_is_the_largest_over_the_joins_of_a_step() -> None:
    sql = (
        "SELECT * FROM a JOIN b ON a.t < b.t + INTERVAL '2' HOUR "
        "LEFT JOIN c ON a.t < c.t + INTERVAL '5' HOUR "
        "JOIN d ON a.t < d.t + INTERVAL '1' HOUR"
    )
    assert rewrite_steps([_step(sql)], {}).hold_back_us == 5 * HOUR_US


@pytest.mark.parametrize(
    "after",
    [
        "WHERE a.t > now() - INTERVAL '9' DAY",
        "GROUP BY a.t + INTERVAL '9' DAY",
        "ORDER BY a.t + INTERVAL '9' DAY",
        "HAVING max(a.t) > now() - INTERVAL '9' DAY",
        "LIMIT 1 UNION SELECT a.t + INTERVAL '9' DAY FROM c",
        "; SELECT a.t + INTERVAL '9' DAY",
        "WINDOW w AS (ORDER BY a.t + INTERVAL '9' DAY)",
    ],
)
def test_intervals_after_the_on_condition_do_not_hold_back(after: str) -> None:
    sql = f"SELECT * FROM a JOIN b ON a.t < b.t + INTERVAL '1' HOUR {after}"
    assert rewrite_steps([_step(sql)], {}).hold_back_us == HOUR_US


def test_intervals_before_on_do_not_hold_back() -> None:
    sql = (
        "SELECT * FROM a JOIN (SELECT t + INTERVAL '9' DAY AS t FROM b) AS bb "
        "ON a.t < bb.t + INTERVAL '1' HOUR"
    )
    assert rewrite_steps([_step(sql)], {}).hold_back_us == HOUR_US


def test_a_join_with_using_or_no_condition_holds_nothing_back() -> None:
    for sql in (
        "SELECT * FROM a JOIN b USING (t) WHERE a.t > b.t - INTERVAL '9' DAY",
        "SELECT * FROM a CROSS JOIN b WHERE a.t > b.t - INTERVAL '9' DAY",
        "SELECT * FROM a JOIN b",
    ):
        assert rewrite_steps([_step(sql)], {}).hold_back_us == 0, sql


def test_the_on_condition_ends_at_the_next_join() -> None:
    sql = "SELECT * FROM a JOIN b ON a.k = b.k NATURAL JOIN c WHERE a.t > now() - INTERVAL '9' DAY"
    assert rewrite_steps([_step(sql)], {}).hold_back_us == 0


def test_a_subquery_join_condition_counts_at_its_own_level() -> None:
    sql = (
        "SELECT * FROM (SELECT * FROM a JOIN b ON a.t < b.t + INTERVAL '2' HOUR) AS x "
        "WHERE x.t > now() - INTERVAL '9' DAY"
    )
    assert rewrite_steps([_step(sql)], {}).hold_back_us == 2 * HOUR_US


def test_hold_back_after_a_temporal_join_in_the_same_step() -> None:
    sql = (
        "SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t ON a.k = r.k "
        "JOIN b ON a.t < b.t + INTERVAL '4' HOUR"
    )
    q = rewrite_steps([_step(sql)], {"r": RATES})
    assert q.hold_back_us == 4 * HOUR_US and q.temporal_joins == frozenset({"r"})


# -- the whole rewrite ------------------------------------------------------------------------


def test_steps_keep_their_aliases_and_order() -> None:
    q = rewrite_steps([_step("SELECT 1", "a"), _step("SELECT 2", "b"), _step("SELECT 3")], {})
    assert q.steps == (_step("SELECT 1", "a"), _step("SELECT 2", "b"), _step("SELECT 3"))


def test_windows_and_temporal_joins_are_collected_over_all_steps() -> None:
    q = rewrite_steps(
        [
            _step("SELECT k FROM x GROUP BY window(t, '1 hour')", "a"),
            _step("SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t ON c", "b"),
            _step("SELECT k FROM b GROUP BY window(u, '1 day')"),
        ],
        {"r": RATES},
    )
    assert q.windows == (WindowSpec("t", HOUR_US, HOUR_US), WindowSpec("u", DAY_US, DAY_US))
    assert q.temporal_joins == frozenset({"r"})
    assert rewrite_steps([], {}).steps == ()
    assert rewrite_steps([], {}).hold_back_us == 0


def test_fingerprint_is_sha256_of_every_alias_and_rewritten_query() -> None:
    # Stored with a query's state: the same formula keeps existing state usable.
    steps = [_step("SELECT CAST(a AS TIMESTAMP(3)) FROM x", "a"), _step("SELECT * FROM a")]
    q = rewrite_steps(steps, {})
    expected = hashlib.sha256(
        b"a\x00SELECT CAST(a AS TIMESTAMP) FROM x\x00None\x00SELECT * FROM a\x00"
    ).hexdigest()
    assert q.fingerprint == expected
    renamed = rewrite_steps([_step(s.query, "b" if s.alias else None) for s in steps], {})
    assert renamed.fingerprint != q.fingerprint


# -- checking a query at `odf add` ------------------------------------------------------------


def test_check_refuses_a_temporal_table_that_is_not_an_input() -> None:
    steps = [_step("SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t ON c")]
    with pytest.raises(InvalidQuery, match="temporal table 'r' is not an input"):
        check_streaming_query(steps, [("r", ["k"])], ["a", "b"])


def test_check_refuses_a_temporal_table_without_a_primary_key() -> None:
    steps = [_step("SELECT * FROM a JOIN r FOR SYSTEM_TIME AS OF a.t ON c")]
    with pytest.raises(InvalidQuery, match="temporal table 'r' needs a primary key"):
        check_streaming_query(steps, [("r", [])], ["a", "r"])


def test_check_matches_names_case_insensitively_and_runs_the_rewrite() -> None:
    steps = [_step("SELECT * FROM a JOIN rates FOR SYSTEM_TIME AS OF a.t ON c")]
    check_streaming_query(steps, [("Rates", ["k"])], ["a", "RATES"])  # accepted
    with pytest.raises(InvalidQuery, match="declare it in the transform's temporalTables"):
        check_streaming_query(steps, [], ["a", "rates"])
    with pytest.raises(InvalidQuery, match="session windows"):
        check_streaming_query(
            [_step("SELECT 1 FROM x GROUP BY SESSION(t, INTERVAL '1' HOUR)")], [], ["x"]
        )


# -- rules the tests above do not pin ---------------------------------------------------------


def test_group_by_needs_the_two_adjacent_words() -> None:
    # A struct field named `by` of a column named `group` is no GROUP BY.
    sql = "SELECT group.by, window(t, '1 hour') AS w FROM x"
    assert _one(sql) == sql and _windows(sql) == ()
    # GROUP as the query's last word.
    assert _one("SELECT k FROM x ORDER BY group") == "SELECT k FROM x ORDER BY group"


def test_a_column_named_group_does_not_hide_the_group_by_after_it() -> None:
    sql = "SELECT group, count(*) FROM x GROUP BY group, window(t, '1 hour')"
    assert _one(sql).startswith(f"SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, group")
    assert len(_windows(sql)) == 1


def test_window_as_the_last_word_of_a_group_by() -> None:
    sql = "SELECT window.start FROM x GROUP BY window"
    assert _one(sql) == sql and _windows(sql) == ()


def test_a_windowless_group_by_does_not_stop_the_search() -> None:
    sql = (
        "SELECT * FROM (SELECT k FROM x GROUP BY k) AS a "
        "JOIN (SELECT k FROM y GROUP BY window(t, '1 hour'), k) AS b ON a.k = b.k"
    )
    assert f"(SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k FROM y" in _one(sql)
    sql = (
        "SELECT * FROM (FROM x GROUP BY window(u, '1 day')) AS a "
        "JOIN (SELECT k FROM y GROUP BY window(t, '1 hour'), k) AS b ON a.k = b.k"
    )
    assert f"(SELECT window(t, '1 hour').end AS {WINDOW_END_COLUMN}, k FROM y" in _one(sql)
    assert len(_windows(sql)) == 2


# A ')' at the GROUP BY's own level closes one of its keys, not the clause (a subquery's
# closing ')' is one level up): the window after it must still be found.
@pytest.mark.parametrize("key", ["(k)", "lower(k)", "(a + b)"])
def test_a_window_after_a_parenthesized_group_key_is_found(key: str) -> None:
    sql = f"SELECT count(*) FROM x GROUP BY {key}, TUMBLE(t, INTERVAL '1' HOUR)"
    assert _windows(sql) == (WindowSpec("t", HOUR_US, HOUR_US),)


def test_a_cast_at_the_start_or_end_of_a_query() -> None:
    assert _one("TIMESTAMP(3)") == "TIMESTAMP(3)"  # no AS before it
    assert _one("SELECT a AS TIMESTAMP") == "SELECT a AS TIMESTAMP"


@pytest.mark.parametrize(
    ("cond", "hold"),
    [
        ("a.t > b.t - INTERVAL '3 hours' AND a.k = b.k", 3 * HOUR_US),
        ("a.t < b.t + INTERVAL '1' MONTH AND a.t > b.t - INTERVAL '2' HOUR", 2 * HOUR_US),
        ("a.t < b.`t` + INTERVAL '2' HOUR", 2 * HOUR_US),
        ("a.t < b.t + INTERVAL '2'", 0),  # no unit: no bound, and no crash
        ("(a.k = b.k) AND a.t < b.t + INTERVAL '2' HOUR", 2 * HOUR_US),
    ],
)
def test_hold_back_interval_forms(cond: str, hold: int) -> None:
    assert rewrite_steps([_step(f"SELECT * FROM a JOIN b ON {cond}")], {}).hold_back_us == hold


def test_on_touching_its_neighbours() -> None:
    for sql in (
        "SELECT * FROM a JOIN b ON(a.k = b.k) AND a.t < b.t + INTERVAL '2' HOUR",
        "SELECT * FROM a JOIN (SELECT * FROM b)ON a.t < b.t + INTERVAL '2' HOUR",
    ):
        assert rewrite_steps([_step(sql)], {}).hold_back_us == 2 * HOUR_US, sql


def test_a_temporal_join_condition_holds_nothing_back() -> None:
    sql = (
        "SELECT * FROM a CROSS JOIN b JOIN r FOR SYSTEM_TIME AS OF a.t "
        "ON a.k = r.k AND r.v > a.t - INTERVAL '9' DAY"
    )
    assert rewrite_steps([_step(sql)], {"r": RATES}).hold_back_us == 0


@pytest.mark.parametrize(
    ("join_sql", "alias", "time_expr", "cond"),
    [
        ("JOIN`r` FOR SYSTEM_TIME AS OF a.t ON c", "`r`", "a.t", "c"),
        ("JOIN `r`FOR SYSTEM_TIME AS OF a.t ON c", "`r`", "a.t", "c"),
        ("JOIN r FOR SYSTEM_TIME AS OF`a`.t ON c", "`r`", "`a`.t", "c"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.`t`AS x ON c", "x", "a.`t`", "c"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t AS`x` ON c", "`x`", "a.t", "c"),
        ("JOIN r FOR SYSTEM_TIME AS OF a.t `x`ON c", "`x`", "a.t", "c"),
        (
            "JOIN r FOR SYSTEM_TIME AS OF a.t ON(a.k = r.k) AND r.v > 0",
            "`r`",
            "a.t",
            "(a.k = r.k) AND r.v > 0",
        ),
    ],
)
def test_temporal_join_tokens_touching_without_spaces(
    join_sql: str, alias: str, time_expr: str, cond: str
) -> None:
    out = _one(f"SELECT * FROM a {join_sql}", {"r": RATES})
    expected = "SELECT * FROM a " + _temporal_out(alias, time_expr, cond)
    if join_sql.startswith("JOIN`"):  # the text around the table is kept as written
        expected = expected.replace("JOIN `", "JOIN`", 1)
    assert out == expected
