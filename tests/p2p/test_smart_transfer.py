"""Smart Transfer Protocol v1 over real aiohttp servers on loopback: client and server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from fbs.codec import decode_block
from fbs.multiformats import Multihash
from node.http.api import HttpApiConfig
from node.http.auth import bearer_headers
from p2p.errors import NotDescendant, PeerMisbehaved, PeerUnavailable, TransferError
from p2p.http.source import Unauthorized
from p2p.receive import object_jobs
from p2p.smart_transfer.client import SmartRefused, SmartSource, smart_push
from p2p.smart_transfer.messages import (
    COMPLETE,
    EMPTY,
    SMTP_VERSION_HEADER,
    ObjectFile,
    PushMetadataRequest,
    PushObjectsAccepted,
    PushObjectsRequest,
    PushRequest,
    TransferPlan,
    decode_result,
    dumps,
    loads,
    pack_blocks,
)
from p2p.sync import PullResult, pull_dataset
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import (
    add_slices,
    make_dataset,
    new_workspace,
    serve,
    serve_workspace,
    tampering_app,
    wait_for,
)

TIMEOUT_S = 60
TOKEN = "smart-transfer-test-token-0123456789"
CONFIG = HttpApiConfig(token=TOKEN)
AUTH = bearer_headers(TOKEN)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def objects_of(ws: Workspace, alias: str) -> dict[str, bytes]:
    ds = ws.get(alias)
    out = {}
    for kind, store in (("data", ds.layout.data), ("cp", ds.layout.checkpoints)):
        for h in store.iter_hashes():
            out[f"{kind}/{h}"] = store.get(h)
    return out


def same_dataset(a: Workspace, b: Workspace, alias: str, alias_b: str | None = None) -> None:
    da, db = a.get(alias), b.get(alias_b or alias)
    assert da.head() == db.head()
    assert objects_of(a, alias) == objects_of(b, alias_b or alias)
    for h, raw, _b in da.iter_blocks():
        assert db.layout.blocks.get(h) == raw
    assert verify_integrity(db).ok


async def smart_pull(dest: Workspace, url: str, alias: str = "prices") -> PullResult:
    async with aiohttp.ClientSession() as session, SmartSource(url, session) as src:
        record = await src.get_head_record()
        return await pull_dataset(dest, src, alias=alias, head_record=record)


@pytest.fixture
def pair_slices() -> int:
    """`pair`'s source holds 6 slices (the conftest's default is 3)."""
    return 6


# -- pull -------------------------------------------------------------------------------------


def test_pull_clone_then_update(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, dst, tmp = pair

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url:
            base = f"odf+{url}/prices"
            r1 = await smart_pull(dst, base)
            assert r1.created and r1.blocks_fetched == 8 and r1.objects_fetched == 12
            add_slices(src.get("prices"), tmp / "more", 3)
            r2 = await smart_pull(dst, base)
            assert not r2.created and r2.blocks_fetched == 3 and r2.objects_fetched == 3
            r3 = await smart_pull(dst, base)
            assert r3.up_to_date

    run(main())
    same_dataset(src, dst, "prices")


def test_object_urls_asked_for_ahead_of_the_downloads(
    pair: tuple[Workspace, Workspace, Path],
) -> None:
    """`expect_objects` sends the one URL request at once (a task): once it is answered,
    every object downloads with the socket closed (a URL asked for later would need the
    exchange, and a new socket cannot start with an objects request)."""
    src, _dst, tmp = pair

    async def main() -> None:
        async with (
            serve_workspace(src, CONFIG) as url,
            aiohttp.ClientSession() as session,
            SmartSource(f"odf+{url}/prices", session) as source,
        ):
            head = await source.get_head()
            assert head is not None
            raws = await source.get_blocks(head, None)
            jobs = object_jobs(decode_block(raw) for raw in raws)
            assert len(jobs) == 12
            source.expect_objects(jobs)
            assert source._prefetch is not None  # the request is under way, nothing awaited
            await source._prefetch
            await source.aclose()
            for n, job in enumerate(jobs):
                dest = tmp / f"object-{n}"
                digest = await source.get_object(job.kind, job.hash, dest, expected_size=job.size)
                assert digest == job.hash.digest == Multihash.sha3_256(dest.read_bytes()).digest

    run(main())


def test_pull_tampered_object_refused_nothing_visible(
    pair: tuple[Workspace, Workspace, Path],
) -> None:
    src, dst, _tmp = pair

    def tamper(request: web.Request, body: bytes) -> bytes | None:
        if "/data/" in request.path:
            return body[:-1] + bytes([body[-1] ^ 1])
        return None

    async def main() -> None:
        async with serve(tampering_app(src, tamper)) as url:
            with pytest.raises((PeerMisbehaved, PeerUnavailable)):
                await smart_pull(dst, f"odf+{url}/prices")

    run(main())
    assert dst.list() == []


def test_pull_tampered_batch_refused(
    pair: tuple[Workspace, Workspace, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, _tmp = pair
    head = src.get("prices").head()
    real = pack_blocks

    def forged(blocks: list[tuple[Multihash, bytes]]) -> Any:
        # A server that serves forged bytes under the head's name.
        return real(
            [(h, raw if h != head else raw[:-1] + bytes([raw[-1] ^ 1])) for h, raw in blocks]
        )

    monkeypatch.setattr("p2p.smart_transfer.server.pack_blocks", forged)

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url:
            with pytest.raises((PeerMisbehaved, PeerUnavailable)):
                await smart_pull(dst, f"odf+{url}/prices")

    run(main())
    assert dst.list() == []


# -- push -------------------------------------------------------------------------------------


def test_push_new_dataset_then_update(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, node, tmp = pair

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            r1 = await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert r1.old_head is None and r1.blocks_pushed == 8
            assert r1.objects_uploaded == 12 and r1.objects_skipped == 0
            same_dataset(src, node, "prices")
            add_slices(src.get("prices"), tmp / "more", 2)
            r2 = await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert r2.blocks_pushed == 2 and r2.objects_uploaded == 2
            r3 = await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert r3.blocks_pushed == 0

    run(main())
    same_dataset(src, node, "prices")
    assert not node.keys.has(src.resolve("prices").id)


def test_push_under_account_path_creates_account_alias(
    pair: tuple[Workspace, Workspace, Path],
) -> None:
    src, node, _tmp = pair

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            await smart_push(src, "prices", f"odf+{url}/alice/prices", session=s, headers=AUTH)

    run(main())
    same_dataset(src, node, "prices", "alice/prices")


def test_push_without_token_refused(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, node, _tmp = pair

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            with pytest.raises(Unauthorized):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s)
            bad = bearer_headers("wrong-token-wrong-token-wrong")
            with pytest.raises(Unauthorized):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=bad)
            # The upgrade itself is refused: 401 before any message.
            hdrs = {SMTP_VERSION_HEADER: "1"}
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await s.ws_connect(f"{url}/prices/push", headers=hdrs)
            assert e.value.status == 401

    run(main())
    assert node.list() == []


def test_wrong_version_refused_before_upgrade(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, _dst, _tmp = pair

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url, aiohttp.ClientSession() as s:
            for hdrs in ({}, {SMTP_VERSION_HEADER: "2"}):
                with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                    await s.ws_connect(f"{url}/prices/pull", headers=hdrs)
                assert e.value.status == 400

    run(main())


# -- a hand-driven push (to tamper and race) ----------------------------------------------------


class RawPush:
    """A push client driven step by step from the test."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, doc: Any) -> None:
        await self.ws.send_str(dumps(doc))

    async def recv(self) -> Any:
        msg = await self.ws.receive(timeout=20)
        if msg.type == aiohttp.WSMsgType.TEXT:
            return decode_result(loads(msg.data)) if msg.data != "{}" else {}
        return ("closed", msg.data, msg.extra)


