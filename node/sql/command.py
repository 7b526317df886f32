"""``odf sql``: the command (arguments, warnings, output), on `node.sql.query`.

The default (embedded) path is what a user feels as interactive SQL, so it imports only
what it uses: the workspace is found and its datasets listed through `storage.catalog`
(no `storage.workspace`, no metadata model when the slice-list caches are current), the
evidence store is opened only when the workspace has p2p state and the query mentions a
dataset, the result is rendered from the Arrow table (no Parquet round trip), and
numpy/pandas/cloudpickle are kept out (`refuse_numpy`). ``--engine spark`` runs
`node.sql.query.run_sql` on the shared engine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from node.cli_util import EXIT_OK, open_workspace, workspace_root
from node.errors import UsageError
from node.numpy_free import refuse_numpy

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["P2P_DIR", "cmd_sql", "refuse_numpy", "warn_disputed"]

#: `p2p.head_store.P2P_DIR`: where a workspace keeps the evidence `node.validation.disputes`
#: reads; without it no dataset can be disputed (a test keeps them equal).
P2P_DIR: Final = "p2p"


def warn_disputed(root: Path, query: str) -> None:
    """Warn on stderr about disputed datasets the query reads (`node.validation.disputes`); ``root``
    is the workspace's ``.odf`` directory."""
    if not (root / P2P_DIR).is_dir():
        return  # no evidence store: nothing can be disputed
    from node.sql.query import datasets_in_query

    mentioned = datasets_in_query(root, query)
    if not mentioned:
        return
    from node.validation.disputes import disputed_warning
    from storage.workspace import Workspace

    ws = Workspace(root)
    for entry in mentioned:
        warning = disputed_warning(ws, entry.id)
        if warning is not None:
            sys.stderr.write(f"odf: warning: {warning}\n")


def _sql_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return value


def cmd_sql(args: argparse.Namespace) -> int:
    """Run a SQL query over the workspace's datasets (DataFusion, or Spark); without one,
    a shell on a terminal, else the statements of ``--script`` or stdin (`node.sql.shell`)."""
    fmt = args.output_format
    if fmt == "parquet" and not args.output_path:
        raise UsageError("--output-format parquet needs --output-path")
    if args.query is None or args.script is not None:
        return _statements(args)
    if args.engine == "spark":
        return _run_on_spark(args)
    refuse_numpy()
    root = workspace_root(args)
    warn_disputed(root, args.query)
    from node.sql.query import run_embedded

    table = run_embedded(root, args.query, without_pandas=True)
    if fmt == "parquet":
        _write_parquet(table, Path(args.output_path))
        print(f"wrote {table.num_rows} record(s) to {args.output_path}")
        return EXIT_OK
    _emit(table, fmt, args.output_path)
    return EXIT_OK


def _statements(args: argparse.Namespace) -> int:
    """The shell, or a script (``--script FILE``, or stdin when it is not a terminal)."""
    from node.sql.shell import run_script, run_shell

    if args.query is not None:
        raise UsageError("give a query or --script, not both")
    if args.output_format == "parquet" or args.output_path:
        raise UsageError("a shell or script writes its results to stdout (no --output-*)")
    run_one = _one_statement(args)

    def emit(table: pa.Table) -> None:
        _emit(table, args.output_format, None)

    if args.script is not None:
        run_script(Path(args.script).read_text(encoding="utf-8"), run_one, emit)
    elif not sys.stdin.isatty():
        run_script(sys.stdin.read(), run_one, emit)
    else:
        run_shell(run_one, emit, _said, stdin=sys.stdin, stdout=sys.stdout, interactive=True)
    return EXIT_OK


def _one_statement(args: argparse.Namespace) -> Callable[[str], pa.Table]:
    """How the shell runs one statement: the engine of ``--engine``, the datasets as they
    are when the statement runs (a pull in another terminal shows in the next one)."""
    if args.engine == "spark":
        import tempfile

        from node.sql.query import run_sql

        ws = open_workspace(args)

        def on_spark(query: str) -> pa.Table:
            warn_disputed(ws.root, query)
            with tempfile.TemporaryDirectory(prefix="odf-sql-") as tmp:
                return run_sql(ws, query, Path(tmp) / "result.parquet", sql_engine="spark").read()

        return on_spark
    refuse_numpy()
    root = workspace_root(args)
    from node.sql.query import run_embedded

    def embedded(query: str) -> pa.Table:
        warn_disputed(root, query)
        return run_embedded(root, query, without_pandas=True)

    return embedded


def _said(error: BaseException) -> bool:
    """Write a statement's error as the CLI would; False for a bug (exit 1 material)."""
    from node.cli_util import EXIT_INTERNAL
    from node.error_contract import exit_code_for, report_error

    if exit_code_for(error) == EXIT_INTERNAL and not isinstance(error, OSError):
        return False
    report_error(error, "sql")
    return True


def _run_on_spark(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from node.sql.query import run_sql

    ws = open_workspace(args)
    warn_disputed(ws.root, args.query)
    with tempfile.TemporaryDirectory(prefix="odf-sql-") as tmp:
        path = Path(tmp) / "result.parquet"
        result = run_sql(ws, args.query, path, sql_engine="spark")
        if args.output_format == "parquet":
            shutil.move(result.path, args.output_path)
            print(f"wrote {result.num_records} record(s) to {args.output_path}")
            return EXIT_OK
        _emit(result.read(), args.output_format, args.output_path)
    return EXIT_OK


def _write_parquet(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _emit(table: pa.Table, fmt: str, output_path: str | None) -> None:
    """Write ``table`` as ``fmt`` (table, csv, json) to ``output_path`` or stdout."""
    from node.render.output import render
    from node.sql.query import MAX_RESULT_ROWS_SHOWN

    out = open(output_path, "w", encoding="utf-8") if output_path else sys.stdout  # noqa: SIM115
    try:
        if fmt == "csv":
            out.write(_csv_text(table))
        elif fmt == "json":
            rows = [{k: _sql_value(v) for k, v in r.items()} for r in table.to_pylist()]
            out.write(json.dumps(rows, indent=2, ensure_ascii=False, default=str) + "\n")
        else:
            from node.render.csv import nested_as_json

            shown = [
                {k: nested_as_json(v) for k, v in row.items()}
                for row in table.slice(0, MAX_RESULT_ROWS_SHOWN).to_pylist()
            ]
            render(shown, "table", columns=table.column_names, out=out)
            if table.num_rows > MAX_RESULT_ROWS_SHOWN:
                sys.stderr.write(
                    f"odf: note: showing {MAX_RESULT_ROWS_SHOWN} of {table.num_rows} rows\n"
                )
    finally:
        if out is not sys.stdout:
            out.close()


def _csv_text(table: pa.Table) -> str:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # pyarrow writes bytes: into memory, then decoded for a text stream, with line ends
    # translated as reading it back as text would (universal newlines).
    from node.render.csv import csv_ready

    sink = pa.BufferOutputStream()
    pacsv.write_csv(csv_ready(table), sink)
    text: str = sink.getvalue().to_pybytes().decode("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n")
