"""Attestation HTTP routes on a real aiohttp server on 127.0.0.1 (root dataset, no engine)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from fbs.keys import KeyPair
from fbs.model import DatasetKind, DatasetSnapshot
from fbs.multiformats import Multihash
from node.http.api import create_app
from node.http.attestations import MAX_POST_BODY_BYTES, add_attestation_routes
from p2p.attestation import Verdict
from p2p.attestation_store import AcceptResult, AttestationStore
from storage.workspace import Workspace
from tests.node.conftest import RootWriter
from tests.p2p.sync_helpers import serve
from tests.p2p.test_attestation_store import attest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    ws = Workspace.init(tmp_path / "ws")
    ws.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=()))
    (tmp_path / "slices").mkdir()
    writer = RootWriter(ws, "src", tmp_path / "slices")
    writer.append([("a", 1)])
    writer.append([("b", 2)])
    return ws


async def test_post_and_get_on_per_dataset_routes(ws: Workspace) -> None:
    store = AttestationStore.for_workspace(ws)
    seen: list[AcceptResult] = []

    async def on_accepted(result: AcceptResult) -> None:
        seen.append(result)

    app = web.Application()
    add_attestation_routes(app, store, ws, on_accepted=on_accepted)
    did = ws.resolve("src").id
    head = ws.get("src").head()
    assert head is not None
    seq = ws.get("src").get_block(head)[1].sequence_number
    key = KeyPair.generate()
    good = attest(key, did, head, seq, Verdict.DIVERGED, "newData.logicalHash")
    ahead = attest(key, did, Multihash.sha3_256(b"next"), seq + 1)
    foreign = attest(key, did, Multihash.sha3_256(b"fork"), seq)
    async with serve(app) as url, aiohttp.ClientSession() as http:
        by_alias = f"{url}/src/attestations"
        async with http.post(by_alias, data=good.to_json()) as resp:
            assert resp.status == 201
            assert (await resp.json())["digest"] == good.digest
        async with http.post(by_alias, data=good.to_json()) as resp:
            assert resp.status == 409  # replay
        async with http.post(by_alias, data=ahead.to_json()) as resp:
            assert resp.status == 202  # queued until the block arrives
        async with http.post(by_alias, data=foreign.to_json()) as resp:
            assert resp.status == 422
        async with http.post(by_alias, data=b"x" * (MAX_POST_BODY_BYTES + 1)) as resp:
            assert resp.status == 413
        batch = [good.to_dict(), {"verdict": 1}, ahead.to_dict()]
        async with http.post(f"{url}/{did.as_multibase()}/attestations", json=batch) as resp:
            assert resp.status == 200
            statuses = [r["status"] for r in (await resp.json())["results"]]
        assert statuses == ["duplicate", "invalid", "duplicate"]
        async with http.get(by_alias) as resp:
            doc = await resp.json()
        assert doc["disputed"] is True and doc["pending"] == 1
        assert [a["verdict"] for a in doc["attestations"]] == ["diverged"]
        async with http.get(by_alias, params={"block": "f1620" + "ab" * 32}) as resp:
            assert (await resp.json())["attestations"] == []
        async with http.get(by_alias, params={"block": "nope"}) as resp:
            assert resp.status == 400
        async with http.get(f"{url}/no..pe/attestations") as resp:
            assert resp.status == 400
    assert [r.attestation for r in seen] == [good, ahead]


async def test_api_routes_work_next_to_the_node_api(ws: Workspace) -> None:
    store = AttestationStore.for_workspace(ws)
    app = create_app(ws)
    add_attestation_routes(app, store, ws)  # after the node API's catch-all route
    async with serve(app) as url, aiohttp.ClientSession() as http:
        async with http.get(f"{url}/api/attestations/src") as resp:
            assert resp.status == 200
            assert (await resp.json())["attestations"] == []
        async with http.get(f"{url}/src/refs/head") as resp:
            assert resp.status == 200  # the node API is untouched
