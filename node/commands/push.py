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
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, open_workspace
from node.errors import UsageError
from node.remote.urls import is_own_node

if TYPE_CHECKING:
    from storage.workspace import Workspace

__all__ = ["cmd_push", "push_token", "register"]


def cmd_push(args: argparse.Namespace) -> int:
    from node.usecases.push import PushOptions, push, remembered_destination

    ws = open_workspace(args)
    to = args.to or remembered_destination(ws, args.dataset)
    from storage.s3.url import is_s3_url

    if is_s3_url(to):
        return _push_s3(ws, args, to)
    options = PushOptions(
        dataset=args.dataset,
        to=to,
        remote_alias=args.remote_alias,
        token=push_token(ws, to, args.token, args.token_file),
        remember_alias=not args.no_alias,
    )
    result = push(ws, options)
    if result.blocks_pushed == 0:
        print(f"{args.dataset}: {result.remote_url} is up to date at {result.new_head}")
    else:
        print(
            f"Pushed {args.dataset} to {result.remote_url}: {result.blocks_pushed} block(s), "
            f"{result.objects_uploaded} object(s) uploaded ({result.bytes_uploaded} bytes), "
            f"{result.objects_skipped} already there; head {result.new_head}"
        )
    return EXIT_OK


def _push_s3(ws: Workspace, args: argparse.Namespace, to: str) -> int:
    from node.remote.s3 import push_s3

    url, result = push_s3(
        ws, args.dataset, to, remote_alias=args.remote_alias, remember_alias=not args.no_alias
    )
    if result.blocks_pushed == 0:
        print(f"{args.dataset}: {url} is up to date at {result.new_head}")
    else:
        print(
            f"Pushed {args.dataset} to {url}: {result.blocks_pushed} block(s), "
            f"{result.objects_pushed} object(s) uploaded, {result.objects_present} already "
            f"there; head {result.new_head}"
        )
    return EXIT_OK


def push_token(
    ws: Workspace, to: str, token: str | None = None, token_file: str | None = None
) -> str | None:
    """The bearer token for a push to ``to``: ``token``, the one in ``token_file``,
    ``$ODF_NODE_TOKEN``, else the workspace's own token when ``to`` is its running node.

    Raises:
        UsageError: ``token_file`` does not exist.
        TokenFileError: ``token_file`` is unsafe or does not hold a token.
    """
    from node.http.auth import TOKEN_ENV, read_token, read_token_file
    from node.runfile import read_run_info

    if token:
        return token
    if token_file:
        found = read_token_file(Path(token_file))
        if found is None:
            raise UsageError(f"no token file at {token_file}")
        return found
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        return env
    info = read_run_info(ws)
    plain = to[4:] if to.lower().startswith("odf+") else to
    if info is not None and is_own_node(info.http_url, plain):
        return read_token(ws.root)
    return None


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
