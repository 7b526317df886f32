"""``odf fetch URL`` (verified clone/update over HTTP) and ``odf push DS --to NODE_URL``.

``URL`` is a dataset base URL: ``http://node:port/<alias or DID>/`` on an odf-node,
or the dataset URL of any server speaking the ODF Simple Transfer Protocol (kamu).
When the server offers a signed head record (odf-node does) it is verified and
required from then on for that dataset; more sources of the same dataset can be
added with ``--from`` (objects are spread over all of them, and a source that serves
wrong bytes is dropped).

A kamu repository URL ``odf+http(s)://host/<dataset>`` speaks the Smart Transfer Protocol
(`p2p.smart_transfer`) both ways: ``odf fetch``/``odf pull`` get every block in one batch
and the objects from the URLs the node hands out; ``odf push DS --to odf+http://host/NAME``
pushes the way ``kamu push`` does (the node creates ``NAME`` from the Seed if it is new; a
URL without a dataset path pushes to ``--as`` or the local alias). Plain ``http(s)://`` URLs
keep the simple protocol (and odf-node's signed-head push).

``odf push`` writes to the node, so it needs the node's bearer token (`node.http.auth`):
``--token T``, ``--token-file FILE`` or ``$ODF_NODE_TOKEN``; pushing to the workspace's
own running node uses ``.odf/p2p/http-token`` automatically. A refused token exits 2.

Exit codes: p2p refusals (bad or stale head record, equivocation, a chain that does
not descend from the local one, wrong bytes) are `EXIT_INVALID`, a head that moved
or diverged `EXIT_CONFLICT`, unreachable sources `EXIT_NOT_FOUND`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any
from urllib.parse import urlsplit

from node.cli_util import (
    EXIT_CONFLICT,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    err,
    open_workspace,
)
from node.remote.resolve import default_alias_for_url

__all__ = ["default_alias_for_url", "is_own_node", "push_token", "register"]

#: ``--no-alias`` of the commands that pull from a URL.
NO_PULL_ALIAS_HELP = (
    "do not remember the URL as the dataset's pull alias (where `odf pull DS` updates it from)"
)


def _guard(fn: Any) -> Any:
    """Map p2p errors to exit codes (node.cli maps the storage/fbs ones)."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        from p2p.errors import (
            Equivocation,
            NameConflict,
            NotDescendant,
            P2PError,
            PeerUnavailable,
            SourceUnreachable,
            StaleHead,
            TransferError,
        )

        try:
            code: int = fn(args)
            return code
        except (NotDescendant, Equivocation, NameConflict) as e:
            err(str(e))
            return EXIT_CONFLICT
        except StaleHead as e:
            err(f"nothing newer to fetch: {e}")
            return EXIT_CONFLICT
        except SourceUnreachable as e:
            err(str(e))
            return EXIT_UNAVAILABLE
        except (PeerUnavailable, TransferError) as e:
            err(str(e))
            return EXIT_NOT_FOUND
        except P2PError as e:
            err(str(e))
            return EXIT_INVALID

    return run


