"""``odf ingest``, root pulls (for ``odf pull``), ``odf tail``, ``odf inspect``, ``odf export``.

Ingest errors (bad input, schema refused, no such source) are reported as one line and
exit with `EXIT_INVALID` (`EXIT_NOT_FOUND` for a missing source); nothing is committed.
Long ingests show a rich progress display on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from node.cli_util import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_OK, err, open_workspace
from node.errors import UsageError
from node.render.csv import json_default

if TYPE_CHECKING:
    import pyarrow as pa

    from fbs.timestamp import Timestamp
    from node.ingest.pipeline import IngestResult, Progress

__all__ = ["register"]

#: Default number of records shown by ``odf tail``.
DEFAULT_TAIL_ROWS: Final = 10
SCHEMA_FORMATS: Final = ("odf-yaml", "ddl", "arrow")
EXPORT_FORMATS: Final = ("parquet", "csv", "ndjson")
TAIL_FORMATS: Final = ("table", "json", "yaml", "csv")


def _timestamp(text: str) -> Timestamp:
    from fbs.errors import FbsError
    from fbs.timestamp import Timestamp

    try:
        return Timestamp.parse_rfc3339(text)
    except FbsError as e:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r} ({e})") from None


def _guard(fn: Any) -> Any:
    """Map ingest errors to exit codes (node.cli maps the storage/fbs ones)."""

    def run(args: argparse.Namespace) -> int:
        from node.ingest.errors import IngestError, SourceNotFound

        try:
            code: int = fn(args)
            return code
        except SourceNotFound as e:
            err(str(e))
            return EXIT_NOT_FOUND
        except IngestError as e:
            err(str(e))
            return EXIT_INVALID

    return run


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Progress | None]:
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    from node.ingest.pipeline import ProgressUpdate

    with RichProgress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.fields[rows]:>12,} rows"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("starting", rows=0)

        def report(u: ProgressUpdate) -> None:
            label = u.stage if u.file is None else f"{u.stage} {u.file}"
            bar.update(task, description=label, rows=u.rows)

        yield report


def _summary(result: IngestResult, verb: str) -> None:
    if result.up_to_date:
        print("Up to date: nothing new at the source")
        return
    if result.duplicate_input:
        print("Nothing ingested: this input was already ingested through this source")
        print("(the last commit recorded its digest; use --allow-duplicate to ingest it again)")
        return
    if result.empty_input:
        print("Nothing to ingest: the input holds no records")
        return
    if not result.committed:
        print(f"Nothing {verb}: no new records")
        return
    iv = result.offset_interval
    span = f" (offsets {iv.start}..{iv.end})" if iv is not None else ""
    wm = f", watermark {result.new_watermark}" if result.new_watermark is not None else ""
    schema = ", schema set" if result.schema_committed else ""
    print(f"{verb.capitalize()} {result.num_records} record(s){span}{wm}{schema}")
    print(f"New head: {result.new_head}")


@_guard
def cmd_ingest(args: argparse.Namespace) -> int:
    if bool(args.files) == bool(args.stdin):
        raise UsageError("give input files or --stdin (not both)")
    from node.numpy_free import refuse_numpy

    # Before pyarrow loads: numpy is a sixth of a small ingest's run and the pipeline
    # (readers, merges, writer, preprocess client) runs on pyarrow's numpy-free paths.
    refuse_numpy()
    from node.ingest.memory import use_ingest_memory_pool
    from node.ingest.pipeline import ingest

    use_ingest_memory_pool()
    ws = open_workspace(args)
    ds = ws.get(args.dataset)
    source: Any = sys.stdin.buffer if args.stdin else [Path(f) for f in args.files]
    with _progress(not args.no_progress) as progress:
        result = ingest(
            ds,
            source,
            source_name=args.source_name,
            event_time=args.event_time,
            input_format=args.input_format,
            progress=progress,
            allow_duplicate=args.allow_duplicate,
        )
    _summary(result, "ingested")
    return EXIT_OK


@_guard
def cmd_pull(args: argparse.Namespace) -> int:
    from node.ingest.memory import use_ingest_memory_pool
    from node.ingest.pipeline import pull

    use_ingest_memory_pool()
    ws = open_workspace(args)
    code = EXIT_OK
    for ref in args.dataset:
        ds = ws.get(ref)
        with _progress(not args.no_progress) as progress:
            result = pull(ds, set_watermark=args.set_watermark, progress=progress)
        print(f"{ref}:", end=" ")
        _summary(result, "pulled")
    return code


def _view(args: argparse.Namespace) -> Any:
    from node.api import DatasetView

    ws = open_workspace(args)
    return DatasetView(ws.get(args.dataset), name=args.dataset)


def _tail(args: argparse.Namespace) -> pa.Table:
    """The last ``-n`` records: only the newest slices are read (`storage.reads.read_tail`),
    without importing the Python API and the ingest pipeline (and through them pandas)."""
    from node.cli_util import workspace_root
    from storage.catalog import open_dataset, resolve
    from storage.reads import read_tail

    root = workspace_root(args)
    table = read_tail(open_dataset(root, resolve(root, args.dataset)), args.num_records)
    return _view(args).tail(args.num_records) if table is None else table  # no slice yet


def _write_csv(table: pa.Table, out: Any) -> None:
    import pyarrow.csv as pcsv

    from node.render.csv import csv_ready

    pcsv.write_csv(csv_ready(table), out)


def _write_ndjson(table: pa.Table, out: Any) -> None:
    import json

    for batch in table.to_batches():
        for row in batch.to_pylist():
            line = json.dumps(row, default=json_default, ensure_ascii=False) + "\n"
            out.write(line.encode())


def cmd_tail(args: argparse.Namespace) -> int:
    from node.render.output import render

    if args.num_records < 0:
        raise UsageError("-n must be >= 0")
    from node.numpy_free import refuse_numpy

    refuse_numpy()
    table = _tail(args)
    if args.output_format == "csv":
        _write_csv(table, sys.stdout.buffer)
        return EXIT_OK
    rows = _rows(table)
    if args.output_format == "table":
        if not rows:
            print("(no records)")
            return EXIT_OK
        render(_table_cells(rows), "table", columns=table.column_names)
    else:
        render(rows, args.output_format)
    return EXIT_OK


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table``'s rows as plain cells (what ``to_pylist`` and `_cell` give)."""
    columns = {name: _column_cells(table.column(name)) for name in table.column_names}
    rows = zip(*columns.values(), strict=True)
    return [dict(zip(columns, cells, strict=True)) for cells in rows]


