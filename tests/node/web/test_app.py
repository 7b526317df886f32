"""The UI's routes on the real aiohttp application (`node.http.api.create_app`) on a
real port: headers, escaping of everything reflected, the API's guard in front of the
pages, the event stream, a damaged dataset."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from node.http.auth import load_or_create_token
from node.web.html import SECURITY_HEADERS
from node.web.live import HeadWatcher
from node.web.rows import RowCache
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve_workspace

TIMEOUT_S = 60
PAGES = ("/ui/", "/ui/dataset?ds=prices", "/ui/sql", "/ui/sql?q=SELECT+1", "/ui/network")


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    w = new_workspace(tmp_path / "node")
    make_dataset(w, "prices", tmp_path / "files", 2)
    return w


async def fetch(s: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, str, Any]:
    async with s.get(url, **kw) as r:
        return r.status, await r.text(), r.headers


def test_pages_carry_the_security_headers(ws: Workspace) -> None:
    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            for path in PAGES:
                status, text, headers = await fetch(s, url + path)
                assert status == 200, (path, text)
                assert headers["Content-Type"] == "text/html; charset=utf-8"
                for name, value in SECURITY_HEADERS.items():
                    assert headers[name] == value, (path, name)
                assert "<script>" not in text and " style=" not in text  # CSP: nothing inline
                assert "follow-form" not in text  # no daemon here: nothing to write to

    run(main())


def test_reflected_text_is_escaped(ws: Workspace) -> None:
    evil = '"><script>alert(1)</script>'

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            for path, params, status in (
                ("/ui/", {"q": evil}, 200),
                ("/ui/sql", {"q": evil}, 200),
                ("/ui/dataset", {"ds": evil}, 404),
            ):
                code, text, _ = await fetch(s, url + path, params=params)
                assert code == status
                assert "<script>alert" not in text
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text

    run(main())


def test_bad_parameters_and_unknown_static_files(ws: Workspace) -> None:
    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            assert (await fetch(s, url + "/ui/dataset?ds=prices&page=x"))[0] == 400
            assert (await fetch(s, url + "/ui/?q=" + "a" * 2000))[0] == 400
            assert (await fetch(s, url + "/ui/static/app.js"))[0] == 200
            assert (await fetch(s, url + "/ui/static/views.py"))[0] == 404
            assert (await fetch(s, url + "/ui/static/..%2f__init__.py"))[0] == 400
            # The dataset's own transfer routes are not shadowed by the pages.
            assert (await fetch(s, url + "/prices/refs/head"))[0] == 200

    run(main())


def test_the_api_guard_runs_before_the_pages(ws: Workspace) -> None:
    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            for headers in (
                {"Origin": "http://evil.example"},
                {"Sec-Fetch-Site": "cross-site"},
                {"Host": "evil.example"},
            ):
                for path in PAGES:
                    code, text, _ = await fetch(s, url + path, headers=headers)
                    assert code == 403 and "<html" not in text, (path, headers)
            async with s.post(url + "/ui/sql", data={"q": "SELECT 1"}) as r:
                assert r.status == 401  # every POST needs the token, pages have none

    run(main())


def test_a_damaged_dataset_does_not_take_the_list_down(ws: Workspace, tmp_path: Path) -> None:
    make_dataset(ws, "broken", tmp_path / "b", 1)
    head_ref = ws.resolve("broken").path / "refs" / "head"
    head_ref.write_text("not a hash")

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            code, text, _ = await fetch(s, url + "/ui/")
            assert code == 200
            assert 'data-alias="prices"' in text and 'class="error"' in text
            assert (await fetch(s, url + "/ui/dataset?ds=broken"))[0] == 500

    run(main())


def test_event_stream_sends_a_new_head(ws: Workspace, tmp_path: Path) -> None:
    ds = ws.get("prices")

    async def main() -> None:
        async with (
            serve_workspace(ws) as url,
            aiohttp.ClientSession() as s,
            s.get(url + "/ui/events") as r,
        ):
            assert r.headers["Content-Type"] == "text/event-stream"
            assert await r.content.readline() == b"retry: 1000\n"
            await asyncio.sleep(0.6)  # the watcher has seen the current heads
            await asyncio.to_thread(add_slices, ds, tmp_path / "more", 1)
            started = time.monotonic()
            line = b""
            while not line.startswith(b"data: "):
                line = await asyncio.wait_for(r.content.readline(), 5)
            assert time.monotonic() - started < 2.0
            doc = json.loads(line[len(b"data: ") :])
            assert doc["alias"] == "prices" and doc["head"] == str(ds.head())
            assert doc["row"].startswith("<tr ") and 'data-alias="prices"' in doc["row"]

    run(main())


def test_head_of_the_event_stream_returns_at_once(ws: Workspace) -> None:
    async def main() -> None:
        async with (
            serve_workspace(ws) as url,
            aiohttp.ClientSession() as s,
            s.head(url + "/ui/events", timeout=aiohttp.ClientTimeout(total=5)) as r,
        ):
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/event-stream")

    run(main())


def test_watcher_polls_only_while_someone_listens(ws: Workspace) -> None:
    async def main() -> None:
        watcher = HeadWatcher(ws, RowCache(), interval=0.01, linger=0.2)
        first = watcher.listen()
        second = watcher.listen()
        assert first is not None and second is not None
        await asyncio.sleep(0.05)
        watcher.leave(first)
        watcher.leave(second)
        task = watcher._task
        assert task is not None and not task.done()  # lingers a while for the next page
        third = watcher.listen()  # which comes: the same watcher goes on
        assert third is not None and watcher._task is task
        watcher.leave(third)
        await asyncio.wait_for(task, 30)  # then stops
        assert watcher._seen is None
        await watcher.close()

    run(main())


def test_list_shows_the_first_rows_and_all_on_request(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a1", "a2", "b1"):
        make_dataset(ws, name, tmp_path / name, 1)
    monkeypatch.setattr("node.web.app.LIST_LIMIT", 2)

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            _, text, _ = await fetch(s, url + "/ui/")
            assert text.count("<tr data-id=") == 2 and 'id="count">4<' in text
            assert 'data-complete="0"' in text and "show all" in text
            _, text, _ = await fetch(s, url + "/ui/?all=1")
            assert text.count("<tr data-id=") == 4 and 'data-complete="1"' in text
            _, text, _ = await fetch(s, url + "/ui/?q=A")  # search is case-insensitive
            assert text.count("<tr data-id=") == 2 and 'id="count">2<' in text
            assert 'data-alias="a1"' in text and 'data-alias="a2"' in text

    run(main())


def test_dataset_page_shows_who_attested_what_and_disputes(ws: Workspace) -> None:
    from fbs.keys import KeyPair
    from p2p.attestation import Verdict, sign_attestation
    from p2p.attestation_store import AttestationStore

    state = ws.get("prices").state()
    assert state is not None
    store = AttestationStore.for_workspace(ws)
    good, bad = KeyPair.generate(), KeyPair.generate()
    for key, verdict, detail in ((good, Verdict.REPRODUCED, ""), (bad, Verdict.DIVERGED, "offset")):
        att = sign_attestation(
            key,
            dataset_id=state.dataset_id,
            block_hash=state.head,
            sequence_number=state.sequence_number,
            verdict=verdict,
            detail=detail,
            engine="spark (test)",
        )
        store.accept(att)

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            _, text, _ = await fetch(s, url + "/ui/dataset?ds=prices")
        trust = text[text.index("Signed head and attestations") :]
        assert "Disputed: a validator found a block that does not reproduce" in trust
        assert trust.count('<tr class="verdict-') == 2
        assert 'class="verdict-reproduced"' in trust and 'class="verdict-diverged"' in trust
        assert ">offset<" in trust  # the field the dissenting validator named
        assert good.dataset_id.to_did_key()[-16:] in trust
        assert bad.dataset_id.to_did_key()[-16:] in trust

    run(main())


def test_network_page_shows_peers_bans_and_follows(ws: Workspace) -> None:
    peers = [
        {"peerId": "12D3KooWgood", "connected": True, "score": 1.5, "banned": False},
        {
            "peerId": "12D3KooWbad",
            "connected": False,
            "score": -40.0,
            "banned": True,
            "offences": 3,
            "lastReason": "served bytes that do not match their hash",
        },
    ]
    did = ws.resolve("prices").id.to_did_odf()
    follow = ["prices", did, "did:odf:fed01" + "0" * 64]
    status = {"peerId": "12D3KooWme", "addrs": ["/ip4/127.0.0.1/tcp/1"], "follow": follow}

    async def main() -> None:
        async with (
            serve_workspace(ws, peers=lambda: peers, status=lambda: status) as url,
            aiohttp.ClientSession() as s,
        ):
            _, text, _ = await fetch(s, url + "/ui/network")
        assert "12D3KooWme" in text and "/ip4/127.0.0.1/tcp/1" in text
        assert '<tr class="banned"><td><code>12D3KooWbad' in text
        assert "served bytes that do not match their hash" in text
        # Followed datasets are named by alias and linked; a DID not held stays a DID.
        link = '<a href="/ui/dataset?ds=prices">prices</a>'
        assert f"<li>{link}</li>" in text and f"<li>{link} <code>{did}</code></li>" in text
        assert f"<li><code>{follow[2]}</code></li>" in text
        # A daemon serves /api/follow: the page offers the follow form (no token in it).
        assert 'id="follow-form"' in text and 'name="token" type="password"' in text
        assert load_or_create_token(ws.root) not in text

    run(main())
