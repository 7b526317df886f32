"""``odf engine``, ``odf sql`` and the derivative parts of ``odf pull`` / ``odf verify``.

`cmd_pull_derivative` and `cmd_verify_replay` are handlers for the lead's ``odf pull``
and ``odf verify`` (they read ``args.dataset`` (list), ``args.recursive`` and
``args.output_format``); `register` adds the ``engine`` and ``sql`` commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from node.cli_util import EXIT_OK, open_workspace
from node.errors import VerificationFailed

__all__ = [
    "SQL_OUTPUT_FORMATS",
    "cmd_engine_run",
    "cmd_engine_status",
    "cmd_engine_stop",
    "cmd_pull_derivative",
    "cmd_sql",
    "cmd_verify_replay",
    "pull_result_rows",
    "register",
    "replay_report_rows",
]

SQL_OUTPUT_FORMATS: Final = ("table", "csv", "json", "parquet")
#: `engine.server.DEFAULT_HOST` / `DEFAULT_PORT`, repeated here so that building the
#: parser does not import the engine server (grpc, the codec); a test keeps them equal.
ENGINE_DEFAULT_HOST: Final = "127.0.0.1"
ENGINE_DEFAULT_PORT: Final = 5544


def cmd_engine_run(args: argparse.Namespace) -> int:
    """Run the engine server in the foreground until SIGTERM/SIGINT."""
    import logging

    from engine.server import run_engine

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run_engine(args.host, args.port, args.master, warmup=not args.no_warmup)
    return EXIT_OK


def cmd_engine_status(args: argparse.Namespace) -> int:
    """Show the workspace's shared engine (or the configured address)."""
    from node.engine_manager import configured_address, engine_status

    ws = open_workspace(args)
    address = configured_address(ws)
    if address is not None:
        print(f"configured engine: {address}")
        return EXIT_OK
    record = engine_status(ws)
    if record is None:
        print("no engine running (one starts on demand)")
    else:
        print(
            f"engine at {record.address} (supervisor pid {record.pid}, engine pid "
            f"{record.engine_pid}, idle timeout {record.idle_timeout:g} s)"
        )
    return EXIT_OK


def cmd_engine_stop(args: argparse.Namespace) -> int:
    """Stop the workspace's shared engine."""
    from node.engine_manager import stop_shared_engine

    record = stop_shared_engine(open_workspace(args))
    print("no engine was running" if record is None else f"stopped engine at {record.address}")
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    """Run a SQL query over the workspace's datasets (`node.sql.command`)."""
    from node.sql.command import cmd_sql as run

    return run(args)


def pull_result_rows(result: Any) -> list[dict[str, Any]]:
    """Plain rows of a `node.transform.PullResult` (upstream first)."""
    rows = []
    for r in (*result.upstream, result):
        rows.append(
            {
                "dataset": r.alias,
                "status": str(r.status),
                "records": r.num_records,
                "watermark": str(r.new_watermark) if r.new_watermark else None,
                "head": str(r.new_head),
                "warnings": list(r.warnings),
            }
        )
    return rows


def cmd_pull_derivative(args: argparse.Namespace) -> int:
    """Pull derivative datasets: ``args.dataset`` (aliases), ``args.recursive``."""
    from node.render.output import render
    from node.transform import pull_derivative

    ws = open_workspace(args)
    refs = args.dataset if isinstance(args.dataset, list) else [args.dataset]
    rows: list[dict[str, Any]] = []
    for ref in refs:
        rows += pull_result_rows(pull_derivative(ws, ref, recursive=args.recursive))
    fmt = getattr(args, "output_format", "table")
    if fmt == "table":
        for row in rows:
            detail = f", {row['records']} record(s)" if row["status"] == "updated" else ""
            print(f"{row['dataset']}: {row['status']}{detail}")
            for w in row["warnings"]:
                sys.stderr.write(f"odf: warning: {row['dataset']}: {w}\n")
    else:
        render(rows, fmt)
    return EXIT_OK


def replay_report_rows(report: Any) -> list[dict[str, Any]]:
    """Plain rows of a `node.validation.replay.ReplayReport` (upstream first)."""
    rows = []
    for r in (*report.upstream, report):
        first = r.integrity.first_bad_block
        rows.append(
            {
                "dataset": r.alias,
                "id": str(r.dataset_id),
                "ok": r.ok,
                "integrity": r.integrity.ok,
                "integrityProblem": first.message if first else None,
                "transformsReplayed": r.transforms_replayed,
                "mismatch": str(r.mismatch) if r.mismatch else None,
                "mismatchBlock": str(r.mismatch.block_hash) if r.mismatch else None,
                "mismatchField": r.mismatch.field if r.mismatch else None,
                "engine": r.engine_identity,
                "pinnedEngines": list(r.pinned_identities),
                "warnings": list(r.warnings),
            }
        )
    return rows


def cmd_verify_replay(args: argparse.Namespace) -> int:
    """Full verification (integrity + replay) of ``args.dataset`` (list; empty = all)."""
    from node.render.output import render
    from node.validation.replay import verify_replay

    ws = open_workspace(args)
    refs = args.dataset or [e.alias for e in ws.list()]
    rows: list[dict[str, Any]] = []
    for ref in refs:
        rows += replay_report_rows(
            verify_replay(ws, ref, recursive=getattr(args, "recursive", False))
        )
    fmt = getattr(args, "output_format", "table")
    if fmt == "table":
        for row in rows:
            status = "OK" if row["ok"] else "FAILED"
            print(f"{row['dataset']}: {status} ({row['transformsReplayed']} transform(s) replayed)")
            if row["integrityProblem"]:
                print(f"  - integrity: {row['integrityProblem']}")
            if row["mismatch"]:
                print(f"  - replay: {row['mismatch']}")
            for w in row["warnings"]:
                sys.stderr.write(f"odf: warning: {row['dataset']}: {w}\n")
    else:
        render(rows, fmt)
    failed = [r for r in rows if not r["ok"]]
    if failed:
        names = ", ".join(r["dataset"] for r in failed)
        raise VerificationFailed(f"verification failed: {names}", failed)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``engine`` and ``sql`` to the top-level sub-parsers."""
    engine = sub.add_parser("engine", help="run or manage the Spark engine")
    esub = engine.add_subparsers(dest="engine_command", required=True, metavar="COMMAND")
    p = esub.add_parser("run", help="run the engine gRPC server in the foreground")
    p.set_defaults(func=cmd_engine_run)
    p.add_argument("--host", default=ENGINE_DEFAULT_HOST, help="address to listen on (%(default)s)")
    p.add_argument("--port", type=int, default=ENGINE_DEFAULT_PORT, help="TCP port (%(default)s)")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--no-warmup", action="store_true", help="skip the start-up warm-up")
    p = esub.add_parser("status", help="show the workspace's shared engine")
    p.set_defaults(func=cmd_engine_status)
    p = esub.add_parser("stop", help="stop the workspace's shared engine")
    p.set_defaults(func=cmd_engine_stop)

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
    p.add_argument("--output-format", choices=SQL_OUTPUT_FORMATS, default="table")
    p.add_argument("--output-path", metavar="PATH", help="write the result to PATH")
    p.add_argument(
        "--engine",
        choices=("datafusion", "spark"),  # node.sql.query.SQL_ENGINES (not imported at start-up)
        default="datafusion",
        help="embedded DataFusion (default) or the shared Spark engine",
    )
