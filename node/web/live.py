"""Live updates: new heads pushed to open pages as server-sent events.

One watcher per application compares every dataset's head with what it saw last, every
`POLL_INTERVAL_S`, while at least one page listens, and sends each change to every
listener as an ``event: head`` message whose data is JSON (``id``, ``alias``, ``head``
and the dataset's list ``row`` rendered as HTML). It watches the workspace itself, not
the daemon's events, so a head committed by any process (``odf ingest``, ``odf pull``,
a push, a replication) reaches the page the same way. A scan reads the catalog and one ref file
per dataset (about 60 ms for 1,000 datasets); the pause after a scan is at least
`POLL_INTERVAL_S` and at least `IDLE_FACTOR` times the scan's duration, so the watcher
never takes more than a tenth of a core however many datasets the node holds. With no
listener for `LINGER_S` nothing is read.

A listener whose queue is full (a stalled page) is dropped rather than letting the
node's memory grow; its browser reconnects (EventSource retries on its own) and the page
re-reads what it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Final

from aiohttp import web

from fbs.did import DatasetId
from node.web.render import list_row
from node.web.rows import RowCache, heads
from storage.errors import StorageError
from storage.workspace import Workspace

__all__ = ["POLL_INTERVAL_S", "HeadWatcher", "events_handler"]

log = logging.getLogger(__name__)

#: How often the heads are compared while a page listens.
POLL_INTERVAL_S: Final = 0.25
#: The pause after a scan is at least this many times the scan's duration.
IDLE_FACTOR: Final = 9.0
#: Messages kept for one listener before it is dropped.
MAX_QUEUED: Final = 256
#: A comment line every so often keeps proxies from closing an idle stream.
KEEPALIVE_S: Final = 15.0
#: The watcher keeps polling this long after the last listener left: a person going from
#: page to page does not make it scan every head afresh at each page.
LINGER_S: Final = 30.0
#: Most listeners at once (each is one open connection).
MAX_LISTENERS: Final = 64


class HeadWatcher:
    """Polls the workspace's heads while listeners are attached (see the module docstring)."""

    def __init__(
        self,
        ws: Workspace,
        rows: RowCache,
        interval: float = POLL_INTERVAL_S,
        linger: float = LINGER_S,
    ) -> None:
        self.ws = ws
        self.rows = rows
        self.interval = interval
        self.linger = linger
        self._alone_since: float | None = None
        self._listeners: set[asyncio.Queue[str | None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[DatasetId, str] | None = None

    def listen(self) -> asyncio.Queue[str | None] | None:
        """A new listener's queue (``None`` when `MAX_LISTENERS` are attached)."""
        if len(self._listeners) >= MAX_LISTENERS:
            return None
        queue: asyncio.Queue[str | None] = asyncio.Queue(MAX_QUEUED)
        self._listeners.add(queue)
        self._alone_since = None
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="web-head-watcher")
        return queue

    def leave(self, queue: asyncio.Queue[str | None]) -> None:
        """Detach a listener; the watcher stops `LINGER_S` after the last one left."""
        self._listeners.discard(queue)
        if not self._listeners and self._alone_since is None:
            self._alone_since = time.monotonic()

    def _lingered(self) -> bool:
        """Whether nobody has listened for `linger` seconds (then the watcher stops)."""
        alone = self._alone_since
        return alone is not None and time.monotonic() - alone >= self.linger

    async def close(self) -> None:
        """End every listener's stream and stop polling (application shutdown)."""
        for queue in list(self._listeners):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)
        self._listeners.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while not self._lingered():
            spent = 0.0
            try:
                spent = await self._poll()
            except (StorageError, OSError) as e:
                log.warning("web head watcher: %s", e)
            await asyncio.sleep(max(self.interval, IDLE_FACTOR * spent))
        self._seen = None  # a later listener starts from a new scan

    async def _poll(self) -> float:
        """Compare the heads with the last scan, send the changes; the scan's duration."""
        started = time.monotonic()
        current = await asyncio.to_thread(heads, self.ws)
        spent = time.monotonic() - started
        if self._seen is None:
            self._seen = current
            return spent
        changed = [did for did, head in current.items() if self._seen.get(did) != head]
        self._seen = current
        for did in changed:
            message = await asyncio.to_thread(self._message, did, current[did])
            if message is not None:
                self._broadcast(message)
        return spent

    def _message(self, did: DatasetId, head: str) -> str | None:
        """The event of ``did``'s new head (``None``: the dataset went in the meantime)."""
        try:
            entry = self.ws.resolve(did)
        except StorageError:
            return None
        row = self.rows.row(self.ws, entry)
        doc = {
            "id": did.to_did_odf(),
            "alias": entry.alias,
            "head": head,
            "row": list_row(row),
        }
        return json.dumps(doc)

    def _broadcast(self, data: str) -> None:
        for queue in list(self._listeners):
            try:
                queue.put_nowait(data)
            except asyncio.QueueFull:
                self.leave(queue)
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                queue.put_nowait(None)


async def events_handler(request: web.Request, watcher: HeadWatcher) -> web.StreamResponse:
    """``GET /ui/events``: the ``text/event-stream`` of new heads."""
    if request.method == "HEAD":  # no body, so no listener to keep
        return web.Response(content_type="text/event-stream")
    queue = watcher.listen()
    if queue is None:
        return web.Response(status=503, text="too many live pages open\n")
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    try:
        await resp.prepare(request)
        await resp.write(b"retry: 1000\n: connected\n\n")
        while True:
            try:
                data = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except TimeoutError:
                await resp.write(b": keepalive\n\n")
                continue
            if data is None:
                break
            await resp.write(f"event: head\ndata: {data}\n\n".encode())
    except ConnectionResetError:
        pass  # the page went away
    finally:
        watcher.leave(queue)
    return resp
