"""The smart pull server's answer cache: bounds, eviction, head changes, and pulls served
from it over a real server on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fbs.multiformats import Multihash
from node.http.api import HttpApiConfig
from p2p.smart_transfer.client import SmartSource
from p2p.smart_transfer.messages import TransferPlan
from p2p.smart_transfer.plan_cache import (
    MAX_PLAN_CACHE_BYTES,
    MAX_PLAN_CACHE_ENTRIES,
    PLAN_CACHE,
    CachedPull,
    PlanCache,
    PullKey,
)
from p2p.sync import PullResult, pull_dataset
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve_workspace

CONFIG = HttpApiConfig(token="smart-plan-cache-test-token-0123456789")
PLAN = TransferPlan(
    num_blocks=1, num_objects=0, num_records=0, bytes_in_raw_blocks=1, bytes_in_raw_objects=0
)


def key(n: int, dataset: str = "/ws/datasets/a") -> PullKey:
    return PullKey(dataset, Multihash.sha3_256(str(n).encode()), None, False)


def test_limits_are_64_mib_and_256_answers() -> None:
    assert MAX_PLAN_CACHE_BYTES == 64 << 20 and MAX_PLAN_CACHE_ENTRIES == 256


def test_least_recently_used_answer_goes_first_beyond_the_entry_bound() -> None:
    cache = PlanCache(max_bytes=1000, max_entries=2)
    cache.put(key(1), CachedPull(PLAN, "a"))
    cache.put(key(2), CachedPull(PLAN, "b"))
    assert cache.get(key(1)) == CachedPull(PLAN, "a")  # 1 is now the most recent
    cache.put(key(3), CachedPull(PLAN, "c"))
    assert cache.get(key(2)) is None
    assert cache.get(key(1)) is not None and cache.get(key(3)) is not None
    assert len(cache) == 2 and cache.bytes == 2


def test_messages_are_bounded_by_bytes_and_an_oversized_one_is_not_kept() -> None:
    cache = PlanCache(max_bytes=10, max_entries=100)
    cache.put(key(1), CachedPull(PLAN, "x" * 6))
    cache.put(key(2), CachedPull(PLAN, "y" * 4))
    assert cache.bytes == 10 and len(cache) == 2
    cache.put(key(3), CachedPull(PLAN, "z" * 3))  # evicts 1 (the oldest), 7 bytes left
    assert cache.get(key(1)) is None and cache.bytes == 7
    cache.put(key(4), CachedPull(PLAN, "w" * 11))
    assert cache.get(key(4)) is None and cache.bytes == 7 and len(cache) == 2


def test_a_plan_without_its_message_counts_no_bytes_and_is_replaced_by_the_full_answer() -> None:
    cache = PlanCache(max_bytes=10, max_entries=10)
    cache.put(key(1), CachedPull(PLAN))
    assert cache.bytes == 0 and cache.get(key(1)) == CachedPull(PLAN)
    cache.put(key(1), CachedPull(PLAN, "abc"))
    assert cache.bytes == 3 and len(cache) == 1


def test_a_head_change_drops_that_datasets_answers_for_other_heads_only() -> None:
    cache = PlanCache()
    old, new, other = key(1), key(2), key(1, dataset="/ws/datasets/b")
    for k in (old, new, other):
        cache.put(k, CachedPull(PLAN, "m"))
    cache.forget_other_heads("/ws/datasets/a", new.head)
    assert cache.get(old) is None
    assert cache.get(new) is not None and cache.get(other) is not None
    assert cache.bytes == 2


# -- over a real server -----------------------------------------------------------------------


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def smart_pull(dest: Workspace, url: str, *, signed: bool = True) -> PullResult:
    async with aiohttp.ClientSession() as session, SmartSource(url, session) as src:
        record = await src.get_head_record() if signed else None
        return await pull_dataset(dest, src, alias="prices", head_record=record)


def answers_for(ws: Workspace) -> dict[PullKey, CachedPull]:
    root = str(ws.get("prices").layout.root)
    return {k: v for k, v in PLAN_CACHE._entries.items() if k.dataset == root}


@pytest.fixture
def src(tmp_path: Path) -> Workspace:
    ws = new_workspace(tmp_path / "src")
    make_dataset(ws, "prices", tmp_path / "files", 4)
    return ws


def test_a_second_clone_of_the_same_head_is_answered_from_the_cache(
    src: Workspace, tmp_path: Path
) -> None:
    ds = src.get("prices")
    head = ds.head()
    seed = next(h for h, _r, b in ds.iter_blocks() if b.prev_block_hash is None)
    d2 = new_workspace(tmp_path / "d2")

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url:
            first = await smart_pull(new_workspace(tmp_path / "d1"), f"odf+{url}/prices")
            (entry,) = answers_for(src).values()
            assert entry.message is not None and entry.plan.num_blocks == first.blocks_fetched
            # The server no longer reads the blocks for this interval: with one of them
            # gone from its store, the second clone is still whole (and the client checks
            # every block it receives against the head, as ever). Unsigned: the server's
            # head record is signed over its chain state, which needs every block.
            ds.layout.blocks.delete(seed)
            second = await smart_pull(d2, f"odf+{url}/prices", signed=False)
            assert second.created and second.new_head == head == first.new_head
            assert second.blocks_fetched == first.blocks_fetched

    run(main())
    copy = d2.get("prices")
    assert copy.layout.blocks.has(seed) and verify_integrity(copy).ok


def test_a_moved_head_is_served_fresh_and_the_old_heads_answers_are_dropped(
    src: Workspace, tmp_path: Path
) -> None:
    dst = new_workspace(tmp_path / "dst")

    async def main() -> None:
        async with serve_workspace(src, CONFIG) as url:
            await smart_pull(dst, f"odf+{url}/prices")
            old = src.get("prices").head()
            add_slices(src.get("prices"), tmp_path / "more", 2)
            r = await smart_pull(dst, f"odf+{url}/prices")
            assert r.blocks_fetched == 2 and r.new_head == src.get("prices").head() != old
            assert {k.head for k in answers_for(src)} == {src.get("prices").head()}

    run(main())
    assert dst.get("prices").head() == src.get("prices").head()
