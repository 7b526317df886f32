"""The row cache the list page, the live updates and ``/api/datasets`` share: a row is
read again when its head moves and only then; the signed head follows its own file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from fbs.timestamp import Timestamp
from node.web.rows import RowCache, SignedHeads, api_rows
from p2p.head_record import sign_head
from p2p.head_store import HeadStore
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve_workspace


def test_rows_are_read_again_only_when_the_head_moves(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "node")
    ds = make_dataset(ws, "prices", tmp_path / "files", 2)
    make_dataset(ws, "other", tmp_path / "other", 1)
    cache = RowCache()
    signed = SignedHeads(HeadStore.for_workspace(ws.root))
    first = {r.alias: r for r in cache.rows(ws)[0]}
    again = {r.alias: r for r in cache.rows(ws)[0]}
    assert all(again[a] is first[a] for a in first)  # the same values: nothing re-read
    add_slices(ds, tmp_path / "files", 1)
    moved = {r.alias: r for r in cache.rows(ws)[0]}
    assert moved["other"] is first["other"]
    assert moved["prices"] is not first["prices"]
    assert moved["prices"].records == first["prices"].records + 5
    assert moved["prices"].head == ds.head().to_multibase()
    doc = {r["alias"]: r for r in api_rows(ws, cache, signed)}
    assert doc["prices"]["head"] == moved["prices"].head
    assert doc["prices"]["sequenceNumber"] == moved["prices"].sequence_number
    assert doc["prices"]["signedHead"] is None


def test_signed_head_shows_when_accepted_without_a_head_move(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "node")
    ds = make_dataset(ws, "prices", tmp_path / "files", 1)
    store = HeadStore.for_workspace(ws.root)
    cache, signed = RowCache(), SignedHeads(store)
    assert api_rows(ws, cache, signed)[0]["signedHead"] is None
    state = ds.state()
    assert state is not None
    did = ws.resolve("prices").id
    key = ws.keys.load(did)
    record = sign_head(key, state.head, state.sequence_number, Timestamp.now(), "prices")
    store.accept(record, is_descendant=lambda _old, _new: True, expected_dataset_id=did)
    assert api_rows(ws, cache, signed)[0]["signedHead"] == record.to_dict()


def test_api_and_list_page_see_a_commit_by_another_writer(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "node")
    ds = make_dataset(ws, "prices", tmp_path / "files", 1)

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            async with s.get(url + "/api/datasets") as r:
                assert (await r.json())[0]["head"] == ds.head().to_multibase()
            add_slices(ds, tmp_path / "files", 1)  # a commit by another writer
            async with s.get(url + "/api/datasets") as r:
                row = (await r.json())[0]
            assert row["head"] == ds.head().to_multibase() and row["records"] == 10
            async with s.get(url + "/ui/") as r:
                assert ds.head().to_multibase() in await r.text()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_row_read_by_one_thread_is_not_read_again_by_another(tmp_path: Path) -> None:
    import threading

    ws = new_workspace(tmp_path / "node")
    for name in ("a", "b", "c", "d"):
        make_dataset(ws, name, tmp_path / name, 1)
    cache = RowCache()
    seen: list[dict[str, object]] = []
    threads = [
        threading.Thread(target=lambda: seen.append({r.alias: r for r in cache.rows(ws)[0]}))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Every thread got the very same row values: each row was read once.
    assert all(s["a"] is seen[0]["a"] and s["d"] is seen[0]["d"] for s in seen)
