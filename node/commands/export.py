"""``odf export DS --output-format parquet|csv|ndjson``: every record of a dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from node.cli_util import EXIT_OK, add_output_format
from node.commands import dataset_view
from node.errors import UsageError
from node.render.csv import write_csv, write_ndjson

__all__ = ["EXPORT_FORMATS", "cmd_export", "register"]

EXPORT_FORMATS: Final = ("parquet", "csv", "ndjson")


def cmd_export(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    table = dataset_view(args).to_arrow()
    fmt = args.output_format
    if args.output_path in (None, "-"):
        if fmt == "parquet" and sys.stdout.isatty():
            raise UsageError("refusing to write Parquet to a terminal; use --output-path")
        out: Any = sys.stdout.buffer
        if fmt == "parquet":
            pq.write_table(table, out, compression="snappy")
        elif fmt == "csv":
            write_csv(table, out)
        else:
            write_ndjson(table, out)
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
                (write_csv if fmt == "csv" else write_ndjson)(table, f)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"Exported {table.num_rows} record(s) to {path}", file=sys.stderr)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``export`` to the ``odf`` sub-parsers."""
    p = sub.add_parser("export", help="export a dataset's records")
    p.set_defaults(func=cmd_export)
    p.add_argument("dataset", help="dataset alias or DID")
    add_output_format(p, EXPORT_FORMATS, None)
    p.add_argument("--output-path", metavar="P", help="output file (default: stdout)")
