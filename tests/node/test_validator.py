"""Validators on the real Spark engine and a real loopback network.

An honest publisher and a cheating one (a derivative slice whose hashes are
self-consistent but whose records do not follow from the transform) are replicated
over HTTP to a validator node with two validator keys, and to a third node. The
validators' attestations reach the third node by POST over HTTP; there the cheating
dataset is disputed and `verify_with_trust(..., 2)` fails for it only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from engine.client import EngineClient
from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from node.http.api import create_app
from node.http.attestations import add_attestation_routes
from node.http.auth import bearer_headers, read_token
from node.transform import (
    pull_derivative,
)
from node.validation.trust import verify_with_trust
from node.validation.validator import Validator, load_or_create_validator_key
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import AttestationStore
from p2p.errors import IdentityError
from p2p.http.source import HttpSource, dataset_base_url
from p2p.sync import pull_dataset
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative, commit_forged
from tests.p2p.sync_helpers import serve

pytestmark = [pytest.mark.timeout(600)]

MakeRoot = Callable[[str], RootWriter]
QUERY = "SELECT event_time, city, population * 10 AS p FROM src WHERE population > 1"


def publish(ws: Workspace, make_root: MakeRoot, engine: EngineClient) -> None:
    """Root ``src``, honest derivative ``honest``, cheating derivative ``cheat`` (2 blocks each)."""
    src = make_root("src")
    src.append([("a", 5), ("b", 6)])
    add_derivative(ws, "honest", ["src"], QUERY)
    add_derivative(ws, "cheat", ["src"], QUERY)
    pull_derivative(ws, "honest", engine=engine)
    pull_derivative(ws, "cheat", engine=engine)
    src.append([("c", 7), ("d", 8)])
    pull_derivative(ws, "honest", engine=engine)
    commit_forged(ws, "cheat", engine)
    assert verify_integrity(ws.get("cheat")).ok  # the forgery is self-consistent


async def replicate(url: str, dest: Workspace, aliases: list[str]) -> None:
    async with aiohttp.ClientSession() as session:
        for alias in aliases:
            source = HttpSource(dataset_base_url(url, alias), session)
            await pull_dataset(dest, source, alias=alias)


async def start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.mark.anyio
async def test_honest_and_cheating_publishers_two_validators_third_node(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient, tmp_path: Path
) -> None:
    publish(ws, make_root, engine)
    names = ["src", "honest", "cheat"]
    ws_val = Workspace.init(tmp_path / "validator")
    ws_obs = Workspace.init(tmp_path / "observer")
    async with serve(create_app(ws)) as pub_url:
        await replicate(pub_url, ws_val, names)
        await replicate(pub_url, ws_obs, names)

    # -- two validators check everything on their own engine ------------------------------
    keys = [load_or_create_validator_key(ws_val), KeyPair.generate()]
    assert load_or_create_validator_key(ws_val).dataset_id == keys[0].dataset_id
    validators = [Validator(ws_val, k, engine=engine) for k in keys]
    for v in validators:
        assert v.backlog("cheat") == 2 and v.backlog("src") == 2
        honest = v.validate("honest")
        assert [a.verdict for a in honest.attestations] == [Verdict.REPRODUCED] * 2
        assert honest.backlog == 0
        cheat = v.validate("cheat")
        assert [a.verdict for a in cheat.attestations] == [Verdict.REPRODUCED, Verdict.DIVERGED]
        diverged = cheat.attestations[1]
        assert diverged.detail == "newData.logicalHash"
        assert diverged.block_hash == ws_val.get("cheat").head()
        assert diverged.engine == v.engine_identity
        root = v.validate("src")
        assert root.count(Verdict.REPRODUCED) == 2 and root.backlog == 0
        assert v.validate("cheat").attestations == ()  # nothing left to check
    store_val = AttestationStore.for_workspace(ws_val)
    assert store_val.is_disputed(ws_val.resolve("cheat").id)
    assert not store_val.is_disputed(ws_val.resolve("honest").id)

    # -- the third node receives them over HTTP -------------------------------------------
    store_obs = AttestationStore.for_workspace(ws_obs)
    app = create_app(ws_obs)
    add_attestation_routes(app, store_obs, ws_obs)
    runner, url = await start(app)
    try:
        # Posting is a write: it needs the node's bearer token (`node.http.auth`).
        token = bearer_headers(read_token(ws_obs.root))
        async with aiohttp.ClientSession(headers=token) as http:
            for alias in names:
                did = ws_val.resolve(alias).id
                items = [a.to_dict() for a in store_val.attestations(did)]
                async with http.post(f"{url}/api/attestations/{alias}", json=items) as resp:
                    assert resp.status == 200
                    doc = await resp.json()
                assert [r["status"] for r in doc["results"]] == ["accepted"] * len(items)
            async with http.get(f"{url}/api/attestations/cheat") as resp:
                assert resp.status == 200
                cheat_doc = await resp.json()
            assert cheat_doc["disputed"] is True
            cheat_head = ws_obs.get("cheat").head()
            assert cheat_head is not None
            assert cheat_doc["disputedBlocks"] == [cheat_head.to_multibase()]
            assert len(cheat_doc["attestations"]) == 4
            async with http.get(f"{url}/api/attestations/honest") as resp:
                assert (await resp.json())["disputed"] is False

            # A replayed attestation, a forged one, malformed JSON: all refused.
            one = store_val.attestations(ws_val.resolve("honest").id)[0]
            post = f"{url}/api/attestations/honest"
            async with http.post(post, data=one.to_json()) as resp:
                assert resp.status == 409
            forged = dataclasses.replace(
                one,
                signature=sign_attestation(
                    KeyPair.generate(),
                    dataset_id=one.dataset_id,
                    block_hash=one.block_hash,
                    sequence_number=one.sequence_number,
                    verdict=Verdict.DIVERGED,
                    detail="newData.logicalHash",
                    engine=one.engine,
                ).signature,
                verdict=Verdict.DIVERGED,
                detail="newData.logicalHash",
            )
            async with http.post(post, data=forged.to_json()) as resp:
                assert resp.status == 400
            async with http.post(post, data=b'{"verdict": "reproduced"}') as resp:
                assert resp.status == 400
            async with http.post(f"{url}/api/attestations/cheat", data=one.to_json()) as resp:
                assert resp.status == 400  # names another dataset than the path
            async with http.post(f"{url}/api/attestations/nope", data=one.to_json()) as resp:
                assert resp.status == 404
    finally:
        await runner.cleanup()
    assert not store_obs.is_disputed(ws_obs.resolve("honest").id)

    # -- trust: two validators vouch for the honest head, not the cheat's -----------------
    honest_report = verify_with_trust(ws_obs, "honest", 2)
    assert honest_report.ok, honest_report.failures
    assert set(honest_report.validators) == {k.dataset_id for k in keys}
    assert not verify_with_trust(ws_obs, "honest", 3).ok
    cheat_report = verify_with_trust(ws_obs, "cheat", 2)
    assert not cheat_report.ok and cheat_report.disputed
    assert any("diverged" in f for f in cheat_report.failures)
    # Only trusted validators count: one trusted key is not two.
    assert not verify_with_trust(ws_obs, "honest", 2, trusted=[keys[0].dataset_id]).ok


def test_missing_input_is_could_not_check_and_retried(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient, tmp_path: Path
) -> None:
    src = make_root("src")
    src.append([("a", 5), ("b", 6)])
    add_derivative(ws, "d", ["src"], QUERY)
    pull_derivative(ws, "d", engine=engine)
    # Move the input away: the validator cannot rebuild the transform's inputs.
    entry = ws.resolve("src")
    hidden = tmp_path / "hidden-src"
    entry.path.rename(hidden)
    ws.rebuild_index()
    v = Validator(ws, KeyPair.generate(), engine=engine)
    run = v.validate("d")
    (att,) = run.attestations
    assert att.verdict is Verdict.COULD_NOT_CHECK and "missing input" in att.detail
    assert v.backlog("d") == 0  # checked, with a reason: not silently skipped
    # The input comes back: a retry turns it into a definitive verdict.
    hidden.rename(entry.path)
    ws.rebuild_index()
    again = v.validate("d", retry_could_not_check=True)
    assert [a.verdict for a in again.attestations] == [Verdict.REPRODUCED]
    store = AttestationStore.for_workspace(ws)
    assert store.validator_conflicts(ws.resolve("d").id) == []


def test_pinned_engine_identity_mismatch_is_not_called_divergence(
    ws: Workspace, make_root: MakeRoot, engine: EngineClient
) -> None:
    src = make_root("src")
    src.append([("a", 5)])
    add_derivative(ws, "old", ["src"], QUERY, version="spark (odf-node 0.0.1, Apache Spark 3.5.0)")
    pull_derivative(ws, "old", engine=engine)
    src.append([("b", 6)])
    commit_forged(ws, "old", engine)
    run = Validator(ws, KeyPair.generate(), engine=engine).validate("old")
    verdicts = [(a.verdict, a.detail) for a in run.attestations]
    assert verdicts[0] == (Verdict.REPRODUCED, "")  # same query, same data: reproduces
    assert verdicts[1][0] is Verdict.COULD_NOT_CHECK
    assert "engine identity differs" in verdicts[1][1] and "newData.logicalHash" in verdicts[1][1]


def test_validator_key_file_is_private_and_stable(ws: Workspace) -> None:
    key = load_or_create_validator_key(ws)
    path = Path(ws.root) / "p2p" / "validator.key"
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    with pytest.raises(IdentityError, match="chmod"):
        load_or_create_validator_key(ws)
    path.chmod(0o600)
    assert load_or_create_validator_key(ws).dataset_id == key.dataset_id
    att = sign_attestation(
        key,
        dataset_id=KeyPair.generate().dataset_id,
        block_hash=Multihash.sha3_256(b"x"),
        sequence_number=1,
        verdict=Verdict.REPRODUCED,
        engine="spark",
    )
    obj = json.loads(att.to_json())
    assert obj["validator"] == key.dataset_id.to_did_key()
    assert Attestation.from_json(att.to_json()) == att
