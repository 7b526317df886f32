"""Helpers shared by the ``odf`` sub-commands (workspace lookup, exit codes)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fbs.timestamp import Timestamp
    from storage.workspace import Workspace

# The error contract (`node.error_contract`): 1 only for bugs; every other failure is
# one ``odf: error: ...`` line and one of the codes below. A damaged workspace (object
# or chain that no longer matches its name/metadata, lost or garbled refs/head, data
# file no longer Parquet) is 5 with a hint to run ``odf verify``; a referenced object
# that is gone is damage too (5); a file or dataset named on the command line that does
# not exist is 3; OS errors (permission denied, disk full, I/O error) are 4; a service
# the command needs that cannot be started or reached (the Spark engine, a node, a source)
# is 7, the one failure that retrying later may cure; Ctrl-C exits 130 quietly.
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_INVALID = 4
EXIT_VERIFY_FAILED = 5
EXIT_CONFLICT = 6
EXIT_UNAVAILABLE = 7

#: Environment variable naming the workspace directory (default: search upwards from cwd).
WORKSPACE_ENV = "ODF_WORKSPACE"


def err(msg: str) -> None:
    """Print ``odf: error: <msg>`` on stderr (the one error line every command prints).

    A message that spans lines (a library's error text) is joined into one: scripts read
    exactly one line per failure.
    """
    if "\n" in msg or "\r" in msg:
        msg = "; ".join(line.strip() for line in msg.splitlines() if line.strip())
    sys.stderr.write(f"odf: error: {msg}\n")


def workspace_dir(args: argparse.Namespace) -> Path | None:
    """The workspace directory given by ``--workspace`` or ``$ODF_WORKSPACE``, if any."""
    value = getattr(args, "workspace", None) or os.environ.get(WORKSPACE_ENV)
    return Path(value) if value else None


def workspace_root(args: argparse.Namespace) -> Path:
    """The ``.odf`` directory `open_workspace` would open, found without importing the
    dataset layer (`storage.catalog`: for commands that only list or resolve).

    Raises:
        WorkspaceNotFound: when there is none.
    """
    from storage.catalog import find_root

    start = workspace_dir(args)
    return find_root(start if start is not None else Path.cwd())


def open_workspace(args: argparse.Namespace) -> Workspace:
    """Open the workspace named by the arguments, else the nearest one upwards from cwd.

    Raises:
        WorkspaceNotFound: when there is none.
    """
    from storage.workspace import Workspace

    start = workspace_dir(args)
    return Workspace.open(start if start is not None else Path.cwd())


def timestamp_arg(text: str) -> Timestamp:
    """An RFC 3339 time given on the command line (an argparse ``type``)."""
    from fbs.errors import FbsError
    from fbs.timestamp import Timestamp

    try:
        return Timestamp.parse_rfc3339(text)
    except FbsError as e:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r} ({e})") from None


def add_output_format(
    p: argparse.ArgumentParser, choices: Sequence[str], default: str | None
) -> None:
    """``-o/--output-format`` with ``choices`` (required when there is no ``default``):
    spelt alike by every command that prints a listing."""
    p.add_argument(
        "-o",
        "--output-format",
        choices=list(choices),
        default=default,
        required=default is None,
        help="output format" + (f" (default: {default})" if default else ""),
    )


def add_command(
    sub: Any, name: str, fn: Callable[[argparse.Namespace], int], help: str
) -> argparse.ArgumentParser:
    """A top-level command's parser (``help`` is its description too), run by ``fn``."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    p.set_defaults(func=fn)
    return p