#: Microseconds per unit of the timestamp units Python's datetime holds exactly.
_TIMESTAMP_US: Final = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _column_cells(col: pa.ChunkedArray) -> list[Any]:
    """`_cell` of every value; UTC and naive timestamps are built here because pyarrow's
    own conversion imports pandas (about as slow as the rest of ``odf tail`` together)."""
    import pyarrow as pa

    t = col.type
    if pa.types.is_timestamp(t) and t.unit in _TIMESTAMP_US and t.tz in (None, "UTC"):
        import datetime as dt

        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC if t.tz else None)
        per = _TIMESTAMP_US[t.unit]
        # A zero-copy view, not a cast: casting imports pyarrow.compute (slow too).
        ints = [v for chunk in col.chunks for v in chunk.view(pa.int64()).to_pylist()]
        return [
            None if v is None else _cell(epoch + dt.timedelta(microseconds=v * per)) for v in ints
        ]
    return [_cell(v) for v in col.to_pylist()]


def _cell(value: Any) -> Any:
    """A plain value for JSON/YAML output: nested values stay lists and mappings."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):  # lists; a map's (key, value) pairs
        return [_cell(v) for v in value]
    if isinstance(value, dict):
        return {k: _cell(v) for k, v in value.items()}
    return json_default(value)


def _table_cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the table output: a nested value shown as its JSON text."""
    from node.render.csv import nested_as_json

    return [{k: nested_as_json(v) for k, v in row.items()} for row in rows]


def ddl_of(t: pa.DataType) -> str:
    """Render an Arrow type in the spec's DDL syntax (``BIGINT``, ``ARRAY<STRING>``...)."""
    import pyarrow as pa

    types = pa.types
    simple = [
        (types.is_int8, "TINYINT"),
        (types.is_int16, "SMALLINT"),
        (types.is_int32, "INT"),
        (types.is_int64, "BIGINT"),
        (types.is_uint8, "TINYINT UNSIGNED"),
        (types.is_uint16, "SMALLINT UNSIGNED"),
        (types.is_uint32, "INT UNSIGNED"),
        (types.is_uint64, "BIGINT UNSIGNED"),
        (types.is_float16, "HALF"),
        (types.is_float32, "FLOAT"),
        (types.is_float64, "DOUBLE"),
        (types.is_boolean, "BOOLEAN"),
        (types.is_date, "DATE"),
        (types.is_timestamp, "TIMESTAMP"),
        (types.is_null, "NULL"),
    ]
    for check, name in simple:
        if check(t):
            return name
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return "STRING"
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return "BINARY"
    if types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        return f"ARRAY<{ddl_of(t.value_type)}>"
    if types.is_map(t):
        return f"MAP<{ddl_of(t.key_type)}, {ddl_of(t.item_type)}>"
    if types.is_struct(t):
        inner = ", ".join(f"{_ddl_name(f.name)}: {ddl_of(f.type)}" for f in t)
        return f"STRUCT<{inner}>"
    return str(t).upper()


