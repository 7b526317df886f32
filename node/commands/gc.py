"""``odf gc [S3_URL] [--grace-period D]``: delete objects nothing references, and stale temp files.

Without a URL, every dataset of the workspace (`storage.workspace.Workspace.gc`); with
an ``s3://`` or ``s3+http(s)://`` dataset URL, that dataset's prefix on S3
(`storage.s3.gc`). Either way an unreferenced object younger than the grace period
(default one hour; why in `storage.gc.DEFAULT_GC_GRACE_S`) is kept: a writer may have
uploaded it and not yet moved its head.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Final

from node.cli_util import EXIT_OK, add_command, open_workspace

__all__ = ["cmd_gc", "parse_grace", "register"]

_UNITS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_GRACE_RE: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_grace(text: str) -> float:
    """Seconds of ``N``, ``Ns``, ``Nm``, ``Nh`` or ``Nd`` (argparse type)."""
    m = _GRACE_RE.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 3600, 90m, 1h, 0)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _gc_workspace(args: argparse.Namespace, grace: dict[str, float]) -> int:
    ws = open_workspace(args)
    report = ws.gc(dry_run=args.dry_run, **grace)
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


def _gc_s3(args: argparse.Namespace, grace: dict[str, float]) -> int:
    from storage.s3.client import connect
    from storage.s3.gc import collect_s3_garbage
    from storage.s3.layout import S3DatasetLayout
    from storage.s3.url import parse_s3_url

    location = parse_s3_url(args.url)
    report = collect_s3_garbage(
        S3DatasetLayout(connect(location), location), dry_run=args.dry_run, **grace
    )
    verb = "Would delete" if args.dry_run else "Deleted"
    print(f"{verb} {len(report.deleted)} unreferenced object(s), {report.bytes_freed} bytes")
    if report.kept_recent:
        sys.stderr.write(
            f"odf: note: kept {len(report.kept_recent)} unreferenced object(s) inside the "
            "grace period (a writer may not have moved its head yet)\n"
        )
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    grace = {} if args.grace_period is None else {"grace_period_s": args.grace_period}
    if args.url is not None:
        return _gc_s3(args, grace)
    return _gc_workspace(args, grace)


def register(sub: Any) -> None:
    """Add ``gc`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "gc", cmd_gc, "delete objects no dataset references")
    p.add_argument(
        "url", nargs="?", default=None, help="an S3 dataset URL (default: the workspace)"
    )
    p.add_argument("--dry-run", action="store_true", help="only report what would be deleted")
    p.add_argument(
        "--grace-period",
        type=parse_grace,
        default=None,
        metavar="D",
        help="keep unreferenced objects younger than D (seconds, or 90m, 1h, 2d; default 1h)",
    )
