"""``odf engine run|status|stop``: the Spark engine (gRPC, the ODF engine contract),
started on demand and shared by the user's workspaces (`node.engine_manager`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from node.cli_util import EXIT_OK, open_workspace

__all__ = ["ENGINE_DEFAULT_HOST", "ENGINE_DEFAULT_PORT", "register"]

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
    """Show the shared engine the workspace uses (or the configured address)."""
    from node.engine_manager import (
        STATE_RUNNING,
        configured_address,
        engine_run_dir,
        engine_status,
    )

    ws = open_workspace(args)
    address = configured_address(ws)
    if address is not None:
        print(f"configured engine: {address}")
        return EXIT_OK
    record = engine_status(ws)
    where = engine_run_dir(ws)
    if record is None:
        print(f"no engine running (one starts on demand; run folder {where})")
    elif record.state != STATE_RUNNING:
        # Before the engine process exists its supervisor is all there is to show.
        listen = f", will listen on {record.address}" if record.address else ""
        engine = f", engine pid {record.engine_pid}" if record.engine_pid else ""
        print(
            f"engine {record.state}{listen} (supervisor pid {record.pid}{engine}; "
            f"run folder {where})"
        )
    else:
        print(
            f"engine running at {record.address} (supervisor pid {record.pid}, engine pid "
            f"{record.engine_pid}, idle timeout {record.idle_timeout:g} s; run folder {where})"
        )
    return EXIT_OK


def cmd_engine_stop(args: argparse.Namespace) -> int:
    """Stop the shared engine the workspace uses (the user's, shared by its workspaces)."""
    from node.engine_manager import stop_shared_engine

    record = stop_shared_engine(open_workspace(args))
    print("no engine was running" if record is None else f"stopped engine at {record.address}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``engine`` to the top-level sub-parsers."""
    engine = sub.add_parser("engine", help="run or manage the Spark engine")
    esub = engine.add_subparsers(dest="engine_command", required=True, metavar="COMMAND")
    p = esub.add_parser("run", help="run the engine gRPC server in the foreground")
    p.set_defaults(func=cmd_engine_run)
    p.add_argument("--host", default=ENGINE_DEFAULT_HOST, help="address to listen on (%(default)s)")
    p.add_argument("--port", type=int, default=ENGINE_DEFAULT_PORT, help="TCP port (%(default)s)")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--no-warmup", action="store_true", help="skip the start-up warm-up")
    p = esub.add_parser("status", help="show the shared engine (starting or running)")
    p.set_defaults(func=cmd_engine_status)
    p = esub.add_parser("stop", help="stop the shared engine")
    p.set_defaults(func=cmd_engine_stop)
