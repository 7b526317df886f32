"""``odf push DS [--to NODE_URL]``: push a dataset you own to a node (`node.usecases.push`).

Plain ``http(s)://`` URLs push with a signed head record to an odf-node; a kamu
repository URL ``odf+http(s)://host[/NAME]`` pushes the way ``kamu push`` does (the node
creates ``NAME`` from the Seed if it is new; a URL without a dataset path pushes to
``--as`` or the local alias). The node pushed to becomes the dataset's push alias.

``odf push`` writes to the node, so it needs the node's bearer token (`node.http.auth`):
``--token T``, ``--token-file FILE`` or ``$ODF_NODE_TOKEN``; pushing to the workspace's
own running node uses ``.odf/p2p/http-token`` automatically. A refused token exits 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from node.cli_util import EXIT_OK, open_workspace

__all__ = ["cmd_push", "register"]


def cmd_push(args: argparse.Namespace) -> int:
    from node.usecases.push import PushOptions, push

    options = PushOptions(
        dataset=args.dataset,
        to=args.to,
        remote_alias=args.remote_alias,
        token=args.token,
        token_file=args.token_file,
        remember_alias=not args.no_alias,
    )
    result = push(open_workspace(args), options)
    if result.blocks_pushed == 0:
        print(f"{args.dataset}: {result.remote_url} is up to date at {result.new_head}")
    else:
        print(
            f"Pushed {args.dataset} to {result.remote_url}: {result.blocks_pushed} block(s), "
            f"{result.objects_uploaded} object(s) uploaded ({result.bytes_uploaded} bytes), "
            f"{result.objects_skipped} already there; head {result.new_head}"
        )
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``push`` to the top-level sub-parsers."""
    p = sub.add_parser("push", help="push a dataset you own to a node (signed head)")
    p.set_defaults(func=cmd_push)
    p.add_argument("dataset", help="local dataset alias or DID")
    p.add_argument(
        "--to",
        metavar="NODE_URL",
        help="node URL, e.g. http://host:8080, or odf+http://host:8080[/NAME] (smart protocol); "
        "default: the dataset's push alias (where it was pushed before)",
    )
    p.add_argument(
        "--no-alias",
        action="store_true",
        help="do not remember --to as the dataset's push alias",
    )
    p.add_argument(
        "--as", dest="remote_alias", metavar="ALIAS", help="alias on the node if it is created"
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the node's bearer token (its .odf/p2p/http-token, mode 0600)",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help="the node's bearer token (visible to other users in ps: prefer "
        "--token-file or $ODF_NODE_TOKEN)",
    )
