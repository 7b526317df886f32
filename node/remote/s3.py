"""``odf push DS --to s3://bucket/prefix[/NAME]``: publish into an S3 repository.

The URL names the dataset's prefix; a URL with only a bucket (or a prefix ending in
``/``, kamu's repository form) gets ``--as`` or the local alias appended. The push
itself is `p2p.s3.push.push_to_s3`: objects first, create-only, then ``refs/head`` by
compare-and-swap. Credentials come from the standard AWS environment variables and
config files; a store without conditional writes is refused before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from p2p.s3.push import S3PushResult
    from storage.workspace import Workspace


def s3_dataset_url(url: str, alias: str) -> str:
    """``url`` as a dataset URL: ``alias`` appended to a bucket or a ``/``-ended prefix."""
    from storage.s3.url import parse_s3_url

    if parse_s3_url(url).prefix and not url.endswith("/"):
        return url
    return url.rstrip("/") + "/" + alias


def push_s3(
    ws: Workspace, dataset: str, url: str, *, remote_alias: str | None, remember_alias: bool
) -> tuple[str, S3PushResult]:
    """Push ``dataset`` to the S3 URL ``url``; the dataset's URL there and what was pushed."""
    from p2p.s3.push import push_to_s3
    from storage.s3.url import parse_s3_url

    entry = ws.resolve(dataset)
    target = s3_dataset_url(url, remote_alias or entry.alias)
    result = push_to_s3(ws.get(entry.id), parse_s3_url(target), alias=entry.alias)
    if remember_alias:
        from node.remote.aliases import remember_remote

        remember_remote(ws, dataset, target, "push")
    return target, result
