"""The node's HTTP API (aiohttp): ODF Simple Transfer Protocol, signed heads, push, JSON.

Per dataset, under ``/{dataset}/`` (an alias ``name``, ``account/name`` as two path
segments, or the DID multibase ``fed01...``): the ODF Simple Transfer Protocol, object
uploads and push (`p2p.http.server`, next to its client `p2p.http.source`), the Smart
Transfer Protocol's ``GET pull`` and ``GET push`` WebSockets (`p2p.smart_transfer`), and

====================================  =====================================================
``POST ingest[/{source}]``            push ingest through the dataset's push source (owner
                                      node only; ``?format=csv`` or the Content-Type names
                                      the input format, else the source's read step:
                                      none, octet-stream or curl's default form type)
====================================  =====================================================

`ROUTES` is the table the application is built from (the transfer routes mounted under
both dataset base paths, then the node's own); the routes of the validator and the
daemon are tables too (`node.http.attestations.attestation_routes`, the daemon's), passed as
`create_app`'s ``extra_routes`` and registered before the final catch-all.

Who may call what (`node.http.auth`): before routing, a request whose ``Host`` is a
foreign name (DNS rebinding) or whose ``Origin`` is not the node's own is refused (403)
on every route; every method other than GET/HEAD/OPTIONS (uploads, push, push ingest,
the daemon's follow/unfollow, attestation posts) needs ``Authorization: Bearer
<token>`` (401), the workspace's ``.odf/p2p/http-token`` by default, and so does the
smart push WebSocket (a GET that writes). Reads stay open to
non-browser clients (kamu, curl): they send no ``Origin``.

Node-wide JSON: ``GET /api/status``, ``GET /api/datasets`` (every dataset by alias, from
the row cache the web UI's pages share, `node.web.rows`: a row is read again only when
its head moves), ``GET /api/peers`` (peers from an injected provider, empty by default).

Hostile input: any request path with an encoded separator (``%2f``, ``%5c``), a NUL, or
a ``.``/``..`` segment is refused with 400 before routing; hashes are parsed with
`fbs.multiformats.parse_hash` and files are only ever named by the store from the
parsed value, so no user text reaches a filesystem path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from aiohttp import web

from fbs.did import DatasetId
from fbs.keys import KeyPair
from node.error_contract import http_status_for
from node.errors import ReplicaReadOnly
from node.http.auth import AccessPolicy, load_or_create_token
from node.ingest.errors import IngestError
from node.ownership import require_owned_dataset
from node.usecases.ingest import IngestOptions, ingest_into
from node.web import mount as mount_web_ui
from node.web.rows import RowCache, SignedHeads, api_rows
from p2p.head_store import HeadStore
from p2p.http.server import (
    MAX_BATCH_BLOCKS,
    MAX_BATCH_BYTES,
    MAX_PUSH_BODY_BYTES,
    SERVER,
    TRANSFER_ROUTES,
    UPLOAD_CHUNK_SIZE,
    HttpError,
    Route,
    Signer,
    TransferConfig,
    TransferServer,
    add_routes,
    error_response,
    open_dataset,
)
from p2p.smart_transfer.server import SMART_PUSH_SUFFIX, SMART_ROUTES
from storage.errors import RefCASFailed
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE
from storage.workspace import Workspace

__all__ = [
    "MAX_BATCH_BLOCKS",
    "MAX_BATCH_BYTES",
    "MAX_PUSH_BODY_BYTES",
    "ROUTES",
    "HttpApiConfig",
    "create_app",
]

log = logging.getLogger(__name__)

#: Largest push-ingest body.
MAX_INGEST_BODY_BYTES: Final = 1 << 30
#: Longest request path accepted (anything longer is not one of ours).
MAX_PATH_LENGTH: Final = 2048

PeersProvider = Callable[[], Sequence[Mapping[str, Any]]]
StatusProvider = Callable[[], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class HttpApiConfig:
    """Limits and switches of the HTTP API.

    Attributes:
        max_put_object_size: largest object accepted by PUT (413 above).
        max_push_body_bytes: largest push body (413 above).
        max_batch_blocks / max_batch_bytes: batched-blocks response caps.
        allow_put: accept object uploads.
        allow_push: accept pushes.
        allow_push_create: a push may create a dataset this node does not have.
        allow_ingest: accept push ingest into datasets this node owns.
        max_ingest_body_bytes: largest push-ingest body (413 above).
        token: the bearer token every state-changing request needs (default: the
            workspace's, `node.http.auth.load_or_create_token`).
        allowed_hosts: host names accepted in ``Host`` besides IP literals and
            ``localhost`` (``"*"``: any; see `node.http.auth`).
    """

    max_put_object_size: int = DEFAULT_MAX_OBJECT_SIZE
    max_push_body_bytes: int = MAX_PUSH_BODY_BYTES
    max_batch_blocks: int = MAX_BATCH_BLOCKS
    max_batch_bytes: int = MAX_BATCH_BYTES
    allow_put: bool = True
    allow_push: bool = True
    allow_push_create: bool = True
    allow_ingest: bool = True
    max_ingest_body_bytes: int = MAX_INGEST_BODY_BYTES
    token: str | None = field(default=None, repr=False)
    allowed_hosts: tuple[str, ...] = ()

    def transfer(self) -> TransferConfig:
        """The part of this configuration the transfer routes (`p2p.http.server`) use."""
        return TransferConfig(
            max_put_object_size=self.max_put_object_size,
            max_push_body_bytes=self.max_push_body_bytes,
            max_batch_blocks=self.max_batch_blocks,
            max_batch_bytes=self.max_batch_bytes,
            allow_put=self.allow_put,
            allow_push=self.allow_push,
            allow_push_create=self.allow_push_create,
        )


@dataclass(frozen=True, slots=True)
class _Hooks:
    peers: PeersProvider
    status: StatusProvider


_CFG: Final = web.AppKey("config", HttpApiConfig)
_HOOKS: Final = web.AppKey("hooks", _Hooks)
_STARTED: Final = web.AppKey("started", float)
_POLICY: Final = web.AppKey("access_policy", AccessPolicy)
#: The dataset rows the web UI's pages and ``/api/datasets`` share (`node.web.rows`).
_ROWS: Final = web.AppKey("dataset_rows", tuple[RowCache, SignedHeads])
_WARMING: Final = web.AppKey("dataset_rows_warm_up", asyncio.Task[object])


# -- path safety ----------------------------------------------------------------------------


def _hostile_path(raw_path: str) -> str | None:
    """Why ``raw_path`` (still percent-encoded) is refused, or ``None`` if it is clean."""
    if len(raw_path) > MAX_PATH_LENGTH:
        return "path too long"
    path = raw_path.split("?", 1)[0]
    lowered = path.lower()
    for bad in ("%2f", "%5c", "%00", "\\", "\x00"):
        if bad in lowered:
            return "encoded separator or NUL in path"
    segments = path.split("/")[1:]
    for i, seg in enumerate(segments):
        decoded = unquote(seg)
        if decoded in (".", ".."):
            return "dot segment in path"
        if seg == "" and i != len(segments) - 1:
            return "empty path segment"
    return None


def _refuse(request: web.Request, status: int, message: str) -> web.Response:
    log.warning(
        "refused %r %r (%s) from %s",
        request.method[:16],
        request.path[:200],
        message,
        request.remote,
    )
    resp = error_response(status, message)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="odf-node"'
    return resp


def _access_method(request: web.Request) -> str:
    """The method the token check sees: the smart push WebSocket (``GET …/push``) writes."""
    if request.method in ("GET", "HEAD") and request.path.endswith(SMART_PUSH_SUFFIX):
        return "PUSH"
    return request.method


@web.middleware
async def _guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    # Host and Origin, the path's syntax, then the token of a write: before anything
    # else (nothing is read from the body, no handler runs, nothing changes on disk).
    policy = request.app[_POLICY]
    refused = policy.browser_refusal(request.headers)
    if refused is None:
        reason = _hostile_path(request.raw_path)
        if reason is not None:
            return error_response(400, reason)
        refused = policy.token_refusal(_access_method(request), request.headers)
    if refused is not None:
        return _refuse(request, *refused)
    try:
        return await handler(request)
    except HttpError as e:
        return error_response(e.status, str(e))


# -- node routes ----------------------------------------------------------------------------


#: Content types that name no data format: the push source's own read step is used.
#: ``application/x-www-form-urlencoded`` is what ``curl --data-binary @file`` sends
#: unless told otherwise; no data format is sent as a form.
_NO_FORMAT: Final = frozenset(("", "application/octet-stream", "application/x-www-form-urlencoded"))


async def ingest(request: web.Request) -> web.StreamResponse:
    cfg = request.app[_CFG]
    if not cfg.allow_ingest:
        return error_response(403, "push ingest is disabled on this node")
    ds = open_dataset(request)
    try:
        require_owned_dataset(ds, action="ingest into it")  # a replica's history is its publisher's
    except ReplicaReadOnly as e:
        return error_response(http_status_for(e), str(e))
    try:
        import node.ingest.pipeline  # noqa: F401  (its optional dependencies)
    except ImportError:
        return error_response(501, "push ingest is not available on this node")
    length = request.content_length
    if length is not None and length > cfg.max_ingest_body_bytes:
        return error_response(413, f"ingest body larger than {cfg.max_ingest_body_bytes} bytes")
    source_name = request.match_info.get("source")
    media = request.content_type
    input_format = request.query.get("format") or (None if media in _NO_FORMAT else media)
    with tempfile.TemporaryDirectory(prefix="odf-ingest-") as tmp:
        path = Path(tmp) / "input"
        total = 0
        with open(path, "wb") as f:
            async for chunk in request.content.iter_chunked(UPLOAD_CHUNK_SIZE):
                total += len(chunk)
                if total > cfg.max_ingest_body_bytes:
                    return error_response(
                        413, f"ingest body larger than {cfg.max_ingest_body_bytes}"
                    )
                f.write(chunk)
        options = IngestOptions(source_name=source_name, input_format=input_format)
        try:
            result = await asyncio.to_thread(ingest_into, ds, [path], options, workdir=Path(tmp))
        except RefCASFailed as e:
            return error_response(http_status_for(e), f"head moved: {e}")
        except IngestError as e:
            return error_response(http_status_for(e), _about_body(e, path))
    return web.json_response(
        {
            "oldHead": result.old_head.to_multibase() if result.old_head else None,
            "newHead": result.new_head.to_multibase() if result.new_head else None,
            "numRecords": result.num_records,
            "blocks": [h.to_multibase() for h in result.blocks],
        }
    )


def _about_body(error: Exception, path: Path) -> str:
    """The error for the client: the body it sent, not the node's temporary file, which
    tells it nothing and shows the node's filesystem."""
    return str(error).replace(str(path), "request body")


# -- node JSON ------------------------------------------------------------------------------


async def api_status(request: web.Request) -> web.StreamResponse:
    ws = request.app[SERVER].workspace
    datasets = await asyncio.to_thread(ws.list)
    doc: dict[str, Any] = {
        "node": "odf-node",
        "workspace": str(ws.root),
        "datasets": len(datasets),
        "uptimeSeconds": round(time.monotonic() - request.app[_STARTED], 3),
    }
    doc.update(request.app[_HOOKS].status())
    return web.json_response(doc)


async def api_datasets(request: web.Request) -> web.StreamResponse:
    cache, signed = request.app[_ROWS]
    rows = await asyncio.to_thread(api_rows, request.app[SERVER].workspace, cache, signed)
    return web.json_response(rows)


async def _warm_rows(app: web.Application) -> None:
    """Read every dataset's row and signed head once in the background as the server
    starts, so the first page or ``/api/datasets`` finds them cached."""
    cache, signed = app[_ROWS]
    work = asyncio.to_thread(api_rows, app[SERVER].workspace, cache, signed)
    app[_WARMING] = asyncio.create_task(work, name="dataset-rows-warm-up")


async def _warmed(app: web.Application) -> None:
    task = app.get(_WARMING)
    if task is not None:
        with contextlib.suppress(Exception):
            await task  # a thread cannot be cancelled: it ends with its last row


async def api_peers(request: web.Request) -> web.StreamResponse:
    peers = [dict(p) for p in request.app[_HOOKS].peers()]
    return web.json_response(peers)


async def not_found(request: web.Request) -> web.StreamResponse:
    return error_response(404, "not found")


# -- application ----------------------------------------------------------------------------


def _under_dataset(routes: Sequence[Route]) -> tuple[Route, ...]:
    # Any segment matches; the handlers refuse invalid names with 400 (not 404).
    return tuple(
        Route(r.method, prefix + r.path, r.handler)
        for prefix in ("/{dataset}", "/{account}/{dataset}")
        for r in routes
    )


#: Every route of the node's own API, the one table `create_app` builds from.
ROUTES: Final = (
    Route("GET", "/api/status", api_status),
    Route("GET", "/api/datasets", api_datasets),
    Route("GET", "/api/peers", api_peers),
    *_under_dataset(
        (
            *TRANSFER_ROUTES,
            *SMART_ROUTES,
            Route("POST", "/ingest", ingest),
            Route("POST", "/ingest/{source}", ingest),
        )
    ),
)


#: Last of every table: a 404 for anything else (it shadows routes registered after it).
CATCH_ALL: Final = Route("*", "/{tail:.*}", not_found)


def _keystore_signer(ws: Workspace) -> Signer:
    def signer(did: DatasetId) -> KeyPair | None:
        return ws.keys.load(did) if ws.keys.has(did) else None

    return signer


def create_app(
    workspace: Workspace,
    *,
    signer: Signer | None = None,
    config: HttpApiConfig | None = None,
    head_store: HeadStore | None = None,
    peers: PeersProvider | None = None,
    status: StatusProvider | None = None,
    extra_routes: Sequence[Route] = (),
    setup: Callable[[web.Application], None] | None = None,
) -> web.Application:
    """The HTTP API of a node serving ``workspace`` (see the module docstring).

    Args:
        workspace: the datasets served.
        signer: the key pair of a dataset this node owns, or ``None`` (default: the
            workspace key store). Pass ``lambda _did: None`` to never sign.
        config: limits and switches, the token and the accepted host names.
        head_store: the high-water marks (default: the workspace's).
        peers: provider of the ``/api/peers`` list (default: empty).
        status: provider of extra ``/api/status`` fields (peer id, listen addresses).
        extra_routes: routes after `ROUTES` and before the final catch-all (which
            would shadow routes added later), e.g. `node.http.attestations.attestation_routes`
            or the daemon's endpoints.
        setup: called with the app before it starts, to give ``extra_routes``' handlers
            their state (e.g. `node.http.attestations.attach_attestations`).

    Raises:
        TokenFileError: the workspace's token file is unsafe or malformed.
    """
    app = web.Application(middlewares=[_guard], client_max_size=1 << 20)
    config = config or HttpApiConfig()
    app[_CFG] = config
    token = config.token if config.token is not None else load_or_create_token(workspace.root)
    app[_POLICY] = AccessPolicy.create(token, config.allowed_hosts)
    app[SERVER] = TransferServer(
        workspace=workspace,
        head_store=head_store or HeadStore.for_workspace(workspace.root),
        signer=signer or _keystore_signer(workspace),
        config=config.transfer(),
        push_lock=asyncio.Lock(),
    )
    app[_HOOKS] = _Hooks(peers=peers or (lambda: []), status=status or (lambda: {}))
    app[_STARTED] = time.monotonic()
    if setup is not None:
        setup(app)
    # The web UI's pages (`node.web`) first: behind the same guard, no route shadows them.
    rows = RowCache()
    app[_ROWS] = (rows, SignedHeads(app[SERVER].head_store))
    app.on_startup.append(_warm_rows)
    app.on_cleanup.append(_warmed)
    ui = mount_web_ui(app, peers=app[_HOOKS].peers, status=app[_HOOKS].status, rows=rows)
    add_routes(app, (*ui, *ROUTES, *extra_routes, CATCH_ALL))
    return app