def cmd_fetch(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib

    ws = open_workspace(args)
    alias = args.as_alias or default_alias_for_url(args.url)

    def progress(message: str) -> None:
        if not args.quiet:
            sys.stderr.write(message + "\n")

    async def run() -> Any:
        import aiohttp

        from p2p.http.source import HttpSource
        from p2p.s3.source import S3Source
        from p2p.smart_transfer.client import SmartSource, is_smart_url
        from p2p.sync import pull_dataset
        from storage.s3.url import is_s3_url

        urls = [args.url, *args.sources]
        async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:
            sources = [
                S3Source.from_url(u)
                if is_s3_url(u)
                else await stack.enter_async_context(SmartSource(u, session))
                if is_smart_url(u)
                else HttpSource(u, session)
                for u in urls
            ]
            record = None
            for src in sources:
                record = await src.get_head_record()
                if record is not None:
                    break
            return await pull_dataset(
                ws,
                sources,
                alias=alias,
                head_record=record,
                require_signed=args.require_signed,
                on_progress=progress,
            )

    from node.commands.sync_report import report_sync

    result = asyncio.run(run())
    if not getattr(args, "no_alias", False):
        from node.remote.aliases import remember_remote

        remember_remote(ws, str(result.dataset_id), args.url, "pull")
    report_sync(result)
    return EXIT_OK


def _loopback(host: str) -> bool:
    import ipaddress

    if host in ("localhost", "0.0.0.0", "::") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_own_node(node_url: str, url: str) -> bool:
    """Whether ``url`` reaches the node whose HTTP API is ``node_url`` (same port, same
    host or both loopback; a node bound to 0.0.0.0 is reached on loopback)."""
    a, b = urlsplit(node_url), urlsplit(url)
    try:
        same_port = (a.port or 80) == (b.port or 80)
    except ValueError:
        return False
    ha, hb = (a.hostname or "").lower(), (b.hostname or "").lower()
    return a.scheme == b.scheme and same_port and (ha == hb or (_loopback(ha) and _loopback(hb)))


def smart_dataset_url(url: str, alias: str) -> str:
    """A kamu repository URL as a dataset URL: ``alias`` is appended when it names no dataset."""
    if urlsplit(url).path.strip("/"):
        return url
    return url.rstrip("/") + "/" + alias


def push_token(args: argparse.Namespace, ws: Any) -> str | None:
    """The bearer token for ``odf push``: ``--token``, ``--token-file``, ``$ODF_NODE_TOKEN``,
    else the workspace's own token when ``--to`` is the workspace's running node."""
    import os
    from pathlib import Path

    from node.errors import UsageError
    from node.http.auth import TOKEN_ENV, read_token, read_token_file
    from node.runfile import read_run_info

    if args.token:
        return str(args.token)
    if args.token_file:
        token = read_token_file(Path(args.token_file))
        if token is None:
            raise UsageError(f"no token file at {args.token_file}")
        return token
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        return env
    info = read_run_info(ws)
    to = args.to[4:] if args.to.lower().startswith("odf+") else args.to
    if info is not None and is_own_node(info.http_url, to):
        return read_token(ws.root)
    return None


def cmd_push(args: argparse.Namespace) -> int:
    import asyncio

    from node.http.auth import bearer_headers
    from p2p.http.source import Unauthorized

    ws = open_workspace(args)
    if args.to is None:
        from node.remote.aliases import remembered_remote

        args.to = remembered_remote(ws, args.dataset, "push")
        if args.to is None:
            err(f"{args.dataset} has no push alias: give the node with --to URL")
            return EXIT_USAGE
    from storage.s3.url import is_s3_url

    if is_s3_url(args.to):
        from node.remote.s3 import push_s3

        return push_s3(ws, args)
    headers = bearer_headers(push_token(args, ws))
    from p2p.smart_transfer.client import is_smart_url

    # The push alias remembered is what repeats this push: for the smart protocol the
    # dataset's URL on the node (so a later push needs no --as), else the node's URL.
    destination = args.to
    if is_smart_url(args.to):
        destination = smart_dataset_url(
            args.to, args.remote_alias or ws.resolve(args.dataset).alias
        )

    async def run() -> Any:
        import aiohttp

        from p2p.http.source import push_dataset
        from p2p.smart_transfer.client import smart_push

        async with aiohttp.ClientSession() as session:
            if is_smart_url(args.to):
                return await smart_push(
                    ws, args.dataset, destination, session=session, headers=headers
                )
            return await push_dataset(
                ws,
                args.dataset,
                args.to,
                session=session,
                remote_alias=args.remote_alias,
                headers=headers,
            )

    try:
        result = asyncio.run(run())
    except Unauthorized as e:
        hint = "wrong token" if headers else "no token given"
        err(f"{e} ({hint}: pass --token-file FILE, --token T or set ODF_NODE_TOKEN)")
        return EXIT_USAGE

    if not args.no_alias:
        from node.remote.aliases import remember_remote

        remember_remote(ws, args.dataset, destination, "push")
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
    """Add ``fetch`` and ``push`` to the top-level sub-parsers."""
    p = sub.add_parser(
        "fetch",
        help="clone or update a dataset from a node or dataset URL (verified)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=_guard(cmd_fetch))
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

    p = sub.add_parser("push", help="push a dataset you own to a node (signed head)")
    p.set_defaults(func=_guard(cmd_push))
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
