"""The transfer server's object routes and its cache of resolved dataset references.

Objects up to `INLINE_OBJECT_BYTES` are served from memory, hashed as read; larger ones
as files. Neither ever serves bytes that differ from the object's name. A request path's
dataset reference is resolved once and re-resolved when the dataset behind it changes.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fbs.multiformats import Multihash
from p2p.http.dataset_cache import ResolveCache
from p2p.http.server import INLINE_OBJECT_BYTES
from storage.errors import DatasetNotFound
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve_workspace

TIMEOUT_S = 60


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


async def _get(url: str, method: str = "GET") -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.request(method, url) as r:
        return r.status, await r.read()


def _slices(ws: Workspace, alias: str) -> list[tuple[Multihash, Path]]:
    store = ws.get(alias).layout.data
    return [(h, store.path_of(h)) for h in store.iter_hashes()]


def _damage(path: Path) -> None:
    """Flip the last byte in place (same size): only the hash can tell."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("pad", [0, 2 * INLINE_OBJECT_BYTES], ids=["inline", "file"])
def test_objects_are_served_whole_and_damaged_ones_never(tmp_path: Path, pad: int) -> None:
    ws = new_workspace(tmp_path / "node")
    make_dataset(ws, "prices", tmp_path / "files", 2, pad=pad)
    (h, path), (h2, path2) = _slices(ws, "prices")
    assert (path.stat().st_size <= INLINE_OBJECT_BYTES) == (pad == 0)
    _damage(path2)

    async def main() -> None:
        async with serve_workspace(ws) as url:
            base = f"{url}/prices/data/"
            assert await _get(base + h.to_multibase()) == (200, path.read_bytes())
            status, _body = await _get(base + h.to_multibase(), "HEAD")
            assert status == 200
            status, body = await _get(base + h2.to_multibase())
            assert status == 500 and path2.read_bytes() not in body
            missing = Multihash.sha3_256(b"never stored").to_multibase()
            assert (await _get(base + missing))[0] == 404

    run(main())


def test_a_symlinked_object_is_not_served(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "node")
    make_dataset(ws, "prices", tmp_path / "files", 1)
    [(h, path)] = _slices(ws, "prices")
    target = tmp_path / "elsewhere"
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)

    async def main() -> None:
        async with serve_workspace(ws) as url:
            assert (await _get(f"{url}/prices/data/{h.to_multibase()}"))[0] == 404

    run(main())


def test_a_deleted_and_recreated_dataset_is_resolved_again(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "node")
    first = make_dataset(ws, "prices", tmp_path / "files", 1)

    async def main() -> None:
        async with serve_workspace(ws) as url:
            head = f"{url}/prices/refs/head"
            assert await _get(head) == (200, str(first.head()).encode())
            ws.delete("prices")
            assert (await _get(head))[0] == 404
            second = ws.create_dataset("prices")
            add_slices(second, tmp_path / "more", 1)
            assert await _get(head) == (200, str(second.head()).encode())
            assert second.head() != first.head()

    run(main())


def test_the_cache_confirms_each_hit_and_stays_bounded(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "node")
    for name in ("a", "b", "c"):
        ws.create_dataset(name)
    cache = ResolveCache(max_entries=2)
    a = cache.resolve(ws, "a")
    assert cache.resolve(ws, "a") is a  # kept
    cache.resolve(ws, "b")
    cache.resolve(ws, "c")
    assert len(cache) == 2
    did = ws.resolve("c").id
    ws.delete("c")
    with pytest.raises(DatasetNotFound):
        cache.resolve(ws, "c")
    with pytest.raises(DatasetNotFound):
        cache.resolve(ws, did)
    assert len(cache) == 1
