"""The web UI's routes: pages under ``/ui/``, mounted into the node's HTTP application.

`mount` stores what the handlers need in the application and returns the route table
`node.http.api.create_app` registers ahead of its own (so no dataset route shadows a
page). Every route is a GET: the pages read. The one write a page offers (the network
page's follow form) goes to the API's own route (``/api/follow``) with the token the
person types, as its bearer token: no page holds or embeds the token, and the API's
guard (Host/Origin checks, then the token) decides. That middleware runs before these
handlers too, so
a page requested by a foreign site (``Origin``, ``Sec-Fetch-Site``) or through a
rebound host name is refused before it is rendered.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, Final

from aiohttp import web

from fbs.errors import FbsError
from node.web.html import SECURITY_HEADERS, esc, page
from node.web.live import HeadWatcher, events_handler
from node.web.render import (
    LIST_LIMIT,
    dataset_body,
    list_body,
    network_body,
    preview_section,
)
from node.web.rows import RowCache
from node.web.sqlpage import SqlRunner, sql_body
from node.web.views import dataset_detail, preview
from p2p.http.server import SERVER, Route
from storage.errors import DatasetNotFound, InvalidAlias, StorageError
from storage.workspace import Workspace

__all__ = ["STATIC_FILES", "mount"]

PeersProvider = Callable[[], Sequence[Mapping[str, Any]]]
StatusProvider = Callable[[], Mapping[str, Any]]

#: The files under ``/ui/static/`` (nothing else is served from the package).
STATIC_FILES: Final = {"app.js": "text/javascript", "app.css": "text/css"}
#: Longest dataset reference or search text accepted in a query string.
MAX_PARAM: Final = 1024
_MAX_PAGE: Final = 10_000


class WebUi:
    """The state of the UI in one application: providers, head watcher, SQL runner."""

    def __init__(self, peers: PeersProvider, status: StatusProvider, rows: RowCache) -> None:
        self.peers = peers
        self.status = status
        self.watcher: HeadWatcher | None = None
        self.sql = SqlRunner()
        self.rows = rows

    def watcher_for(self, ws: Workspace) -> HeadWatcher:
        if self.watcher is None:
            self.watcher = HeadWatcher(ws, self.rows)
        return self.watcher


_UI: Final = web.AppKey("web_ui", WebUi)


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(
        text=text,
        status=status,
        content_type="text/html",
        charset="utf-8",
        headers=SECURITY_HEADERS,
    )


def _param(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if len(value) > MAX_PARAM:
        raise web.HTTPBadRequest(text=f"{name} is too long")
    return value


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _ws(request: web.Request) -> Workspace:
    return request.app[SERVER].workspace


async def list_page(request: web.Request) -> web.StreamResponse:
    query = _param(request, "q")
    limit = None if request.query.get("all") == "1" else LIST_LIMIT
    rows, total = await asyncio.to_thread(request.app[_UI].rows.rows, _ws(request), query, limit)
    body = list_body(rows, query, total)
    return _html(page("Datasets", body, active="datasets", live=True))


def _page_number(request: web.Request) -> int:
    try:
        return min(max(0, int(request.query.get("page", "0"))), _MAX_PAGE)
    except ValueError:
        raise web.HTTPBadRequest(text="page must be a number") from None


async def dataset_page(request: web.Request) -> web.StreamResponse:
    ref = _param(request, "ds")
    number = _page_number(request)
    ws = _ws(request)
    try:
        detail = await asyncio.to_thread(dataset_detail, ws, ref, request.app[_UI].rows)
        rows, more = await asyncio.to_thread(preview, ws, ref, number)
    except (DatasetNotFound, InvalidAlias):
        body = f"<h1>Not found</h1><p>No dataset {esc(ref)} on this node.</p>"
        return _html(page("Not found", body, active="datasets"), status=404)
    except (StorageError, FbsError, ValueError) as e:
        body = f"<h1>{esc(ref)}</h1><p class=error>Cannot read this dataset: {esc(e)}</p>"
        return _html(page(ref, body, active="datasets"), status=500)
    section = preview_section(detail.row.alias, rows, number, more)
    body = dataset_body(detail, section, _now())
    return _html(page(detail.row.alias, body, active="datasets", live=True))


async def network_page(request: web.Request) -> web.StreamResponse:
    ui = request.app[_UI]
    entries = await asyncio.to_thread(_ws(request).list)
    aliases = {k: e.alias for e in entries for k in (e.id.to_did_odf(), e.alias)}
    body = network_body(list(ui.peers()), dict(ui.status()), aliases)
    return _html(page("Network", body, active="network"))


async def sql_page(request: web.Request) -> web.StreamResponse:
    query = request.query.get("q", "")
    outcome = await request.app[_UI].sql.run(_ws(request), query) if query.strip() else None
    return _html(page("SQL", sql_body(query, outcome), active="sql"))


async def events(request: web.Request) -> web.StreamResponse:
    return await events_handler(request, request.app[_UI].watcher_for(_ws(request)))


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    media = STATIC_FILES.get(name)
    if media is None:
        raise web.HTTPNotFound(text="not found")
    data = resources.files("node.web").joinpath("static", name).read_bytes()
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}
    return web.Response(body=data, content_type=media, charset="utf-8", headers=headers)


async def to_ui(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


async def _close(app: web.Application) -> None:
    ui = app[_UI]
    if ui.watcher is not None:
        await ui.watcher.close()


def mount(
    app: web.Application,
    *,
    peers: PeersProvider,
    status: StatusProvider,
    rows: RowCache | None = None,
) -> tuple[Route, ...]:
    """Attach the UI's state to ``app``; the routes to register (before the API's own).

    ``peers`` and ``status`` are the providers of ``/api/peers`` and ``/api/status``:
    the network page shows what they report. ``rows`` is the row cache the pages share
    (with ``/api/datasets``; default: a new one).
    """
    app[_UI] = WebUi(peers, status, rows or RowCache())
    app.on_shutdown.append(_close)
    return (
        Route("GET", "/", to_ui),
        Route("GET", "/ui", to_ui),
        Route("GET", "/ui/", list_page),
        Route("GET", "/ui/dataset", dataset_page),
        Route("GET", "/ui/sql", sql_page),
        Route("GET", "/ui/network", network_page),
        Route("GET", "/ui/events", events),
        Route("GET", "/ui/static/{name}", static),
    )
