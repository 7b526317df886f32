"""``odf serve S3_URL``: serve the datasets of an S3 repository; objects go by presigned URLs.

Every dataset under the repository's prefix is served under ``/<name>/`` by both
transfer protocols (`p2p.http.s3_repo`, `p2p.smart_transfer.s3_server`): the node reads
and checks the metadata and hands out presigned URLs for slices and checkpoints, so
their bytes never pass through it. Pushes (``odf push DS --to odf+http://HOST:PORT/NAME``,
or kamu's) need the bearer token of ``--token-file`` and upload only into
``quarantine/``, verified before the objects get their names. A store without
conditional writes is refused before the server starts.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from node.cli_util import EXIT_OK, add_command

__all__ = ["cmd_serve", "register"]


async def _serve(args: argparse.Namespace) -> None:
    import asyncio

    from aiohttp import web

    from p2p.http.s3_repo import S3Repo
    from p2p.smart_transfer.s3_server import s3_repository_app
    from storage.s3.client import connect
    from storage.s3.probe import require_conditional_writes
    from storage.s3.url import parse_s3_url

    location = parse_s3_url(args.url)
    client = connect(location)
    await asyncio.to_thread(require_conditional_writes, client, location)
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    repo = S3Repo(client, location, token=token or None, url_expiry_s=args.url_expiry)
    runner = web.AppRunner(s3_repository_app(repo))
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.http_port)
    await site.start()
    port = runner.addresses[0][1]
    print(f"Serving {location.to_url()} on http://{args.host}:{port}/", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return EXIT_OK


def _expiry(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 604800:
        raise argparse.ArgumentTypeError(f"not a lifetime of 1 to 604800 seconds: {text!r}")
    return value


def register(sub: Any) -> None:
    """Add ``serve`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "serve", cmd_serve, "serve an S3 repository; objects go by presigned URLs")
    p.add_argument("url", help="the repository: s3://BUCKET/PREFIX or s3+http(s)://HOST:PORT/…")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--http-port", type=int, default=8080, help="port (8080; 0 picks a free one)")
    p.add_argument("--token-file", default=None, help="file holding the bearer token of pushes")
    p.add_argument(
        "--url-expiry",
        type=_expiry,
        default=3600,
        metavar="S",
        help="presigned URL lifetime in seconds (3600; at most 604800, SigV4's limit)",
    )
