"""Command line of the engine server: ``python -m engine [--host H] [--port P] [--master M]``.

``odf engine run`` calls `main` with its own arguments. Logs go to stderr; the line
``... listening on HOST:PORT`` tells that the engine is ready.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from engine.errors import EngineConfigError, EngineError
from engine.server import DEFAULT_HOST, DEFAULT_MAX_CONCURRENT, DEFAULT_PORT, run_engine
from engine.spark import DEFAULT_DRIVER_MEMORY, DEFAULT_MASTER

__all__ = ["EXIT_CONFIG", "EXIT_OK", "build_parser", "main"]

EXIT_OK: Final = 0
#: Invalid settings or a port that cannot be bound.
EXIT_CONFIG: Final = 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the engine command."""
    ap = argparse.ArgumentParser(
        prog="odf-engine", description="Run the ODF Spark engine gRPC server."
    )
    ap.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (%(default)s)")
    ap.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="TCP port, 0 = any free (%(default)s)"
    )
    ap.add_argument("--master", default=DEFAULT_MASTER, help="Spark master URL (%(default)s)")
    ap.add_argument(
        "--driver-memory", default=DEFAULT_DRIVER_MEMORY, help="Spark driver heap (%(default)s)"
    )
    ap.add_argument(
        "--max-concurrent",
        type=int,
        default=DEFAULT_MAX_CONCURRENT,
        help="requests running Spark jobs at once (%(default)s)",
    )
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra spark.* setting (repeatable), e.g. spark.sql.files.maxPartitionBytes=64m",
    )
    ap.add_argument("--no-warmup", action="store_true", help="skip the start-up warm-up")
    ap.add_argument(
        "--activity-file",
        type=Path,
        default=None,
        help="existing file touched when each request starts and ends (the idle clock)",
    )
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return ap


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise EngineConfigError(f"--conf needs KEY=VALUE, got {item!r}")
    return key.strip(), value.strip()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the engine until SIGTERM/SIGINT; returns the exit code."""
    from engine.spark import SparkSettings

    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = SparkSettings(
            master=args.master,
            driver_memory=args.driver_memory,
            extra_conf=tuple(_key_value(item) for item in args.conf),
        )
        run_engine(
            args.host,
            args.port,
            settings=settings,
            warmup=not args.no_warmup,
            max_concurrent=args.max_concurrent,
            activity_path=args.activity_file,
        )
    except EngineError as e:
        print(f"odf-engine: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK
