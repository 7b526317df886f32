"""``odf hash logical|physical FILE``: ODF data hashes of a file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from node.cli_util import EXIT_OK

__all__ = ["cmd_hash_logical", "cmd_hash_physical", "register"]


def cmd_hash_logical(args: argparse.Namespace) -> int:
    from storage.hashing import logical_hash_parquet

    print(logical_hash_parquet(Path(args.file)))
    return EXIT_OK


def cmd_hash_physical(args: argparse.Namespace) -> int:
    from storage.hashing import physical_hash_file

    h, _size = physical_hash_file(Path(args.file))
    print(h)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``hash`` to the ``odf`` sub-parsers."""
    hsub = sub.add_parser("hash", help="compute data hashes").add_subparsers(
        dest="hash_command", required=True, metavar="COMMAND"
    )
    p = hsub.add_parser("logical", help="logical hash of a Parquet file (f9680c00120...)")
    p.set_defaults(func=cmd_hash_logical)
    p.add_argument("file")
    p = hsub.add_parser("physical", help="physical hash of any file (f1620...)")
    p.set_defaults(func=cmd_hash_physical)
    p.add_argument("file")
