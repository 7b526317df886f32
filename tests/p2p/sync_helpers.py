"""Shared fixtures for the sync / HTTP tests: workspaces with data, servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from aiohttp import web

from fbs.logical_hash import logical_hash
from fbs.model import (
    AddData,
    Checkpoint,
    DataField,
    DataSchema,
    DataSlice,
    DataTypeInt32,
    DataTypeInt64,
    DataTypeTimestamp,
    OffsetInterval,
    SetDataSchema,
    TimeUnit,
)
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from node.http.api import HttpApiConfig, create_app
from storage.dataset import Dataset
from storage.workspace import Workspace

T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")

SCHEMA = SetDataSchema(
    schema=DataSchema(
        fields=(
            DataField(name="offset", type=DataTypeInt64()),
            DataField(name="op", type=DataTypeInt32()),
            DataField(
                name="system_time",
                type=DataTypeTimestamp(unit=TimeUnit.Millisecond, timezone="UTC"),
            ),
            DataField(
                name="event_time",
                type=DataTypeTimestamp(unit=TimeUnit.Millisecond, timezone="UTC"),
            ),
            DataField(name="value", type=DataTypeInt64()),
        )
    )
)


def new_workspace(path: Path) -> Workspace:
    """A fresh workspace in ``path`` (created)."""
    path.mkdir(parents=True, exist_ok=True)
    return Workspace.init(path)


def write_slice(path: Path, start: int, n: int, *, pad: int = 0) -> DataSlice:
    """Write a Parquet file of ``n`` records with offsets ``start..`` and return its slice.

    ``pad`` adds a binary column of that many random-ish bytes per file (for size).
    """
    ts = pa.array([T0.nanos // 10**6 + i for i in range(n)], pa.timestamp("ms", tz="UTC"))
    cols: dict[str, Any] = {
        "offset": pa.array(range(start, start + n), pa.int64()),
        "op": pa.array([0] * n, pa.int32()),
        "system_time": ts,
        "event_time": ts,
        "value": pa.array([i * 7 for i in range(start, start + n)], pa.int64()),
    }
    table = pa.table(cols)
    pq.write_table(table, path, compression="none")
    data = path.read_bytes()
    if pad:
        # Bytes after the Parquet footer keep the file valid for our purposes (the
        # physical hash covers them); this makes large slices cheap to produce.
        with open(path, "ab") as f:
            block = (start.to_bytes(8, "little") * 8192)[:65536]
            left = pad
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)
        data = path.read_bytes()
    return DataSlice(
        logical_hash=logical_hash(table.schema, table),
        physical_hash=Multihash.sha3_256(data),
        offset_interval=OffsetInterval(start=start, end=start + n - 1),
        size=len(data),
    )


def add_slices(
    ds: Dataset,
    tmp: Path,
    count: int,
    *,
    rows: int = 5,
    pad: int = 0,
    checkpoints: bool = False,
) -> None:
    """Commit ``count`` AddData blocks (with a schema first if there is none)."""
    tmp.mkdir(parents=True, exist_ok=True)
    state = ds.state()
    assert state is not None
    if state.data_schema is None:
        ds.commit(SCHEMA, expected_head=ds.head())
    for _ in range(count):
        state = ds.state()
        assert state is not None
        start = state.num_records
        path = tmp / f"slice-{start}.parquet"
        slice_ = write_slice(path, start, rows, pad=pad)
        cp_path: Path | None = None
        cp: Checkpoint | None = None
        if checkpoints:
            cp_path = tmp / f"cp-{start}"
            content = f"checkpoint {start}".encode() * 10
            cp_path.write_bytes(content)
            cp = Checkpoint(physical_hash=Multihash.sha3_256(content), size=len(content))
        ds.commit(
            AddData(
                prev_checkpoint=state.last_checkpoint,
                prev_offset=state.last_offset,
                new_data=slice_,
                new_checkpoint=cp,
                new_watermark=T0,
            ),
            expected_head=ds.head(),
            data_file=path,
            checkpoint_file=cp_path,
        )


def make_dataset(ws: Workspace, alias: str, tmp: Path, slices: int = 3, **kw: Any) -> Dataset:
    """A dataset owned by ``ws`` (key in its key store) with ``slices`` data slices."""
    ds = ws.create_dataset(alias)
    add_slices(ds, tmp, slices, **kw)
    return ds


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on 127.0.0.1, port 0; yields the base URL ``http://127.0.0.1:PORT``."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_workspace(
    ws: Workspace, config: HttpApiConfig | None = None, **kw: Any
) -> AsyncIterator[str]:
    """Serve ``ws`` with the node HTTP API; yields the node URL."""
    async with serve(create_app(ws, config=config, **kw)) as url:
        yield url


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def tampering_app(
    ws: Workspace, tamper: Callable[[web.Request, bytes], bytes | None]
) -> web.Application:
    """The node API for ``ws`` whose response bodies go through ``tamper(request, body)``.

    ``tamper`` returns replacement bytes (or ``None`` to keep the body).
    """

    @web.middleware
    async def mw(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        if isinstance(resp, web.FileResponse):
            path = resp._path
            body = await asyncio.to_thread(Path(path).read_bytes)
            new = tamper(request, body)
            if new is None:
                return resp
            return web.Response(body=new, status=200, content_type="application/octet-stream")
        if isinstance(resp, web.Response) and resp.body is not None and resp.status == 200:
            body = bytes(resp.body)  # type: ignore[arg-type]
            new = tamper(request, body)
            if new is not None:
                return web.Response(body=new, status=200, content_type=resp.content_type)
        return resp

    app = create_app(ws)
    app.middlewares.append(mw)
    return app


async def raw_http(url_base: str, request_line: str) -> tuple[int, bytes]:
    """Send one raw HTTP/1.1 request line (path sent byte for byte); status and body."""
    host_port = url_base.split("//", 1)[1]
    host, port = host_port.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            f"{request_line} HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body


#: Longest wait for a condition in the network tests (generous for a busy 2-core CI).
WAIT_S = 45.0


async def wait_for(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll ``cond`` every 50 ms; fail the test after ``timeout`` seconds."""
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