def _ddl_name(name: str) -> str:
    return name if name.isidentifier() else "`" + name.replace("`", "``") + "`"


def cmd_inspect_schema(args: argparse.Namespace) -> int:
    view = _view(args)
    data_schema = view.data_schema()
    if data_schema is None:
        raise UsageError(f"dataset {args.dataset} has no schema yet (ingest data first)")
    if args.output_format == "odf-yaml":
        from fbs.manifest import to_plain
        from fbs.manifest.yamlio import dump_yaml

        sys.stdout.write(dump_yaml(to_plain(data_schema)))
    elif args.output_format == "arrow":
        print(view.schema().to_string(show_schema_metadata=False))
    else:
        for f in view.schema():
            null = "" if f.nullable else " NOT NULL"
            print(f"{_ddl_name(f.name)} {ddl_of(f.type)}{null}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    table = _view(args).to_arrow()
    fmt = args.output_format
    if args.output_path in (None, "-"):
        if fmt == "parquet" and sys.stdout.isatty():
            raise UsageError("refusing to write Parquet to a terminal; use --output-path")
        out: Any = sys.stdout.buffer
        if fmt == "parquet":
            pq.write_table(table, out, compression="snappy")
        elif fmt == "csv":
            _write_csv(table, out)
        else:
            _write_ndjson(table, out)
        out.flush()
        return EXIT_OK
    path = Path(args.output_path)
    if path.is_dir():
        raise UsageError(f"{path} is a directory")
    tmp = path.with_name(f".{path.name}.partial")
    try:
        if fmt == "parquet":
            pq.write_table(table, tmp, compression="snappy")
        else:
            with tmp.open("wb") as f:
                (_write_csv if fmt == "csv" else _write_ndjson)(table, f)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"Exported {table.num_rows} record(s) to {path}", file=sys.stderr)
    return EXIT_OK


def _format(p: argparse.ArgumentParser, choices: tuple[str, ...], default: str | None) -> None:
    p.add_argument(
        "--output-format",
        choices=list(choices),
        default=default,
        required=default is None,
        help="output format" + (f" (default: {default})" if default else ""),
    )


def register(sub: Any) -> None:
    """Add the ingest and read-back commands to the ``odf`` sub-parsers."""
    p = sub.add_parser("ingest", help="push files or stdin into a root dataset")
    p.set_defaults(func=cmd_ingest)
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files")
    p.add_argument("--stdin", action="store_true", help="read the input from stdin")
    p.add_argument("--source-name", help="push source to use (default: the only one)")
    p.add_argument(
        "--event-time", type=_timestamp, help="event time for data without one (RFC 3339)"
    )
    p.add_argument("--input-format", help="read the input as csv, ndjson, json, parquet...")
    p.add_argument(
        "--allow-duplicate",
        action="store_true",
        help="ingest even if this input equals the last one ingested through the source",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display")

    p = sub.add_parser("tail", help="show the last records of a dataset")
    p.set_defaults(func=cmd_tail)
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("-n", "--num-records", type=int, default=DEFAULT_TAIL_ROWS, metavar="N")
    _format(p, TAIL_FORMATS, "table")

    inspect = sub.add_parser("inspect", help="inspect a dataset")
    isub = inspect.add_subparsers(dest="inspect_command", required=True, metavar="COMMAND")
    p = isub.add_parser("schema", help="show a dataset's data schema")
    p.set_defaults(func=cmd_inspect_schema)
    p.add_argument("dataset", help="dataset alias or DID")
    _format(p, SCHEMA_FORMATS, "ddl")

    p = sub.add_parser("export", help="export a dataset's records")
    p.set_defaults(func=cmd_export)
    p.add_argument("dataset", help="dataset alias or DID")
    _format(p, EXPORT_FORMATS, None)
    p.add_argument("--output-path", metavar="P", help="output file (default: stdout)")
