"""The streaming SQL rewrite (pure text: no Spark)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from engine.checkpoint import extract_state, read_watermarks, write_checkpoint
from engine.errors import CheckpointError, InvalidQuery
from engine.streaming.rewrite import (
    VALID_TO_COLUMN,
    WINDOW_END_COLUMN,
    TemporalSource,
    WindowSpec,
    parse_interval_micros,
    rewrite_steps,
)
from engine.streaming.sqltext import join, tokenize
from engine.streaming.state import MODE_WINDOW, StreamState, load_state, save_state
from fbs.model.source import SqlQueryStep
from fbs.timestamp import Timestamp

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US


def _one(sql: str, temporal: dict[str, TemporalSource] | None = None) -> str:
    return rewrite_steps([SqlQueryStep(alias=None, query=sql)], temporal or {}).steps[0].query


def test_tokenizer_round_trips_and_ignores_quoted_text() -> None:
    sql = 'SELECT \'TUMBLE(x)\' AS `HOP(`, "q""" -- TUMBLE(\n/* HOP( */ FROM t'
    tokens = tokenize(sql)
    assert join(tokens) == sql
    assert _one(sql) == sql  # nothing in strings, identifiers or comments is rewritten


def test_tumble_becomes_a_spark_window_with_a_hidden_end_column() -> None:
    q = rewrite_steps(
        [
            SqlQueryStep(
                alias=None,
                query="SELECT TUMBLE_START(t, INTERVAL '1' DAY) AS s, "
                "TUMBLE_END(t, INTERVAL '1' DAY) "
                "AS e, TUMBLE_ROWTIME(t, INTERVAL '1' DAY) AS r, k, count(*) AS n FROM x "
                "GROUP BY TUMBLE(t, INTERVAL '1' DAY), k",
            )
        ],
        {},
    )
    sql = q.steps[0].query
    assert sql.startswith(f"SELECT window(t, '1 DAY').end AS {WINDOW_END_COLUMN}, ")
    assert "window(t, '1 DAY').start AS s" in sql
    assert "window(t, '1 DAY').end AS e" in sql
    assert "window(t, '1 DAY').end - INTERVAL 1 MILLISECOND AS r" in sql
    assert "GROUP BY window(t, '1 DAY'), k" in sql
    assert q.windows == (WindowSpec(time_expr="t", size_us=DAY_US, slide_us=DAY_US),)
    assert q.hold_back_us == 0


def test_hop_takes_slide_then_size() -> None:
    q = rewrite_steps(
        [
            SqlQueryStep(
                alias=None,
                query="SELECT HOP_END(t, INTERVAL '1' HOUR, INTERVAL '3' HOUR) AS e, count(*) "
                "FROM x GROUP BY HOP(t, INTERVAL '1' HOUR, INTERVAL '3' HOUR)",
            )
        ],
        {},
    )
    assert "window(t, '3 HOUR', '1 HOUR').end AS e" in q.steps[0].query
    assert q.windows == (WindowSpec(time_expr="t", size_us=3 * HOUR_US, slide_us=HOUR_US),)


def test_spark_window_is_marked_in_its_own_select_only() -> None:
    sql = (
        "SELECT * FROM (SELECT DISTINCT window.start AS w, count(*) AS n FROM x "
        "GROUP BY window(t, '10 minutes')) WHERE n > 1"
    )
    out = _one(sql)
    assert out.startswith("SELECT * FROM (SELECT DISTINCT window(t, '10 minutes').end AS ")
    assert out.count(WINDOW_END_COLUMN) == 1


def test_group_by_without_window_is_not_marked() -> None:
    sql = "SELECT k, count(*) AS n FROM x GROUP BY k ORDER BY window_size"
    assert _one(sql) == sql


def test_flink_timestamp_precision_is_dropped_in_casts_only() -> None:
    out = _one("SELECT CAST(a AS TIMESTAMP(3)) AS a, timestamp(b) AS b FROM x")
    assert out == "SELECT CAST(a AS TIMESTAMP) AS a, timestamp(b) AS b FROM x"


def test_temporal_join_becomes_an_interval_join_with_the_versions_view() -> None:
    source = TemporalSource("__odf_versions_1", "date", ("currency",))
    sql = (
        "SELECT t.a FROM trades AS t LEFT JOIN `rates.daily` FOR SYSTEM_TIME AS OF t.`ts` "
        "AS r ON t.c = r.currency OR t.c IS NULL WHERE t.a > 0"
    )
    q = rewrite_steps([SqlQueryStep(alias=None, query=sql)], {"rates.daily": source})
    out = q.steps[0].query
    assert (
        "LEFT JOIN `__odf_versions_1` AS r ON (t.`ts` >= r.`date` AND "
        f"(r.{VALID_TO_COLUMN} IS NULL OR t.`ts` < r.{VALID_TO_COLUMN})) AND "
        "(t.c = r.currency OR t.c IS NULL) WHERE t.a > 0"
    ) in out
    assert q.temporal_joins == frozenset({"rates.daily"})


def test_temporal_join_without_alias_keeps_the_table_name() -> None:
    source = TemporalSource("__odf_versions_0", "event_time", ("k",))
    out = _one("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF a.t ON a.k = b.k", {"b": source})
    assert "JOIN `__odf_versions_0` AS `b` ON (a.t >= `b`.`event_time`" in out


def test_temporal_join_on_an_undeclared_table_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="temporalTables"):
        _one("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF a.t ON a.k = b.k")