def _new_blocks(src: Workspace, after: Multihash | None) -> list[tuple[Multihash, bytes, Any]]:
    out = []
    for h, raw, b in src.get("prices").iter_blocks():
        if h == after:
            break
        out.append((h, raw, b))
    out.reverse()
    return out


def _files(blocks: list[tuple[Multihash, bytes, Any]]) -> tuple[ObjectFile, ...]:
    from p2p.receive import object_jobs

    return tuple(ObjectFile.of(j.kind, j.hash, j.size) for j in object_jobs(b for *_x, b in blocks))


async def _start_push(
    s: aiohttp.ClientSession, url: str, current: Multihash | None, blocks: Any
) -> RawPush:
    ws = await s.ws_connect(f"{url}/prices/push", headers={SMTP_VERSION_HEADER: "1", **AUTH})
    p = RawPush(ws)
    plan = TransferPlan(len(blocks), 0, 0, 0, 0)
    await p.send(PushRequest(current, plan).to_doc())
    assert await p.recv() == {}
    await p.send(PushMetadataRequest(pack_blocks([(h, r) for h, r, _b in blocks])).to_doc())
    return p


@pytest.fixture
def pushed(pair: tuple[Workspace, Workspace, Path]) -> tuple[Workspace, Workspace, Path]:
    """``prices`` on the node too, then two more slices locally."""
    src, node, tmp = pair

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)

    run(main())
    add_slices(src.get("prices"), tmp / "more", 2)
    return src, node, tmp


