"""``odf sql``: SQL over the workspace's datasets (`node.sql.command`)."""

from __future__ import annotations

import argparse
from typing import Any, Final

__all__ = ["SQL_OUTPUT_FORMATS", "cmd_sql", "register"]

SQL_OUTPUT_FORMATS: Final = ("table", "csv", "json", "parquet")


def cmd_sql(args: argparse.Namespace) -> int:
    """Run a SQL query over the workspace's datasets (`node.sql.command`)."""
    from node.sql.command import cmd_sql as run

    return run(args)


def register(sub: Any) -> None:
    """Add ``sql`` to the top-level sub-parsers."""
    p = sub.add_parser(
        "sql",
        help="run SQL over the workspace's datasets (tables named by alias)",
        description="Run SQL over the datasets (embedded DataFusion, or Spark with --engine "
        "spark); quote aliases with dots: `a.b`.",
    )
    p.set_defaults(func=cmd_sql)
    p.add_argument(
        "query",
        nargs="?",
        help='SQL text, e.g. "SELECT * FROM `my.data` LIMIT 10"; without it: a shell on a '
        "terminal, else the statements read from stdin",
    )
    p.add_argument(
        "--script", metavar="FILE", help="run the ';'-separated statements of FILE in order"
    )
    p.add_argument("-o", "--output-format", choices=SQL_OUTPUT_FORMATS, default="table")
    p.add_argument("--output-path", metavar="PATH", help="write the result to PATH")
    p.add_argument(
        "--engine",
        choices=("datafusion", "spark"),  # node.sql.query.SQL_ENGINES (not imported at start-up)
        default="datafusion",
        help="embedded DataFusion (default) or the shared Spark engine",
    )
