"""Spark's error texts become one line: the message, without Spark's advice or plan.

The texts are Spark 4's own (captured from `pyspark.sql.SparkSession.sql`); the engine
tests that run Spark check the same function on live exceptions.
"""

from __future__ import annotations

import pytest

from engine.sql import trim_spark_message

TABLE_NOT_FOUND = (
    "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found. Verify the spelling "
    "and correctness of the schema and catalog.\nSearch path: [`system`.`builtin`, "
    "`system`.`session`, `spark_catalog`.`default`].\nIf you did not qualify the name with a "
    "schema, verify the current_schema() output, or qualify the name with the correct schema "
    "and catalog.\nTo tolerate the error on drop use DROP VIEW IF EXISTS or DROP TABLE IF "
    "EXISTS. SQLSTATE: 42P01; line 1 pos 14;\n'Project [*]\n+- 'UnresolvedRelation [nope], [], "
    "false\n"
)
UNRESOLVED = (
    "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name "
    "`nope` cannot be resolved. Did you mean one of the following? [`a`]. SQLSTATE: 42703"
)
SYNTAX = (
    "\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'FORM'. SQLSTATE: 42601 (line 1, pos 9)\n\n"
    "== SQL ==\nSELECT * FORM t\n---------^^^\n"
)
STACK = "boom: something failed\n\tat org.apache.spark.Foo(Foo.scala:1)\n\tat x.y(Z.java:2)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            TABLE_NOT_FOUND,
            "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found. line 1 pos 14",
        ),
        (
            UNRESOLVED,
            "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with "
            "name `nope` cannot be resolved. Did you mean one of the following? [`a`].",
        ),
        (SYNTAX, "[PARSE_SYNTAX_ERROR] Syntax error at or near 'FORM'. (line 1, pos 9)"),
        (STACK, "boom: something failed"),
    ],
)
def test_one_line_without_spark_advice(text: str, expected: str) -> None:
    trimmed = trim_spark_message(text)
    assert trimmed == expected
    assert "\n" not in trimmed and "DROP VIEW" not in trimmed and "SQLSTATE" not in trimmed
