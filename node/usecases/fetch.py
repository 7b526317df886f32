"""Fetch: a verified clone or update of one dataset from node or dataset URLs.

``url`` is a dataset base URL: ``http://node:port/<alias or DID>/`` on an odf-node, or
the dataset URL of any server speaking the ODF Simple Transfer Protocol (kamu); a kamu
repository URL ``odf+http(s)://host/<dataset>`` speaks the Smart Transfer Protocol. When a
server offers a signed head record (odf-node does) it is verified and required from then
on for that dataset. Objects are spread over every source, and a source that serves
wrong bytes is dropped. The attestations the source node holds for the dataset's
blocks come along (`node.remote.attestations`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.remote.resolve import default_alias_for_url

if TYPE_CHECKING:
    from p2p.sync import PullResult
    from storage.workspace import Workspace

__all__ = ["FetchOptions", "OnProgress", "fetch", "fetch_with_attestations"]

#: Receives one line per step of a transfer (or nothing when ``None``).
OnProgress = Callable[[str], None] | None


@dataclass(frozen=True, slots=True)
class FetchOptions:
    """What to fetch and how.

    Attributes:
        url: the dataset URL (``http(s)://`` simple, ``odf+http(s)://`` smart protocol).
        alias: local alias of a new clone (default: the URL's last path segment).
        sources: more URLs of the same dataset.
        require_signed: refuse a head not signed by the dataset's key.
        remember_alias: remember ``url`` as the dataset's pull alias.
    """

    url: str
    alias: str | None = None
    sources: tuple[str, ...] = ()
    require_signed: bool = False
    remember_alias: bool = True


def fetch(ws: Workspace, options: FetchOptions, on_progress: OnProgress = None) -> PullResult:
    """Fetch ``options.url`` into ``ws``, verified (see `p2p.sync.pull_dataset`), with the
    attestations the source node holds for its blocks (`fetch_with_attestations`).

    Raises:
        StaleHead: the sources hold nothing newer than what the workspace has.
        P2PError / StorageError: see `p2p.sync.pull_dataset`.
    """
    return fetch_with_attestations(ws, options, on_progress)[0]


def fetch_with_attestations(
    ws: Workspace, options: FetchOptions, on_progress: OnProgress = None
) -> tuple[PullResult, int]:
    """`fetch`, and the number of attestations brought from ``options.url`` and accepted
    (`node.remote.attestations`).

    Raises:
        as `fetch`.
    """
    from node.remote.attestations import import_attestations
    from p2p.errors import StaleHead

    alias = options.alias or default_alias_for_url(options.url)
    try:
        result = asyncio.run(_fetch(ws, options, alias, on_progress))
    except StaleHead as e:
        raise StaleHead(f"nothing newer to fetch: {e}") from e
    if options.remember_alias:
        from node.remote.aliases import remember_remote

        remember_remote(ws, str(result.dataset_id), options.url, "pull")
    return result, import_attestations(ws, options.url)


async def _fetch(
    ws: Workspace, options: FetchOptions, alias: str | None, on_progress: OnProgress
) -> PullResult:
    import aiohttp

    from p2p.http.source import HttpSource
    from p2p.s3.source import S3Source
    from p2p.smart_transfer.client import SmartSource, is_smart_url
    from p2p.sync import pull_dataset
    from storage.s3.url import is_s3_url

    urls = [options.url, *options.sources]
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
            require_signed=options.require_signed,
            on_progress=on_progress,
        )