def test_push_tampered_object_refused_nothing_visible(
    pushed: tuple[Workspace, Workspace, Path],
) -> None:
    src, node, _tmp = pushed
    before = node.get("prices").head()
    blocks = _new_blocks(src, before)

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            p = await _start_push(s, url, before, blocks)
            assert await p.recv() == {}
            await p.send(PushObjectsRequest(_files(blocks)).to_doc())
            accepted = PushObjectsAccepted.from_doc(await p.recv())
            for st in accepted.strategies:
                assert st.upload_to is not None
                body = b"not the object" + b"\x00" * st.object_file.size
                body = body[: st.object_file.size]
                async with s.put(st.upload_to.url, data=body, headers=st.upload_to.headers) as r:
                    assert r.status == 400
            await p.send(COMPLETE.to_doc())
            await p.send(EMPTY)
            closed = await p.recv()
            assert closed[0] == "closed" and closed[1] == 1011
            assert "not uploaded" in closed[2]

    run(main())
    assert node.get("prices").head() == before
    names = set(objects_of(node, "prices"))
    for f in _files(blocks):
        assert f"data/{f.physical_hash}" not in names and f"cp/{f.physical_hash}" not in names
    assert verify_integrity(node.get("prices")).ok


def test_push_tampered_block_refused_nothing_visible(
    pushed: tuple[Workspace, Workspace, Path],
) -> None:
    src, node, _tmp = pushed
    before = node.get("prices").head()
    blocks = _new_blocks(src, before)
    h, raw, b = blocks[-1]
    blocks[-1] = (h, raw[:-1] + bytes([raw[-1] ^ 1]), b)

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            p = await _start_push(s, url, before, blocks)
            closed = await p.recv()
            assert closed[0] == "closed" and closed[1] == 1011

    run(main())
    assert node.get("prices").head() == before
    assert not node.get("prices").layout.blocks.has(h)


def test_push_stale_head_is_a_conflict(pushed: tuple[Workspace, Workspace, Path]) -> None:
    src, node, tmp = pushed
    add_slices(node.get("prices"), tmp / "node-side", 1)  # the node's head moved

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            with pytest.raises(NotDescendant):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)

    moved = node.get("prices").head()
    run(main())
    assert node.get("prices").head() == moved


def test_concurrent_head_move_refused_as_conflict(
    pushed: tuple[Workspace, Workspace, Path],
) -> None:
    src, node, tmp = pushed
    before = node.get("prices").head()
    blocks = _new_blocks(src, before)

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            p = await _start_push(s, url, before, blocks)
            assert await p.recv() == {}
            await p.send(PushObjectsRequest(_files(blocks)).to_doc())
            accepted = PushObjectsAccepted.from_doc(await p.recv())
            ds = src.get("prices")
            for st in accepted.strategies:
                assert st.upload_to is not None
                f = st.object_file
                store = ds.layout.data if f.kind == "data" else ds.layout.checkpoints
                async with s.put(
                    st.upload_to.url, data=store.get(f.physical_hash), headers=st.upload_to.headers
                ) as r:
                    assert r.status == 201
            await p.send(COMPLETE.to_doc())
            # Meanwhile, the node's own head moves.
            await asyncio.to_thread(add_slices, node.get("prices"), tmp / "race", 1)
            await p.send(EMPTY)
            closed = await p.recv()
            assert closed[0] == "closed" and closed[1] == 1011
            assert "head moved" in closed[2]

    run(main())
    head = node.get("prices").head()
    assert head != before and all(head != h for h, _r, _b in blocks)
    assert verify_integrity(node.get("prices")).ok


