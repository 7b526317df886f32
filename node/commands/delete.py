"""``odf delete DS... [-r] [-y]``: remove datasets (`node.usecases.delete`).

A dataset another transform reads is refused (exit 6) unless its readers go too: named
in the same command, or ``-r`` deletes everything downstream, readers first.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from node.cli_util import EXIT_OK, EXIT_USAGE, add_command, open_workspace

__all__ = ["cmd_delete", "register"]


def cmd_delete(args: argparse.Namespace) -> int:
    """Delete datasets; ``-r`` also deletes every dataset that reads them."""
    from node.usecases.delete import delete_datasets, doomed_datasets

    ws = open_workspace(args)
    doomed = doomed_datasets(ws, tuple(args.dataset), args.recursive)
    if not args.yes and sys.stdin.isatty():
        names = ", ".join(f"{e.alias} ({e.id})" for e in doomed)
        answer = input(f"Delete {names}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborted")
            return EXIT_USAGE
    for entry in delete_datasets(ws, doomed):
        print(f"Deleted {entry.alias}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``delete`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "delete", cmd_delete, "delete datasets from the workspace")
    p.add_argument("dataset", nargs="+", help="dataset aliases or DIDs")
    p.add_argument(
        "-r", "--recursive", action="store_true",
        help="also delete every dataset that reads them (refused otherwise)",
    )  # fmt: skip
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
