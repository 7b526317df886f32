"""Serving an S3 repository over HTTP: metadata from the node, objects straight from S3.

The datasets under one S3 prefix (kamu's repository layout: ``<prefix>/<name>/refs/head``,
``blocks/``, ``data/``, ``checkpoints/``), each under the dataset base path ``/<name>/``.
The simple protocol's routes (odf-format.md 4.2):

====================================  =====================================================
``GET refs/head``                     the head, read from S3 (404: none)
``GET blocks/{hash}``                 the block, read from S3 and hashed before it is sent
``GET data/{hash}``                   307 to a presigned ``GET`` of the object on S3
``GET checkpoints/{hash}``            307 to a presigned ``GET`` of the object on S3
====================================  =====================================================

The node reads and checks the small metadata; slices and checkpoints never pass
through it (the smart protocol hands out the same presigned URLs:
`p2p.smart_transfer.s3_server`). A presigned URL is checked by S3: expired or altered,
it is refused there with 403. `S3Repo.requests` counts the requests the node answered,
by route, so a test can see that it served no object.
"""

from __future__ import annotations

import hmac
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from fbs.did import DatasetAlias
from fbs.errors import FbsError, InvalidHash
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from p2p.http.server import HttpError, error_response
from storage.chain import ChainState
from storage.errors import CorruptObject, InvalidRef, ObjectNotFound
from storage.s3.client import S3Client
from storage.s3.commit import S3Committer
from storage.s3.layout import S3DatasetLayout
from storage.s3.presign import DEFAULT_URL_EXPIRY_S, presign_get
from storage.s3.url import S3Location

__all__ = ["S3_REPO", "S3_SIMPLE_ROUTES", "S3Repo", "dataset_layout", "s3_repo_app"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class S3Repo:
    """What the server of one S3 repository holds.

    Attributes:
        client: the bucket's client (the node's credentials: they sign the URLs).
        location: the repository's prefix; a dataset is ``location.child(name)``.
        token: the bearer token a push needs (``None``: pushes refused).
        url_expiry_s: lifetime of the presigned URLs handed out.
        requests: requests answered, by route name.
    """

    client: S3Client
    location: S3Location
    token: str | None = None
    url_expiry_s: int = DEFAULT_URL_EXPIRY_S
    requests: Counter[str] = field(default_factory=Counter)
    _chains: dict[str, tuple[threading.Lock, S3Committer]] = field(default_factory=dict)
    _chains_lock: threading.Lock = field(default_factory=threading.Lock)

    def chain_state(self, layout: S3DatasetLayout, head: Multihash | None) -> ChainState | None:
        """The validated chain state of ``layout`` at ``head``.

        One reader per dataset is kept, so a later call reads (and hashes, and checks)
        only the blocks added since: a push costs its new blocks, not the whole chain.

        Raises:
            MissingObject, CorruptObject, ChainRuleViolation: the stored chain is damaged.
        """
        with self._chains_lock:
            lock, reader = self._chains.setdefault(
                layout.location.prefix, (threading.Lock(), S3Committer(layout))
            )
        with lock:
            return reader.state(head)


S3_REPO: Final = web.AppKey("s3_repo", S3Repo)


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n")


def dataset_layout(request: web.Request) -> S3DatasetLayout:
    """The dataset the request's base path names.

    Raises:
        HTTPBadRequest: the name is not a dataset name.
    """
    repo = request.app[S3_REPO]
    name = request.match_info["dataset"]
    try:
        alias = DatasetAlias.parse(name)
    except FbsError:
        raise web.HTTPBadRequest(text=f"invalid dataset name {name!r}\n") from None
    if alias.account_name is not None:
        raise web.HTTPBadRequest(text=f"invalid dataset name {name!r}\n")
    return S3DatasetLayout(repo.client, repo.location.child(name))


def authorized(request: web.Request) -> bool:
    """Whether the request carries the repository's bearer token."""
    token = request.app[S3_REPO].token
    given = request.headers.get("Authorization", "")
    return token is not None and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def _hash(request: web.Request) -> Multihash:
    try:
        h = parse_hash(request.match_info["hash"])
    except InvalidHash:
        raise web.HTTPBadRequest(text="invalid hash\n") from None
    if h.code != SHA3_256:
        raise web.HTTPBadRequest(text="not a sha3-256 hash\n")
    return h


async def get_head(request: web.Request) -> web.StreamResponse:
    layout = dataset_layout(request)
    try:
        head = layout.refs.get_or_none("head")
    except InvalidRef:
        return _text(500, "stored refs/head is damaged")
    if head is None:
        return _text(404, "no such dataset")
    return web.Response(text=head.to_multibase())


async def get_block(request: web.Request) -> web.StreamResponse:
    layout, h = dataset_layout(request), _hash(request)
    try:
        raw = layout.blocks.get(h)  # hashed: a damaged block is not served
    except ObjectNotFound:
        return _text(404, "no such block")
    except CorruptObject:
        return _text(500, "stored block is damaged")
    return web.Response(body=raw, content_type="application/octet-stream")


def object_url(layout: S3DatasetLayout, kind: str, h: Multihash, expiry_s: int) -> tuple[str, str]:
    """A presigned ``GET`` of ``data/<h>`` (``kind`` ``data``) or ``checkpoints/<h>``,
    and its expiry."""
    store = layout.data if kind == "data" else layout.checkpoints
    url = presign_get(layout.client, store.key_of(h), expires_s=expiry_s)
    return url.url, url.expires_at


def _redirect(kind: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        layout, h = dataset_layout(request), _hash(request)
        url, _expires = object_url(layout, kind, h, request.app[S3_REPO].url_expiry_s)
        raise web.HTTPTemporaryRedirect(url)

    return handler


@dataclass(frozen=True, slots=True)
class RepoRoute:
    """A route relative to a dataset base path, with its name for `S3Repo.requests`."""

    method: str
    path: str
    handler: Handler
    name: str


S3_SIMPLE_ROUTES: Final = (
    RepoRoute("GET", "/refs/head", get_head, "head"),
    RepoRoute("GET", "/blocks/{hash}", get_block, "block"),
    RepoRoute("GET", "/data/{hash}", _redirect("data"), "data"),
    RepoRoute("GET", "/checkpoints/{hash}", _redirect("checkpoint"), "checkpoint"),
)


def _counted(name: str, handler: Handler) -> Handler:
    async def counted(request: web.Request) -> web.StreamResponse:
        request.app[S3_REPO].requests[name] += 1
        return await handler(request)

    return counted


@web.middleware
async def _http_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as e:
        return error_response(e.status, str(e))


def s3_repo_app(repo: S3Repo, routes: Iterable[RepoRoute] = S3_SIMPLE_ROUTES) -> web.Application:
    """The application serving ``repo`` with ``routes`` under ``/{dataset}``."""
    app = web.Application(middlewares=[_http_errors])
    app[S3_REPO] = repo
    for r in routes:
        app.router.add_route(r.method, "/{dataset}" + r.path, _counted(r.name, r.handler))
    return app
