"""``odf tail DS [-n N]``: the last records of a dataset."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Final

from node.cli_util import EXIT_OK, add_output_format
from node.commands import dataset_view
from node.errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DEFAULT_TAIL_ROWS", "TAIL_FORMATS", "cmd_tail", "register"]

#: Default number of records shown by ``odf tail``.
DEFAULT_TAIL_ROWS: Final = 10
TAIL_FORMATS: Final = ("table", "json", "yaml", "csv")


def _tail(args: argparse.Namespace) -> pa.Table:
    """The last ``-n`` records: only the newest slices are read (`storage.reads.read_tail`),
    without importing the Python API and the ingest pipeline (and through them pandas)."""
    from node.cli_util import workspace_root
    from storage.catalog import open_dataset, resolve
    from storage.reads import read_tail

    root = workspace_root(args)
    table = read_tail(open_dataset(root, resolve(root, args.dataset)), args.num_records)
    return dataset_view(args).tail(args.num_records) if table is None else table  # no slice


def cmd_tail(args: argparse.Namespace) -> int:
    from node.render.output import render

    if args.num_records < 0:
        raise UsageError("-n must be >= 0")
    from node.numpy_free import refuse_numpy

    refuse_numpy()
    table = _tail(args)
    if args.output_format == "csv":
        from node.render.csv import write_csv

        write_csv(table, sys.stdout.buffer)
        return EXIT_OK
    from node.render.rows import plain_rows, table_cells

    rows = plain_rows(table)
    if args.output_format == "table":
        if not rows:
            print("(no records)")
            return EXIT_OK
        render(table_cells(rows), "table", columns=table.column_names)
    else:
        render(rows, args.output_format)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``tail`` to the ``odf`` sub-parsers."""
    p = sub.add_parser("tail", help="show the last records of a dataset")
    p.set_defaults(func=cmd_tail)
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("-n", "--num-records", type=int, default=DEFAULT_TAIL_ROWS, metavar="N")
    add_output_format(p, TAIL_FORMATS, "table")
