"""The node HTTP API: simple protocol paths, hostile input, uploads, push, JSON endpoints."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from node.http.api import HttpApiConfig
from node.http.auth import bearer_headers, load_or_create_token
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore
from p2p.http.source import BLOCK_FRAMES_MEDIA_TYPE, encode_frame, push_dataset
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import (
    add_slices,
    make_dataset,
    new_workspace,
    raw_http,
    serve_workspace,
)

TIMEOUT_S = 60


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    w = new_workspace(tmp_path / "node")
    make_dataset(w, "prices", tmp_path / "files", 2, checkpoints=True)
    return w


def auth(ws: Workspace) -> dict[str, str]:
    """The ``Authorization`` header the node serving ``ws`` wants for writes."""
    return bearer_headers(load_or_create_token(ws.root))


def pending(ws: Workspace) -> list[str]:
    return [f for _r, _d, files in os.walk(ws.root) for f in files if f.startswith(".pending")]


def test_simple_transfer_protocol_paths(ws: Workspace) -> None:
    ds = ws.get("prices")
    did = ws.resolve("prices").id
    head = ds.head()
    assert head is not None
    data_h = next(iter(ds.layout.data.iter_hashes()))
    cp_h = next(iter(ds.layout.checkpoints.iter_hashes()))

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            for prefix in (f"{url}/prices/", f"{url}/{did.as_multibase()}/"):
                async with s.get(prefix + "refs/head") as r:
                    assert r.status == 200 and await r.read() == str(head).encode()
                async with s.get(prefix + f"blocks/{head}") as r:
                    assert await r.read() == ds.layout.blocks.get(head)
                async with s.get(prefix + f"data/{data_h}") as r:
                    assert await r.read() == ds.layout.data.get(data_h)
                async with s.get(prefix + f"checkpoints/{cp_h}") as r:
                    assert await r.read() == ds.layout.checkpoints.get(cp_h)
                async with s.get(prefix + "refs/head.sig") as r:
                    record = HeadRecord.from_json(await r.read())
                    assert record.head == head and record.dataset_id == did
                async with s.get(prefix + "refs/other") as r:
                    assert r.status == 404
                async with s.get(prefix + f"blocks/{Multihash.sha3_256(b'none')}") as r:
                    assert r.status == 404
                async with s.get(prefix + f"data/{Multihash.sha3_256(b'none')}") as r:
                    assert r.status == 404
                async with s.get(prefix + "blocks", params={"head": str(head)}) as r:
                    assert r.headers["Content-Type"].startswith(BLOCK_FRAMES_MEDIA_TYPE)
                    assert len(await r.read()) > 100
            async with s.get(f"{url}/missing/refs/head") as r:
                assert r.status == 404

    run(main())


@pytest.mark.parametrize(
    "line",
    [
        "GET /prices/blocks/..%2f..%2fetc",
        "GET /prices/blocks/..%2F..%2F..%2Fetc%2Fpasswd",
        "GET /prices/data/..",
        "GET /prices/data/%2e%2e",
        "GET /../../etc/passwd",
        "GET /prices/../../../etc/passwd",
        "GET /prices/data/%00",
        "GET /prices/data/..%5c..%5cetc",
        "GET /prices/blocks/not-a-hash",
        "GET /prices/data/f1620",
        "GET /prices/data/f1220" + "00" * 32,
        "GET /prices/checkpoints/" + "a" * 300,
        "GET /bad%20name/refs/head",
        "GET /prices/blocks?head=../../x",
        "PUT /prices/data/..%2f..%2fx",
    ],
)
def test_hostile_paths_and_hashes_get_400(ws: Workspace, line: str) -> None:
    async def main() -> tuple[int, bytes]:
        async with serve_workspace(ws) as url:
            return await raw_http(url, line)

    status, body = run(main())
    assert status == 400, (line, status, body)
    assert b"root:" not in body


def test_put_object_streams_into_quarantine(ws: Workspace, tmp_path: Path) -> None:
    ds = ws.get("prices")
    content = b"new object bytes" * 1000
    h = Multihash.sha3_256(content)

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession(headers=auth(ws)) as s:
            base = f"{url}/prices/data/{h}"
            # Wrong content for the hash.
            async with s.put(base, data=b"x" * len(content)) as r:
                assert r.status == 400
            assert not ds.layout.data.has(h)

            # Chunked body without Content-Length.
            async def gen() -> Any:
                yield content

            async with s.put(base, data=gen()) as r:
                assert r.status == 411
            # Too large for the configured limit.
        small = HttpApiConfig(max_put_object_size=10)
        async with (
            serve_workspace(ws, small) as url2,
            aiohttp.ClientSession(headers=auth(ws)) as s,
            s.put(f"{url2}/prices/data/{h}", data=content) as r,
        ):
            assert r.status == 413
        async with serve_workspace(ws) as url, aiohttp.ClientSession(headers=auth(ws)) as s:
            for kind in ("data", "checkpoints"):
                async with s.put(f"{url}/prices/{kind}/{h}", data=content) as r:
                    assert r.status == 201
        disabled = HttpApiConfig(allow_put=False)
        async with (
            serve_workspace(ws, disabled) as url3,
            aiohttp.ClientSession(headers=auth(ws)) as s,
            s.put(f"{url3}/prices/data/{h}", data=content) as r,
        ):
            assert r.status == 403

    run(main())
    assert ds.layout.data.get(h) == content
    assert ds.layout.checkpoints.get(h) == content
    assert pending(ws) == []


def test_push_creates_and_updates_only_with_owner_signature(tmp_path: Path) -> None:
    owner = new_workspace(tmp_path / "owner")
    node = new_workspace(tmp_path / "node")
    ds = make_dataset(owner, "prices", tmp_path / "f", 2, checkpoints=True)
    did = owner.resolve("prices").id

    async def main() -> None:
        async with serve_workspace(node) as url, aiohttp.ClientSession(headers=auth(node)) as s:
            r1 = await push_dataset(owner, "prices", url, session=s)
            assert r1.old_head is None and r1.blocks_pushed == 4 and r1.objects_uploaded == 4
            assert node.get("prices").head() == ds.head()
            add_slices(ds, tmp_path / "g", 1)
            r2 = await push_dataset(owner, "prices", url, session=s)
            assert r2.blocks_pushed == 1 and r2.objects_uploaded == 1
            r3 = await push_dataset(owner, "prices", url, session=s)
            assert r3.blocks_pushed == 0
            assert node.get("prices").head() == ds.head()

            # Someone without the key tries to move the head.
            add_slices(ds, tmp_path / "h", 1)
            head_before = node.get("prices").head()
            new_h, raw, block = next(iter(ds.iter_blocks()))
            mallory = KeyPair.generate()
            forged = HeadRecord(
                did,
                new_h,
                block.sequence_number,
                block.system_time,
                sign_head(mallory, new_h, block.sequence_number, block.system_time).signature,
            )
            push_url = f"{url}/{did.as_multibase()}/push"
            body = encode_frame(forged.to_json()) + encode_frame(raw)
            async with s.post(push_url, data=body) as r:
                assert r.status == 403
            # A record validly signed by another dataset key.
            other = sign_head(mallory, new_h, block.sequence_number, block.system_time)
            async with s.post(
                push_url, data=encode_frame(other.to_json()) + encode_frame(raw)
            ) as r:
                assert r.status == 403
            # Unsigned (no record frame at all).
            async with s.post(push_url, data=encode_frame(raw)) as r:
                assert r.status in (400, 403)
            assert node.get("prices").head() == head_before
            # A token holder may upload objects (content-addressed): that moves nothing.
            for kind, store in (("data", ds.layout.data), ("checkpoints", ds.layout.checkpoints)):
                for oh in store.iter_hashes():
                    async with s.put(f"{url}/prices/{kind}/{oh}", data=store.get(oh)) as r:
                        assert r.status == 201
            assert node.get("prices").head() == head_before
            # Replay of the previous (valid) record with the new block: refused.
            assert r2.records
            replay = encode_frame(r2.records[-1].to_json()) + encode_frame(raw)
            async with s.post(push_url, data=replay) as r:
                assert r.status in (403, 409)
            assert node.get("prices").head() == head_before
            r4 = await push_dataset(owner, "prices", url, session=s)
            assert r4.blocks_pushed == 1

    run(main())
    assert node.get("prices").head() == ds.head()
    assert verify_integrity(node.get("prices")).ok
    held = HeadStore.for_workspace(node.root).get(did)
    assert held is not None and held.head == ds.head()
    assert not node.keys.has(did)


def test_push_disabled_and_bad_bodies(ws: Workspace) -> None:
    async def main() -> None:
        async with (
            serve_workspace(ws, HttpApiConfig(allow_push=False)) as url,
            aiohttp.ClientSession(headers=auth(ws)) as s,
            s.post(f"{url}/prices/push", data=b"") as r,
        ):
            assert r.status == 403
        async with serve_workspace(ws) as url, aiohttp.ClientSession(headers=auth(ws)) as s:
            for body in (b"", b"\x00\x00", b"\xff\xff\xff\xff" + b"x", encode_frame(b"{}")):
                async with s.post(f"{url}/prices/push", data=body) as r:
                    assert r.status in (400, 403), body

    run(main())


def test_json_endpoints(ws: Workspace) -> None:
    peers = [{"peerId": "12D3KooWtest", "addrs": ["/ip4/127.0.0.1/tcp/1"]}]

    async def main() -> None:
        async with (
            serve_workspace(ws, peers=lambda: peers, status=lambda: {"peerId": "me"}) as url,
            aiohttp.ClientSession() as s,
        ):
            async with s.get(f"{url}/api/status") as r:
                doc = await r.json()
                assert doc["datasets"] == 1 and doc["peerId"] == "me"
            async with s.get(f"{url}/api/datasets") as r:
                rows = await r.json()
                assert rows[0]["alias"] == "prices" and rows[0]["owned"] is True
                assert rows[0]["head"] == str(ws.get("prices").head())
            async with s.get(f"{url}/api/peers") as r:
                assert await r.json() == peers
        async with (
            serve_workspace(ws) as url,
            aiohttp.ClientSession() as s,
            s.get(f"{url}/api/peers") as r,
        ):
            assert await r.json() == []

    run(main())


def test_ingest_refused_for_replicas(tmp_path: Path, ws: Workspace) -> None:
    replica = new_workspace(tmp_path / "replica")
    did = ws.resolve("prices").id

    async def main() -> None:
        from p2p.http.source import HttpSource, dataset_base_url
        from p2p.sync import pull_dataset

        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            src = HttpSource(dataset_base_url(url, "prices"), s)
            await pull_dataset(
                replica, src, alias="prices", head_record=await src.get_head_record()
            )
        async with (
            serve_workspace(replica) as url,
            aiohttp.ClientSession(headers=auth(replica)) as s,
            s.post(f"{url}/prices/ingest", data=b"a,b\n1,2\n") as r,
        ):
            assert r.status == 422  # ReplicaReadOnly: a rule refuses it (node.ownership)
            assert "replica" in json.loads(await r.read())["error"]
        # The owner's dataset has no push source: the pipeline says so (404).
        async with (
            serve_workspace(ws) as url,
            aiohttp.ClientSession(headers=auth(ws)) as s,
            s.post(f"{url}/prices/ingest", data=b"a,b\n1,2\n") as r,
        ):
            assert r.status == 404

    run(main())
    assert replica.resolve("prices").id == did


PUSH_SOURCE = """\
kind: DatasetSnapshot
version: 1
content:
  name: readings
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: NdJson
        ddlSchema: ["event_time TIMESTAMP", "v BIGINT"]
      merge:
        kind: Append
