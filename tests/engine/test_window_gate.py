"""The window-mode gate condition keeps generated Java code the same from one pull to the next.

Spark inlines integer and timestamp literals into the Java code it generates, so a gate
written with them would be compiled (and JIT-compiled) anew in every pull, and Spark would
push it into the scan stage, the one that touches every input row. These tests pin the
form of `window_gate`; the streaming tests (tests/engine/test_streaming.py) check what it
selects through the engine.
"""

from __future__ import annotations

import re

from engine.streaming.execute import window_gate

GATE = 1_577_840_400_000_000  # 2020-01-01T01:00:00Z in µs
AFTER = 1_577_836_800_000_000


def _without_decimal_literals(cond: str) -> str:
    return re.sub(r"CAST\('-?\d+' AS DECIMAL\(20, 0\)\)", "D", cond)


def test_the_gate_and_frontier_are_decimal_literals() -> None:
    cond = window_gate("`end`", GATE, AFTER)
    assert f"CAST('{GATE}' AS DECIMAL(20, 0))" in cond
    assert f"CAST('{AFTER}' AS DECIMAL(20, 0))" in cond
    # No other number but the constant 0 the differences are compared with: a literal
    # that changes from pull to pull would be inlined in generated code.
    assert set(re.findall(r"\d+", _without_decimal_literals(cond))) == {"0"}


def test_two_pulls_differ_only_in_their_decimal_literals() -> None:
    first = window_gate("`end`", GATE, AFTER)
    second = window_gate("`end`", GATE + 3_600_000_000, GATE)
    assert first != second
    assert _without_decimal_literals(first) == _without_decimal_literals(second)


def test_the_comparisons_are_subtractions_and_the_row_index_keeps_the_filter_up() -> None:
    cond = window_gate("`end`", GATE, None)
    # A plain comparison with a DECIMAL literal is unwrapped by the optimizer into a
    # BIGINT one (inlined again); the subtraction is not.
    assert cond.startswith("unix_micros(`end`) - CAST(")
    assert "<= 0" in cond
    assert "> 0" not in cond  # no frontier yet: only the gate
    # The conjunct on the non-deterministic row index stops Spark from pushing the
    # condition below the aggregation; IS NOT NULL would be simplified away.
    assert cond.endswith("AND __odf_row_index >= 0")
    assert "IS NOT NULL" not in cond


def test_a_negative_instant_is_a_decimal_literal_too() -> None:
    cond = window_gate("`end`", -1_000_000, -2_000_000)
    assert "CAST('-1000000' AS DECIMAL(20, 0))" in cond
    assert "CAST('-2000000' AS DECIMAL(20, 0))" in cond
