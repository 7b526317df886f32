"""``odf push DS --to s3://bucket/prefix[/NAME]``: publish into an S3 repository.

The URL names the dataset's prefix; a URL with only a bucket (or a prefix ending in
``/``, kamu's repository form) gets ``--as`` or the local alias appended. The push
itself is `p2p.s3.push.push_to_s3`: objects first, create-only, then ``refs/head`` by
compare-and-swap. Credentials come from the standard AWS environment variables and
config files; a store without conditional writes is refused before anything is written.
"""

from __future__ import annotations

import argparse
from typing import Any

from node.cli_util import EXIT_OK


def s3_dataset_url(url: str, alias: str) -> str:
    """``url`` as a dataset URL: ``alias`` appended to a bucket or a ``/``-ended prefix."""
    from storage.s3.url import parse_s3_url

    if parse_s3_url(url).prefix and not url.endswith("/"):
        return url
    return url.rstrip("/") + "/" + alias


def push_s3(ws: Any, args: argparse.Namespace) -> int:
    """Push ``args.dataset`` to the S3 URL ``args.to``; prints one summary line."""
    from p2p.s3.push import push_to_s3
    from storage.s3.url import parse_s3_url

    entry = ws.resolve(args.dataset)
    url = s3_dataset_url(args.to, args.remote_alias or entry.alias)
    result = push_to_s3(ws.get(entry.id), parse_s3_url(url), alias=entry.alias)
    if not args.no_alias:
        from node.remote.aliases import remember_remote

        remember_remote(ws, args.dataset, url, "push")
    if result.blocks_pushed == 0:
        print(f"{args.dataset}: {url} is up to date at {result.new_head}")
    else:
        print(
            f"Pushed {args.dataset} to {url}: {result.blocks_pushed} block(s), "
            f"{result.objects_pushed} object(s) uploaded, {result.objects_present} already "
            f"there; head {result.new_head}"
        )
    return EXIT_OK
