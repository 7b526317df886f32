"""``odf ingest DS FILE...|--stdin``: push data through a root dataset's push source.

Exactly once (an identical re-run commits nothing); nothing is committed on failure.
Long ingests show a progress display on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any

from node.cli_util import EXIT_OK, open_workspace, timestamp_arg
from node.errors import UsageError

__all__ = ["cmd_ingest", "register"]


def cmd_ingest(args: argparse.Namespace) -> int:
    if bool(args.files) == bool(args.stdin):
        raise UsageError("give input files or --stdin (not both)")
    from node.numpy_free import refuse_numpy

    # Before pyarrow loads: numpy is a sixth of a small ingest's run and the pipeline
    # (readers, merges, writer, preprocess client) runs on pyarrow's numpy-free paths.
    refuse_numpy()
    from node.render.ingest import ingest_progress, ingest_summary
    from node.usecases.ingest import IngestOptions, ingest

    options = IngestOptions(
        source_name=args.source_name,
        event_time=args.event_time,
        input_format=args.input_format,
        allow_duplicate=args.allow_duplicate,
    )
    source: list[Path | str] | IO[bytes] = (
        sys.stdin.buffer if args.stdin else [Path(f) for f in args.files]
    )
    ws = open_workspace(args)
    with ingest_progress(not args.no_progress) as progress:
        result = ingest(ws, args.dataset, source, options, progress)
    ingest_summary(result, "ingested")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``ingest`` to the ``odf`` sub-parsers."""
    p = sub.add_parser("ingest", help="push files or stdin into a root dataset")
    p.set_defaults(func=cmd_ingest)
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files")
    p.add_argument("--stdin", action="store_true", help="read the input from stdin")
    p.add_argument("--source-name", help="push source to use (default: the only one)")
    p.add_argument(
        "--event-time", type=timestamp_arg, help="event time for data without one (RFC 3339)"
    )
    p.add_argument("--input-format", help="read the input as csv, ndjson, json, parquet...")
    p.add_argument(
        "--allow-duplicate",
        action="store_true",
        help="ingest even if this input equals the last one ingested through the source",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display")
