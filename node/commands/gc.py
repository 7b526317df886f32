"""``odf gc``: delete objects no dataset references, and stale temporary files."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from node.cli_util import EXIT_OK, add_command, open_workspace

__all__ = ["cmd_gc", "register"]


def cmd_gc(args: argparse.Namespace) -> int:
    ws = open_workspace(args)
    report = ws.gc(dry_run=args.dry_run)
    verb = "Would delete" if args.dry_run else "Deleted"
    count = sum(
        len(r.deleted) for d in (report.blocks, report.data, report.checkpoints) for r in d.values()
    )
    print(f"{verb} {count} unreferenced object(s), {report.bytes_freed} bytes")
    verb = "Would remove" if args.dry_run else "Removed"
    print(f"{verb} {len(report.temp_removed)} stale temporary file(s)")
    if report.temp_kept:
        sys.stderr.write(
            f"odf: note: kept {len(report.temp_kept)} temporary file(s) younger than an hour "
            "(a writer may still own them; they are removed once stale)\n"
        )
    for alias, reason in report.skipped.items():
        sys.stderr.write(f"odf: warning: skipped {alias}: {reason}\n")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``gc`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "gc", cmd_gc, "delete objects no dataset references")
    p.add_argument("--dry-run", action="store_true", help="only report what would be deleted")
