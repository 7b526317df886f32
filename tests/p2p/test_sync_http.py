"""Verified pull over HTTP between two workspaces, with honest and adversarial servers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from fbs.codec import block_hash
from fbs.keys import KeyPair
from p2p.errors import (
    InvalidHeadRecord,
    NotDescendant,
    PeerUnavailable,
    StaleHead,
)
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore
from p2p.http.source import HttpSource, dataset_base_url
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
)

TIMEOUT_S = 60


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def objects_of(ws: Workspace, alias: str) -> dict[str, bytes]:
    ds = ws.get(alias)
    out = {}
    for kind, store in (("data", ds.layout.data), ("cp", ds.layout.checkpoints)):
        for h in store.iter_hashes():
            out[f"{kind}/{h}"] = store.get(h)
    return out


def pending_files(ws: Workspace) -> list[str]:
    found = []
    for root, _dirs, files in os.walk(ws.root):
        found += [os.path.join(root, f) for f in files if f.startswith(".pending")]
    return found


async def pull_from(
    dest: Workspace, urls: list[str], alias: str = "prices", **kw: Any
) -> PullResult:
    async with aiohttp.ClientSession() as session:
        sources = [HttpSource(u, session, read_timeout_s=10) for u in urls]
        record = kw.pop("head_record", "auto")
        if record == "auto":
            record = await sources[0].get_head_record()
        return await pull_dataset(dest, sources, alias=alias, head_record=record, **kw)


def test_clone_then_incremental_update(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, dst, tmp = pair

    async def main() -> None:
        async with serve_workspace(src) as url:
            base = dataset_base_url(url, "prices")
            r1 = await pull_from(dst, [base])
            assert r1.created and r1.blocks_fetched == 5 and r1.objects_fetched == 6
            assert r1.head_record is not None
            assert dst.get("prices").head() == src.get("prices").head()
            add_slices(src.get("prices"), tmp / "more", 2)
            r2 = await pull_from(dst, [base])
            assert not r2.created and r2.blocks_fetched == 2 and r2.objects_fetched == 2
            r3 = await pull_from(dst, [base])
            assert r3.up_to_date and r3.blocks_fetched == 0

    run(main())
    assert dst.get("prices").head() == src.get("prices").head()
    assert objects_of(dst, "prices") == objects_of(src, "prices")
    assert verify_integrity(dst.get("prices")).ok
    # Raw block bytes are stored exactly as served.
    for h, raw, _b in src.get("prices").iter_blocks():
        assert dst.get("prices").layout.blocks.get(h) == raw
    held = HeadStore.for_workspace(dst.root).get(src.resolve("prices").id)
    assert held is not None and held.head == src.get("prices").head()
    assert not dst.keys.has(src.resolve("prices").id)  # a replica, not an owner


def test_simple_protocol_fallback_like_kamu(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, dst, _tmp = pair

    @web.middleware
    async def no_batch(request: web.Request, handler: Any) -> web.StreamResponse:
        # A kamu server: no batched endpoint and no signed heads.
        if request.path.endswith("/blocks") or request.path.endswith("/refs/head.sig"):
            return web.Response(status=404, text="not found")
        resp: web.StreamResponse = await handler(request)
        return resp

    from node.http.api import create_app

    app = create_app(src)
    app.middlewares.append(no_batch)

    async def main() -> bool | None:
        async with serve(app) as url, aiohttp.ClientSession() as session:
            source = HttpSource(dataset_base_url(url, "prices"), session)
            assert await source.get_head_record() is None
            result = await pull_dataset(dst, source, alias="prices")
            assert result.head_record is None and result.blocks_fetched == 5
            return source.batch_supported

    assert run(main()) is False
    assert dst.get("prices").head() == src.get("prices").head()
    assert verify_integrity(dst.get("prices")).ok


def _tamper_slice(how: str) -> Callable[[web.Request, bytes], bytes | None]:
    def tamper(request: web.Request, body: bytes) -> bytes | None:
        if "/data/" not in request.path:
            return None
        if how == "flip":
            return body[:-1] + bytes([body[-1] ^ 1])
        if how == "longer":
            return body + b"extra"
        if how == "shorter":
            return body[:-3]
        raise AssertionError(how)

    return tamper


def _tamper_block(request: web.Request, body: bytes) -> bytes | None:
    if request.path.endswith("/blocks") and len(body) > 8:
        return body[:-1] + bytes([body[-1] ^ 1])  # batched frames: last block damaged
    if "/blocks/" in request.path:
        return body[:-1] + bytes([body[-1] ^ 1])
    return None


@pytest.mark.parametrize("how", ["flip", "longer", "shorter"])
def test_bad_slice_alone_is_refused_and_nothing_visible(
    pair: tuple[Workspace, Workspace, Path], how: str
) -> None:
    src, dst, _tmp = pair

    async def main() -> None:
        async with serve(tampering_app(src, _tamper_slice(how))) as bad:
            with pytest.raises(PeerUnavailable):
                await pull_from(dst, [dataset_base_url(bad, "prices")])

    run(main())
    assert dst.list() == []  # no dataset appeared
    staged = list((dst.root / "staging").rglob("f1620*"))
    data_names = {p.name for p in staged if p.parent.name == "data"}
    src_data = {str(h) for h in src.get("prices").layout.data.iter_hashes()}
    assert data_names <= src_data  # only verified objects were ever named
    assert pending_files(dst) == []


@pytest.mark.parametrize("how", ["flip", "longer", "shorter"])
def test_bad_slice_source_dropped_honest_source_completes(
    pair: tuple[Workspace, Workspace, Path], how: str
) -> None:
    src, dst, _tmp = pair

    async def main() -> tuple[PullResult, str]:
        async with (
            serve(tampering_app(src, _tamper_slice(how))) as bad,
            serve_workspace(src) as good,
        ):
            bad_base = dataset_base_url(bad, "prices")
            result = await pull_from(
                dst, [bad_base, dataset_base_url(good, "prices")], objects_per_source=1
            )
            return result, bad_base

    result, bad_base = run(main())
    assert dst.get("prices").head() == src.get("prices").head()
    assert objects_of(dst, "prices") == objects_of(src, "prices")
    assert verify_integrity(dst.get("prices")).ok
    assert result.dropped == [bad_base] and list(result.penalties) == [bad_base]
    assert pending_files(dst) == []


def test_tampered_blocks(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, dst, _tmp = pair

    async def main() -> PullResult:
        async with serve(tampering_app(src, _tamper_block)) as bad, serve_workspace(src) as good:
            bad_base = dataset_base_url(bad, "prices")
            with pytest.raises(PeerUnavailable):
                await pull_from(dst, [bad_base])
            assert dst.list() == []
            return await pull_from(dst, [bad_base, dataset_base_url(good, "prices")])

    result = run(main())
    assert result.dropped and dst.get("prices").head() == src.get("prices").head()
    assert verify_integrity(dst.get("prices")).ok


def test_wrong_forged_replayed_and_lower_head_records(
    pair: tuple[Workspace, Workspace, Path],
) -> None:
    src, dst, tmp = pair
    did = src.resolve("prices").id
    state = src.get("prices").state()
    assert state is not None
    mallory = KeyPair.generate()

    async def main() -> None:
        async with serve_workspace(src) as url:
            base = dataset_base_url(url, "prices")
            # Forged: right dataset, wrong key.
            forged = HeadRecord(
                did,
                state.head,
                state.sequence_number,
                state.system_time,
                sign_head(mallory, state.head, state.sequence_number, state.system_time).signature,
            )
            with pytest.raises(InvalidHeadRecord):
                await pull_from(dst, [base], head_record=forged)
            # Validly signed by another dataset key: not this dataset.
            with pytest.raises(InvalidHeadRecord):
                await pull_from(
                    dst,
                    [base],
                    dataset_id=did,
                    head_record=sign_head(mallory, state.head, 4, state.system_time),
                )
            # Wrong sequence number for the head it names.
            key = src.keys.load(did)
            wrong_seq = sign_head(key, state.head, state.sequence_number + 3, state.system_time)
            with pytest.raises(InvalidHeadRecord, match="sequence"):
                await pull_from(dst, [base], head_record=wrong_seq)
            assert dst.list() == []
            first = await pull_from(dst, [base])
            old_record = first.head_record
            add_slices(src.get("prices"), tmp / "more", 1)
            await pull_from(dst, [base])
            # Replay of the old record / a lower sequence number: refused before any download.
            with pytest.raises(StaleHead):
                await pull_from(dst, [base], head_record=old_record)
            lower = sign_head(key, state.head, 1, state.system_time)
            with pytest.raises(StaleHead):
                await pull_from(dst, [base], head_record=lower)
            # Once signed heads were seen, an unsigned head is refused.
            with pytest.raises(InvalidHeadRecord, match="unsigned"):
                await pull_from(dst, [base], head_record=None)

    run(main())
    assert dst.get("prices").head() == src.get("prices").head()


def test_diverged_chain_is_not_descendant(tmp_path: Path) -> None:
    a = new_workspace(tmp_path / "a")
    b = new_workspace(tmp_path / "b")
    ds = make_dataset(a, "prices", tmp_path / "f", 1)

    async def main() -> None:
        async with serve_workspace(a) as url:
            base = dataset_base_url(url, "prices")
            await pull_from(b, [base], head_record=None)
            # The replica appends on its own (it could, without signed heads) ...
            add_slices(b.get("prices"), tmp_path / "g", 1)
            # ... and the owner appends something else.
            add_slices(ds, tmp_path / "h", 1, rows=3)
            with pytest.raises(NotDescendant):
                await pull_from(b, [base], head_record=None)

    run(main())


def test_interrupted_pull_resumes(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, dst, _tmp = pair
    served: list[str] = []

    def fail_after_first(request: web.Request, body: bytes) -> bytes | None:
        if "/data/" in request.path:
            served.append(request.path)
            if len(served) > 1:
                raise web.HTTPServiceUnavailable()
        return None

    async def main() -> PullResult:
        async with serve(tampering_app(src, fail_after_first)) as flaky:
            with pytest.raises(PeerUnavailable):
                await pull_from(dst, [dataset_base_url(flaky, "prices")], objects_per_source=1)
        assert dst.list() == []
        async with serve_workspace(src) as good:
            return await pull_from(dst, [dataset_base_url(good, "prices")])

    result = run(main())
    assert result.objects_present >= 1  # kept from the interrupted attempt
    assert result.objects_fetched + result.objects_present == 6
    assert verify_integrity(dst.get("prices")).ok
    assert not (dst.root / "staging" / f"pull-{result.dataset_id.as_multibase()}").exists()


def test_batched_blocks_are_verified_in_order(pair: tuple[Workspace, Workspace, Path]) -> None:
    src, _dst, _tmp = pair
    ds = src.get("prices")

    async def main() -> list[bytes]:
        async with serve_workspace(src) as url, aiohttp.ClientSession() as s:
            source = HttpSource(dataset_base_url(url, "prices"), s)
            head = ds.head()
            assert head is not None
            return await source.get_blocks(head, None)

    raws = run(main())
    expected = [raw for _h, raw, _b in ds.iter_blocks()]
    assert raws == expected  # newest first, down to the Seed
    assert block_hash(raws[0]) == ds.head()


class _CountingSource(HttpSource):
    """An HttpSource that records how many objects it downloads at once."""

    def __init__(self, *args: Any, parallel_objects: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.parallel_objects = parallel_objects
        self.in_flight = 0
        self.most = 0
        self.served = 0

    async def get_object(self, *args: Any, **kw: Any) -> bytes | None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.02)  # keep it in flight while the others are scheduled
            return await super().get_object(*args, **kw)
        finally:
            self.in_flight -= 1
            self.served += 1


def test_objects_split_across_sources_within_their_parallelism(tmp_path: Path) -> None:
    src = new_workspace(tmp_path / "a")
    dst = new_workspace(tmp_path / "b")
    make_dataset(src, "prices", tmp_path / "files", 6, checkpoints=True)

    async def go() -> tuple[PullResult, list[_CountingSource]]:
        async with serve_workspace(src) as url, aiohttp.ClientSession() as session:
            base = dataset_base_url(url, "prices")
            sources = [_CountingSource(base, session, parallel_objects=1) for _ in range(2)]
            record = await sources[0].get_head_record()
            result = await pull_dataset(
                dst, sources, alias="prices", head_record=record, objects_per_source=4
            )
            return result, sources

    result, sources = run(go())
    assert result.objects_fetched == 12  # 6 slices + 6 checkpoints
    assert all(s.most == 1 for s in sources)  # never more than a source asked for
    assert all(s.served >= 3 for s in sources)  # both sources did a share of the work
    assert objects_of(dst, "prices") == objects_of(src, "prices")


def test_concurrent_clones_of_one_dataset_do_not_clobber_each_other(
    pair: tuple[Workspace, Workspace, Path],
) -> None:
    # E.g. the node resuming a half-pulled clone while `odf pull` clones the same dataset:
    # both stage into staging/pull-<did>, serialized by a lock on that area.
    src, dst, _tmp = pair

    async def main() -> list[PullResult]:
        async with serve_workspace(src) as url:
            base = dataset_base_url(url, "prices")
            return list(await asyncio.gather(*(pull_from(dst, [base]) for _ in range(3))))

    results = run(main())
    assert sum(r.created for r in results) >= 1
    assert dst.get("prices").head() == src.get("prices").head()
    assert objects_of(dst, "prices") == objects_of(src, "prices")
    assert verify_integrity(dst.get("prices")).ok
    assert not pending_files(dst)
    assert [e.alias for e in dst.list()] == ["prices"]
