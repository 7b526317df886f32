"""``odf fetch URL``: a verified clone or update over HTTP (`node.usecases.fetch`).

``URL`` is a dataset base URL: ``http://node:port/<alias or DID>/`` on an odf-node,
or the dataset URL of any server speaking the ODF Simple Transfer Protocol (kamu).
When the server offers a signed head record (odf-node does) it is verified and
required from then on for that dataset; more sources of the same dataset can be
added with ``--from`` (objects are spread over all of them, and a source that serves
wrong bytes is dropped). A kamu repository URL ``odf+http(s)://host/<dataset>`` speaks
the Smart Transfer Protocol: every block in one batch, the objects from the URLs the
node hands out.

Exit codes: refusals (a bad head record, wrong bytes) are 4, a head that is not newer,
moved or diverged 6, a source that cannot be reached 7, a dataset no source has 3.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from node.cli_util import EXIT_OK, open_workspace
from node.render.progress import Status, lines, step

__all__ = ["NO_PULL_ALIAS_HELP", "cmd_fetch", "register"]

#: ``--no-alias`` of the commands that pull from a URL.
NO_PULL_ALIAS_HELP = (
    "do not remember the URL as the dataset's pull alias (where `odf pull DS` updates it from)"
)


def progress_lines(quiet: bool, status: Status | None = None) -> Any:
    """A transfer's progress callback, or ``None`` when quiet: each line shown on the
    terminal's status line (``status``, when drawn), else written to stderr."""
    if quiet:
        return None
    if status is not None and status.shown:
        return lines(status)

    def say(message: str) -> None:
        sys.stderr.write(message + "\n")

    return say


def cmd_fetch(args: argparse.Namespace) -> int:
    from node.render.sync import report_sync
    from node.usecases.fetch import FetchOptions, fetch

    options = FetchOptions(
        url=args.url,
        alias=args.as_alias,
        sources=tuple(args.sources),
        require_signed=args.require_signed,
        remember_alias=not args.no_alias,
    )
    ws = open_workspace(args)
    with step(f"fetching {args.url}") as status:
        result = fetch(ws, options, progress_lines(args.quiet, status))
    report_sync(result)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``fetch`` to the top-level sub-parsers."""
    p = sub.add_parser(
        "fetch",
        help="clone or update a dataset from a node or dataset URL (verified)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=cmd_fetch)
    p.add_argument("url", help="dataset base URL, e.g. http://host:8080/my.dataset/")
    p.add_argument("--as", dest="as_alias", metavar="ALIAS", help="local alias of the dataset")
    p.add_argument(
        "--from",
        dest="sources",
        action="append",
        default=[],
        metavar="URL",
        help="another base URL of the same dataset (repeatable)",
    )
    p.add_argument(
        "--require-signed",
        action="store_true",
        help="refuse the fetch unless the head is signed by the dataset key",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("--no-alias", action="store_true", help=NO_PULL_ALIAS_HELP)