def test_interval_join_bound_is_the_hold_back_summed_over_steps() -> None:
    join_sql = (
        "SELECT * FROM o LEFT JOIN s ON o.id = s.id AND s.t BETWEEN o.t AND "
        "o.t + INTERVAL '2' DAY AND s.t > o.t - INTERVAL '3 hours'"
    )
    q = rewrite_steps(
        [
            SqlQueryStep(alias="a", query=join_sql),
            SqlQueryStep(
                alias=None, query="SELECT * FROM a JOIN b ON a.t = b.t + INTERVAL '1' HOUR"
            ),
        ],
        {},
    )
    assert q.hold_back_us == 2 * DAY_US + HOUR_US
    where_only = "SELECT * FROM o WHERE t > now() - INTERVAL '9' DAY"
    assert rewrite_steps([SqlQueryStep(alias=None, query=where_only)], {}).hold_back_us == 0


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("SELECT count(*) FROM x GROUP BY SESSION(t, INTERVAL '1' HOUR)", "session"),
        (
            "SELECT count(*) FROM TABLE(TUMBLE(TABLE x, DESCRIPTOR(t), INTERVAL '1' DAY))",
            "table-valued",
        ),
        ("SELECT count(*) FROM x GROUP BY TUMBLE(t, INTERVAL '1' MONTH)", "MONTH"),
        ("SELECT count(*) FROM x GROUP BY window(t, '1 year')", "YEAR"),
        ("SELECT count(*) FROM x GROUP BY window(t, '1 hour', '2 hours')", "slide"),
        ("SELECT count(*) FROM x GROUP BY window(t, '1 hour', '1 hour', '5 minutes')", "offset"),
        ("SELECT count(*) FROM x GROUP BY TUMBLE(t)", "TUMBLE takes"),
        ("SELECT count(*) FROM x GROUP BY window(t, '1 fortnight')", "unknown time unit"),
    ],
)
def test_unsupported_windows_are_refused_by_name(sql: str, needle: str) -> None:
    with pytest.raises(InvalidQuery, match=needle):
        _one(sql)


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1 day", DAY_US),
        ("2 HOURS", 2 * HOUR_US),
        ("10 minutes", 600_000_000),
        ("1 week", 7 * DAY_US),
        ("250 milliseconds", 250_000),
        ("1 second", 1_000_000),
    ],
)
def test_interval_parsing(text: str, micros: int) -> None:
    assert parse_interval_micros(text) == micros


def test_zero_interval_is_refused() -> None:
    with pytest.raises(InvalidQuery):
        parse_interval_micros("0 days")


def test_fingerprint_follows_the_query() -> None:
    a = rewrite_steps([SqlQueryStep(alias=None, query="SELECT 1")], {})
    b = rewrite_steps([SqlQueryStep(alias=None, query="SELECT 2")], {})
    assert (
        a.fingerprint == rewrite_steps([SqlQueryStep(alias=None, query="SELECT 1")], {}).fingerprint
    )
    assert a.fingerprint != b.fingerprint


# -- checkpoint state -------------------------------------------------------------------------


def test_checkpoint_carries_watermarks_and_state(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    save_state(state_dir, StreamState("abc", MODE_WINDOW, 42, {"input-0": "f01ed"}))
    (state_dir / "input-0").mkdir()
    (state_dir / "input-0" / "part.parquet").write_bytes(b"rows")
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, {"f01ed": Timestamp(7)}, state_dir)
    assert read_watermarks(ckpt) == {"f01ed": Timestamp(7)}
    out = tmp_path / "out"
    assert extract_state(ckpt, out)
    assert load_state(out) == StreamState("abc", MODE_WINDOW, 42, {"input-0": "f01ed"})
    assert (out / "input-0" / "part.parquet").read_bytes() == b"rows"
    plain = tmp_path / "plain"
    write_checkpoint(plain, {"f01ed": Timestamp(7)})
    assert not extract_state(plain, tmp_path / "none")


@pytest.mark.parametrize("name", ["state/../evil", "state//x", "state/a/../../b"])
def test_unsafe_state_entries_are_refused(tmp_path: Path, name: str) -> None:
    ckpt = tmp_path / "ckpt"
    with tarfile.open(ckpt, "w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 0
        tar.addfile(info)
    with pytest.raises(CheckpointError):
        extract_state(ckpt, tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_state_json_is_validated(tmp_path: Path) -> None:
    save_state(tmp_path, StreamState("abc", MODE_WINDOW, None, {"input-0": "f01ed"}))
    with pytest.raises(CheckpointError, match="missing"):
        load_state(tmp_path)  # input-0 does not exist
    (tmp_path / "state.json").write_text('{"format": 99}')
    with pytest.raises(CheckpointError, match="format"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text("not json")
    with pytest.raises(CheckpointError, match="malformed"):
        load_state(tmp_path)
