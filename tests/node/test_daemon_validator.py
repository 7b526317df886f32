"""Validator peers and attestation handling inside the node daemon (root datasets: no engine).

Daemons run in this process on loopback. The Spark scenario (derivatives replayed by two
validators, a cheating publisher) is tests/p2p/test_validator_network.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import aiohttp
import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from node.cli import main
from node.cli_util import EXIT_OK
from node.daemon.config import NodeConfig, parse_config
from node.errors import UsageError
from node.http.auth import bearer_headers, read_token
from node.validation.disputes import (
    DisputePolicy,
    disputed_warning,
    publisher_record,
    refusal_reason,
)
from node.validation.validator import load_or_create_validator_key
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import AttestationStore
from p2p.head_record import sign_head
from storage.errors import DatasetNotFound
from storage.workspace import Workspace
from tests.node.conftest import running
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CFG = NodeConfig(http_port=0, head_poll_interval_s=0.1, pull_retry_delay_s=0.1)


def head_of(ws: Workspace, did: DatasetId) -> Multihash | None:
    try:
        return ws.get(did).head()
    except DatasetNotFound:
        return None


def held(ws: Workspace, did: DatasetId) -> list[Attestation]:
    return AttestationStore.for_workspace(ws).attestations(did)


def data_blocks(ws: Workspace, did: DatasetId) -> list[tuple[Multihash, int]]:
    from fbs.model import AddData

    return [
        (h, b.sequence_number)
        for h, _raw, b in ws.get(did).iter_blocks()
        if isinstance(b.event, AddData)
    ]


# -- config ----------------------------------------------------------------------------


def test_validator_settings() -> None:
    cfg = parse_config(
        {
            "validator": True,
            "engine": "127.0.0.1:5000",
            "refuse_disputed": True,
            "dispute_confirmations": 2,
            "validator_batch_blocks": 4,
        }
    )
    assert cfg.validator and cfg.refuse_disputed and cfg.engine_address == "127.0.0.1:5000"
    assert cfg.dispute_confirmations == 2 and cfg.validator_batch_blocks == 4
    assert not NodeConfig().validator and not NodeConfig().refuse_disputed
    for bad in (
        {"validator": "yes"},
        {"engine": "no port"},
        {"dispute_confirmations": 0},
        {"validator_batch_blocks": 1.5},
    ):
        with pytest.raises(UsageError):
            parse_config(bad)


# -- a validator daemon on root datasets -------------------------------------------------


async def test_validator_attests_roots_and_plain_nodes_get_them_by_gossip(tmp_path: Path) -> None:
    wa, wv, wo = (new_workspace(tmp_path / n) for n in ("a", "v", "o"))
    ds = make_dataset(wa, "pub", tmp_path / "s", slices=2)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    vid = load_or_create_validator_key(wv).dataset_id
    async with running(wa, CFG) as a:
        cfg_v = dataclasses.replace(
            CFG, bootstrap=(a.host.addrs[0],), validator=True, follow=("all",)
        )
        async with running(wv, cfg_v) as v:
            # The plain node follows nothing yet: attestations arrive before the dataset
            # and are kept until it is replicated.
            cfg_o = dataclasses.replace(CFG, bootstrap=(v.host.addrs[0],))
            async with running(wo, cfg_o) as o:
                await wait_for(lambda: o.attest.stats["early"] >= 2, "early attestations")
                assert head_of(wo, did) is None
                o.follow(did.to_did_odf())
                await wait_for(lambda: len(held(wo, did)) == 2, "attestations kept and accepted")
                assert {(a.block_hash, a.sequence_number) for a in held(wo, did)} == set(
                    data_blocks(wo, did)
                )
                assert all(
                    a.validator == vid and a.verdict is Verdict.REPRODUCED for a in held(wo, did)
                )
                assert o.worker is None and o.status_info()["validator"] is None

                # A new head: checked and attested on every node.
                add_slices(ds, tmp_path / "s2", 1)
                await wait_for(lambda: len(held(wo, did)) == 3, "attestation of the new head")
                await wait_for(lambda: v.worker is not None and v.worker.idle, "idle validator")
                status = v.status_info()["validator"]
                assert status["backlog"] == 0 and status["validator"] == vid.to_did_key()
                assert status["datasets"][did.to_did_odf()]["signed"] == {"reproduced": 3}

                # Served over HTTP at the per-dataset path (added before the catch-all).
                async with aiohttp.ClientSession() as s:
                    url = f"{o.http_url}/{did.as_multibase()}/attestations"
                    async with s.get(url) as r:
                        assert r.status == 200
                        doc = await r.json()
                    assert doc["disputed"] is False and len(doc["attestations"]) == 3
                    async with s.get(o.http_url + "/api/disputes") as r:
                        assert await r.json() == []
                    async with s.get(o.http_url + "/api/status") as r:
                        assert (await r.json())["attestations"]["accepted"] >= 3
    assert disputed_warning(wo, did) is None


# -- disputes and the refusal policy -----------------------------------------------------


async def test_divergence_and_equivocation_are_recorded_and_refused(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    div = make_dataset(wa, "div", tmp_path / "s1", slices=1)
    eq = make_dataset(wa, "eq", tmp_path / "s2", slices=1)
    div_state, eq_state = div.state(), eq.state()
    assert div_state is not None and eq_state is not None
    div_id, eq_id = div_state.dataset_id, eq_state.dataset_id
    async with running(wa, CFG) as a:
        cfg_b = dataclasses.replace(
            CFG, bootstrap=(a.host.addrs[0],), follow=("all",), refuse_disputed=True
        )
        async with running(wb, cfg_b) as b:
            await wait_for(
                lambda: head_of(wb, div_id) == div.head() and head_of(wb, eq_id) == eq.head(),
                "replication",
            )

            # A validator's signed `diverged`, offered over HTTP: accepted, head disputed.
            (block, seq), *_ = data_blocks(wb, div_id)
            att = sign_attestation(
                KeyPair.generate(),
                dataset_id=div_id,
                block_hash=block,
                sequence_number=seq,
                verdict=Verdict.DIVERGED,
                detail="newData.logicalHash",
                engine="spark (test)",
            )
            async with aiohttp.ClientSession(headers=bearer_headers(read_token(wb.root))) as s:
                url = f"{b.http_url}/{div_id.as_multibase()}/attestations"
                async with s.post(url, data=att.to_json()) as r:
                    assert r.status == 201
                async with s.post(url, data=att.to_json()) as r:
                    assert r.status == 409  # replayed
                async with s.post(url, data=b'{"verdict": 1}') as r:
                    assert r.status == 400
            assert b.attest.stats["published"] >= 1  # passed on by gossip
            warning = disputed_warning(wb, div_id)
            assert warning is not None and "does not reproduce for 1 validator" in warning

            # The publisher signs two heads for one sequence number: evidence recorded.
            key = wa.keys.load(eq_id)
            current = eq.state()
            assert current is not None
            other = sign_head(
                key, Multihash.sha3_256(b"another head"), current.sequence_number, Timestamp.now()
            )
            assert await b.pulls.offer(other, a.host.peer_id) is False
            rec = publisher_record(wb, eq_id)
            assert len(rec.equivocation) == 1
            assert "two heads" in (refusal_reason(rec, b.attest.policy) or "")

            # New heads of both publishers are refused; the evidence shows in the status.
            add_slices(div, tmp_path / "s3", 1)
            add_slices(eq, tmp_path / "s4", 1)
            await wait_for(
                lambda: (
                    {r.dataset_id for r in b.history if "refused by policy" in r.detail}
                    == {div_id, eq_id}
                ),
                "refusals",
            )
            assert head_of(wb, div_id) != div.head() and head_of(wb, eq_id) != eq.head()
            await wait_for(lambda: len(b.status_info()["disputes"]) == 2, "disputes in status")
            rows = {d["dataset"]: d for d in b.status_info()["disputes"]}
            assert rows[div_id.to_did_odf()]["disputed"] and rows[div_id.to_did_odf()]["confirmed"]
            assert rows[eq_id.to_did_odf()]["equivocations"] == 1
            assert set(b.status_info()["refused"]) == {div_id.to_did_odf(), eq_id.to_did_odf()}
            async with aiohttp.ClientSession() as s, s.get(b.http_url + "/api/disputes") as r:
                disputes = await r.json()
            assert {d["dataset"] for d in disputes if d["refused"]} == {
                div_id.to_did_odf(),
                eq_id.to_did_odf(),
            }


def test_confirmations_and_policy(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "w")
    ds = make_dataset(ws, "d", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    (block, seq), *_ = data_blocks(ws, did)
    store = AttestationStore.for_workspace(ws)
    keys = [KeyPair.generate() for _ in range(2)]
    store.accept(
        sign_attestation(
            keys[0],
            dataset_id=did,
            block_hash=block,
            sequence_number=seq,
            verdict=Verdict.DIVERGED,
            detail="newData.logicalHash",
            engine="e",
        )
    )
    rec = publisher_record(ws, did)
    assert rec.disputed and rec.has_evidence
    two = DisputePolicy(refuse_disputed=True, confirmations=2)
    assert rec.confirmed_divergence(two) is None and refusal_reason(rec, two) is None
    mine = dataclasses.replace(two, own_validator=keys[0].dataset_id)
    assert refusal_reason(rec, mine) is not None  # our own validator confirms alone
    assert refusal_reason(rec, DisputePolicy(confirmations=1)) is None  # policy off
    assert disputed_warning(ws, "d") is not None and disputed_warning(ws, "nope") is None


def test_attestations_evidence_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = new_workspace(tmp_path / "w")
    ds = make_dataset(ws, "d", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    (block, seq), *_ = data_blocks(ws, state.dataset_id)
    AttestationStore.for_workspace(ws).accept(
        sign_attestation(
            KeyPair.generate(),
            dataset_id=state.dataset_id,
            block_hash=block,
            sequence_number=seq,
            verdict=Verdict.DIVERGED,
            detail="newData.logicalHash",
            engine="e",
        )
    )
    w = ["-w", str(ws.root.parent)]
    assert main([*w, "attestations", "d", "--evidence"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "DISPUTED" in out and "Divergence: block #" in out
    # `odf sql` warns about disputed datasets its query reads (before running it).
    from node.sql.command import warn_disputed

    warn_disputed(ws.root, "SELECT * FROM d")
    assert "is DISPUTED" in capsys.readouterr().err
    warn_disputed(ws.root, "SELECT 1")
    assert capsys.readouterr().err == ""