def test_push_seed_to_existing_dataset_refused(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, node, tmp = pair
    make_dataset(node, "prices", tmp / "other", 1)  # another dataset under the same name

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            with pytest.raises((SmartRefused, NotDescendant)):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)

    head = node.get("prices").head()
    run(main())
    assert node.get("prices").head() == head


@pytest.mark.parametrize(
    "first",
    [
        "not json",
        '{"begin_after":"f16200","stop_at":null,"force_update_if_diverged":false}',
        b"\x00binary",
        "x" * (1 << 20),  # under the pull limit, but not JSON
    ],
)
def test_malformed_pull_messages_close_the_socket(
    pair: tuple[Workspace, Workspace, Path], first: str | bytes
) -> None:
    src, _dst, _tmp = pair

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url, aiohttp.ClientSession() as s:
            ws = await s.ws_connect(f"{url}/prices/pull", headers={SMTP_VERSION_HEADER: "1"})
            if isinstance(first, bytes):
                await ws.send_bytes(first)
            else:
                await ws.send_str(first)
            msg = await ws.receive(timeout=20)
            assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1011
            assert decode_result(loads(msg.extra or "")).variant == "Internal"  # type: ignore[union-attr]
            # The node still serves.
            r = await smart_pull(new_workspace(_tmp / "after"), f"odf+{url}/prices")
            assert r.created

    run(main())


def test_oversized_pull_message_refused(
    pair: tuple[Workspace, Workspace, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, _dst, _tmp = pair
    monkeypatch.setattr("p2p.smart_transfer.server.MAX_PULL_MESSAGE_BYTES", 1000)

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url, aiohttp.ClientSession() as s:
            ws = await s.ws_connect(f"{url}/prices/pull", headers={SMTP_VERSION_HEADER: "1"})
            await ws.send_str("[" + "1," * 1000 + "1]")
            msg = await ws.receive(timeout=20)
            assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1009  # message too big

    run(main())


def test_push_answers_progress_pings(
    pair: tuple[Workspace, Workspace, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server pings for upload progress while objects go up; the client answers."""
    src, node, _tmp = pair
    monkeypatch.setattr("p2p.smart_transfer.server.UPLOAD_PROGRESS_PING_S", 0.01)
    import p2p.smart_transfer.client as client

    real_upload = client._upload
    answered: list[str] = []
    real_send = client._Channel.send

    async def slow_upload(*args: Any) -> None:
        # Held until the client has answered a progress ping.
        await wait_for(lambda: any('"Running"' in a for a in answered), "a ping answered")
        await real_upload(*args)

    async def send(self: Any, doc: Any) -> None:
        answered.append(dumps(doc)[:40])
        await real_send(self, doc)

    monkeypatch.setattr(client, "_upload", slow_upload)
    monkeypatch.setattr(client._Channel, "send", send)

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            r = await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert r.objects_uploaded == 12

    run(main())
    assert any('"Running"' in a for a in answered)
    assert '{"details":"Complete"}' in answered
    same_dataset(src, node, "prices")


def test_push_upload_failure_is_reported_and_nothing_moves(
    pushed: tuple[Workspace, Workspace, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, node, _tmp = pushed
    before = node.get("prices").head()

    async def failing_upload(*_args: Any) -> None:
        raise TransferError("PUT: HTTP 507: disk full")

    monkeypatch.setattr("p2p.smart_transfer.client._upload", failing_upload)

    async def main() -> None:
        async with serve_workspace(node, CONFIG) as url, aiohttp.ClientSession() as s:
            with pytest.raises(TransferError, match="disk full"):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)

    run(main())
    assert node.get("prices").head() == before
