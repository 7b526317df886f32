"""``odf pull``: bring datasets up to date, whatever kind they are.

One command for every source of new data, dispatched per argument:

- a URL (``http://``, ``https://``, ``odf+http(s)://``): a verified fetch from that node or
  dataset base URL (see ``odf fetch``);
- a root dataset: poll its polling source (``--set-watermark`` only commits a watermark);
- a derivative dataset: run its transform on new input data (``-r`` pulls upstream
  derivatives first);
- ``--all``: every dataset of the workspace, roots before the derivatives that read them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, EXIT_USAGE, open_workspace

if TYPE_CHECKING:
    from storage.workspace import Workspace

#: URL schemes `odf pull` treats as remote sources.
REMOTE_SCHEMES: tuple[str, ...] = ("http://", "https://", "odf+http://", "odf+https://")


def is_remote(ref: str) -> bool:
    """Whether ``ref`` names a remote source rather than a local dataset."""
    return ref.lower().startswith(REMOTE_SCHEMES)


def _remote_url(ref: str) -> str:
    return ref[4:] if ref.lower().startswith("odf+") else ref


def cmd_pull(args: argparse.Namespace) -> int:
    """Dispatch each target to fetch, root pull or derivative pull."""
    from fbs.model import DatasetKind
    from node.commands import ingest, remote, transform

    targets: list[str] = list(args.dataset)
    if args.all:
        if targets:
            sys.stderr.write("odf: error: give datasets or --all, not both\n")
            return EXIT_USAGE
        all_ws = open_workspace(args)
        roots: list[str] = []
        derivs: list[str] = []
        for entry in all_ws.list():
            state = all_ws.get(entry.id).state()
            if state is None:
                continue
            (roots if state.kind == DatasetKind.Root else derivs).append(entry.alias)
        targets = roots + derivs
        if not targets:
            print("Nothing to pull: the workspace has no datasets")
            return EXIT_OK
        args.recursive = True
    elif not targets:
        sys.stderr.write("odf: error: name at least one dataset or URL (or use --all)\n")
        return EXIT_USAGE

    code = EXIT_OK
    ws: Workspace | None = None
    for ref in targets:
        if is_remote(ref):
            ns = _ns(
                args,
                url=_remote_url(ref),
                as_alias=args.as_alias,
                sources=[],
                require_signed=args.require_signed,
                quiet=args.no_progress,
            )
            rc: int = remote._guard(remote.cmd_fetch)(ns)
        else:
            if ws is None:
                ws = open_workspace(args)
            state = ws.get(ref).state()
            if state is not None and state.kind == DatasetKind.Derivative:
                if args.set_watermark is not None:
                    sys.stderr.write(
                        f"odf: error: {ref}: --set-watermark applies to root datasets only\n"
                    )
                    return EXIT_USAGE
                ns = _ns(args, dataset=[ref], recursive=args.recursive, output_format="table")
                rc = transform.cmd_pull_derivative(ns)
            else:
                ns = _ns(
                    args,
                    dataset=[ref],
                    set_watermark=args.set_watermark,
                    no_progress=args.no_progress,
                )
                rc = ingest.cmd_pull(ns)
        if rc != EXIT_OK:
            code = rc
    return code


def _ns(args: argparse.Namespace, **values: Any) -> argparse.Namespace:
    return argparse.Namespace(workspace=getattr(args, "workspace", None), **values)


def register(sub: Any) -> None:
    """Add ``pull`` to the top-level sub-parsers."""
    from node.commands.ingest import _timestamp

    p = sub.add_parser(
        "pull",
        help="bring datasets up to date (roots: poll sources; derivatives: transform; URLs: fetch)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=cmd_pull)
    p.add_argument("dataset", nargs="*", help="dataset aliases, DIDs or node/dataset URLs")
    p.add_argument("-a", "--all", action="store_true", help="pull every dataset of the workspace")
    p.add_argument("-r", "--recursive", action="store_true", help="pull upstream derivatives first")
    p.add_argument(
        "--set-watermark",
        type=_timestamp,
        metavar="T",
        help="root datasets: only commit this watermark (RFC 3339), fetch nothing",
    )
    p.add_argument("--as", dest="as_alias", metavar="ALIAS", help="URLs: local alias")
    p.add_argument(
        "--require-signed",
        action="store_true",
        help="URLs: refuse unless the head is signed by the dataset key",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display")