"""


def test_push_ingest_over_http_and_its_errors(tmp_path: Path, ws: Workspace) -> None:
    """A body that does not fit the source is a 400 naming the request body (not the
    node's temporary file) and commits nothing; a good one commits its records."""
    from node.cli import main as odf

    manifest = tmp_path / "readings.yaml"
    manifest.write_text(PUSH_SOURCE)
    assert odf(["-w", str(ws.root.parent), "add", str(manifest)]) == 0
    head = ws.get("readings").head()

    async def main() -> None:
        async with serve_workspace(ws) as url, aiohttp.ClientSession(headers=auth(ws)) as s:
            bad = b'{"event_time": "not a time", "v": 1}\n'
            async with s.post(f"{url}/readings/ingest?format=ndjson", data=bad) as r:
                assert r.status == 400
                error = json.loads(await r.read())["error"]
                assert error.startswith("request body") and "odf-ingest" not in error, error
            assert ws.get("readings").head() == head
            good = b'{"event_time": "2024-01-01T00:00:00Z", "v": 7}\n'
            async with s.post(f"{url}/readings/ingest?format=ndjson", data=good) as r:
                assert r.status == 200, await r.read()
                body = json.loads(await r.read())
                assert body["numRecords"] == 1 and body["oldHead"] == str(head)
            assert str(ws.get("readings").head()) == body["newHead"]
            # curl --data-binary sends a form content type: the source's format is used.
            later = b'{"event_time": "2024-01-02T00:00:00Z", "v": 8}\n'
            form = {"Content-Type": "application/x-www-form-urlencoded"}
            async with s.post(f"{url}/readings/ingest", data=later, headers=form) as r:
                assert r.status == 200, await r.read()
                assert json.loads(await r.read())["numRecords"] == 1

    run(main())
