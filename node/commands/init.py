"""``odf init``: create a workspace (``.odf/``) in the current directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from node.cli_util import EXIT_OK, add_command, workspace_dir

__all__ = ["cmd_init", "register"]


def cmd_init(args: argparse.Namespace) -> int:
    from storage.workspace import Workspace

    root = workspace_dir(args) or Path.cwd()
    ws = Workspace.init(root, exist_ok=args.exist_ok)
    print(f"Initialized an empty workspace in {ws.root}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``init`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "init", cmd_init, "create a workspace (.odf/) in the current directory")
    p.add_argument("--exist-ok", action="store_true", help="do nothing if it already exists")
