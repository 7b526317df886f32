"""Validator peers on a real loopback network with the real Spark engine.

Five node daemons in this process (each libp2p host in its own trio thread): an honest
publisher, a cheating publisher (its derivative slice has self-consistent hashes but
records that do not follow from the transform), two validators and a plain node that
only knows one validator. The validators replicate the derivatives with their inputs,
replay every block on the shared engine and gossip signed attestations; the plain
node receives them by gossip: the cheating dataset is disputed there and
`verify_with_trust(..., 2)` fails for it only. Forged, replayed and malformed
attestations published by a raw libp2p host are rejected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.client import EngineClient
from fbs.did import DatasetId
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from node.daemon.config import NodeConfig
from node.daemon.service import NodeDaemon
from node.transform import pull_derivative
from node.validation.disputes import disputed_warning, publisher_record
from node.validation.trust import verify_with_trust
from node.validation.validator import load_or_create_validator_key
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import AttestationStore
from p2p.libp2p.attestation_gossip import ATTESTATIONS_TOPIC
from p2p.libp2p.host import HostConfig, P2PHost
from storage.errors import DatasetNotFound
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative, commit_forged, running
from tests.node.test_validator import QUERY
from tests.p2p import sync_helpers

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

WAIT_S = 120.0
CFG = NodeConfig(http_port=0, head_poll_interval_s=0.1, pull_retry_delay_s=0.1)


# Validators replay on Spark: allow a slow engine start on a busy machine.
#: The shared condition wait, as patient as validation on Spark needs.
wait_for = functools.partial(sync_helpers.wait_for, timeout=WAIT_S)


def publish(
    ws: Workspace, tmp: Path, root: str, derivative: str, engine: EngineClient, *, cheat: bool
) -> DatasetId:
    """A root and a derivative with two transform blocks (the second forged if ``cheat``)."""
    from fbs.model import DatasetKind, DatasetSnapshot

    ws.add_snapshot(DatasetSnapshot(name=root, kind=DatasetKind.Root, metadata=()))
    slices = tmp / f"slices-{root}"
    slices.mkdir()
    src = RootWriter(ws, root, slices)
    src.append([("a", 5), ("b", 6)])
    add_derivative(ws, derivative, [root], QUERY.replace("src", root))
    pull_derivative(ws, derivative, engine=engine)
    src.append([("c", 7), ("d", 8)])
    if cheat:
        commit_forged(ws, derivative, engine)
    else:
        pull_derivative(ws, derivative, engine=engine)
    return ws.resolve(derivative).id


def attestations_of(ws: Workspace, did: DatasetId) -> list[Attestation]:
    try:
        return AttestationStore.for_workspace(ws).attestations(did)
    except DatasetNotFound:
        return []


def verdicts(ws: Workspace, did: DatasetId, validators: set[DatasetId]) -> dict[Verdict, int]:
    out: dict[Verdict, int] = {}
    for a in attestations_of(ws, did):
        if a.validator in validators:
            out[a.verdict] = out.get(a.verdict, 0) + 1
    return out


async def wait_for_verdicts(
    ws: Workspace,
    did: DatasetId,
    validators: set[DatasetId],
    expected: dict[Verdict, int],
    what: str,
) -> None:
    """Wait until ``ws`` holds exactly ``expected``; on timeout, say what it holds."""
    try:
        await wait_for(lambda: verdicts(ws, did, validators) == expected, what)
    except AssertionError as e:
        held = sorted(
            (str(a.validator)[-8:], a.sequence_number, str(a.verdict))
            for a in attestations_of(ws, did)
        )
        raise AssertionError(f"{e}: {ws.root.parent.name} holds {held} of {did}") from None


def same_head(ws: Workspace, owner: Workspace, did: DatasetId) -> Callable[[], bool]:
    return lambda: head_of(ws, did) == head_of(owner, did)


def head_of(ws: Workspace, did: DatasetId) -> Multihash | None:
    try:
        return ws.get(did).head()
    except DatasetNotFound:
        return None


async def test_validators_attest_and_the_network_marks_the_cheat_disputed(
    tmp_path: Path, engine: EngineClient
) -> None:
    ws_a, ws_c, ws_v1, ws_v2, ws_o = (
        Workspace.init(tmp_path / n) for n in ("a", "c", "v1", "v2", "o")
    )
    honest = publish(ws_a, tmp_path, "src", "honest", engine, cheat=False)
    cheat = publish(ws_c, tmp_path, "src2", "cheat", engine, cheat=True)
    src, src2 = ws_a.resolve("src").id, ws_c.resolve("src2").id
    v1_id = load_or_create_validator_key(ws_v1).dataset_id
    v2_id = load_or_create_validator_key(ws_v2).dataset_id
    validators = {v1_id, v2_id}

    async with running(ws_a, CFG) as a, running(ws_c, CFG) as c:
        pubs = (a.host.addrs[0], c.host.addrs[0])
        # V1 follows only the derivatives: their inputs must be followed automatically.
        cfg_v1 = dataclasses.replace(
            CFG,
            bootstrap=pubs,
            validator=True,
            follow=(honest.to_did_odf(), cheat.to_did_odf()),
        )
        cfg_v2 = dataclasses.replace(CFG, bootstrap=pubs, validator=True, follow=("all",))
        async with running(ws_v1, cfg_v1, engine) as v1, running(ws_v2, cfg_v2, engine) as v2:
            # The plain node knows V1 only: heads, data and V2's attestations come through it.
            cfg_o = dataclasses.replace(CFG, bootstrap=(v1.host.addrs[0],), follow=("all",))
            async with running(ws_o, cfg_o) as o:
                for ws in (ws_v1, ws_v2, ws_o):
                    for did, owner in ((honest, ws_a), (cheat, ws_c)):
                        await wait_for(same_head(ws, owner, did), "replication")
                # Every validator: 2 reproduced for honest; 1 reproduced + 1 diverged for cheat.
                for ws in (ws_v1, ws_v2, ws_o):
                    await wait_for_verdicts(
                        ws,
                        honest,
                        validators,
                        {Verdict.REPRODUCED: 4},
                        f"honest attestations on {ws.root.parent.name}",
                    )
                    await wait_for_verdicts(
                        ws,
                        cheat,
                        validators,
                        {Verdict.REPRODUCED: 2, Verdict.DIVERGED: 2},
                        f"cheat attestations on {ws.root.parent.name}",
                    )
                # Inputs were followed and checked too (root integrity).
                followed = v1.follows.entries
                assert src.to_did_odf() in followed and src2.to_did_odf() in followed
                for ws in (ws_v1, ws_o):
                    await wait_for_verdicts(
                        ws, src, validators, {Verdict.REPRODUCED: 4}, "root attestations"
                    )
                await wait_for(lambda: v1.worker is not None and v1.worker.idle, "idle validator")
                status = v1.status_info()["validator"]
                assert status["backlog"] == 0 and status["validator"] == v1_id.to_did_key()
                assert status["datasets"][cheat.to_did_odf()]["signed"] == {
                    "reproduced": 1,
                    "diverged": 1,
                }
                diverged = [
                    a for a in attestations_of(ws_o, cheat) if a.verdict is Verdict.DIVERGED
                ]
                assert {a.detail for a in diverged} == {"newData.logicalHash"}
                assert {a.block_hash for a in diverged} == {head_of(ws_o, cheat)}

                # The plain node: cheat disputed (by gossip), trust 2 fails for it only.
                store_o = AttestationStore.for_workspace(ws_o)
                assert store_o.is_disputed(cheat) and not store_o.is_disputed(honest)
                report = verify_with_trust(ws_o, honest, 2)
                assert report.ok, report.failures
                assert set(report.validators) == validators
                bad = verify_with_trust(ws_o, cheat, 2)
                assert not bad.ok and bad.disputed
                warning = disputed_warning(ws_o, cheat)
                assert warning is not None and "DISPUTED" in warning
                assert disputed_warning(ws_o, honest) is None
                record = publisher_record(ws_o, cheat)
                assert set(record.divergence[0].validators) == validators
                await wait_for(
                    lambda: any(
                        d["dataset"] == cheat.to_did_odf() for d in o.status_info()["disputes"]
                    ),
                    "dispute in status",
                )

                # -- a new honest head: checked live, attested on every node --------------
                # (after the publish() writer's clock: system times only move forward)
                later = int(time.time() * 1000) + 3_600_000
                writer = RootWriter(ws_a, "src", tmp_path / "slices-src", clock_ms=later)
                await asyncio.to_thread(writer.append, [("e", 9), ("f", 10)])
                await asyncio.to_thread(pull_derivative, ws_a, "honest", engine=engine)
                for ws in (ws_v1, ws_v2, ws_o):
                    await wait_for_verdicts(
                        ws,
                        honest,
                        validators,
                        {Verdict.REPRODUCED: 6},
                        f"attestations of the new head on {ws.root.parent.name}",
                    )
                assert verify_with_trust(ws_o, honest, 2).ok
                await wait_for(lambda: v2.worker is not None and v2.worker.idle, "idle V2")
                assert v2.status_info()["validator"]["backlog"] == 0

                # -- forged, replayed and malformed attestations over gossip --------------
                await check_bad_attestations(ws_o, ws_v1, o, honest)


async def check_bad_attestations(
    ws_o: Workspace, ws_v1: Workspace, o: NodeDaemon, honest: DatasetId
) -> None:
    store_o = AttestationStore.for_workspace(ws_o)
    before = store_o.attestations(honest)
    v1_key = load_or_create_validator_key(ws_v1)
    held = next(a for a in before if a.validator == v1_key.dataset_id)
    raw = P2PHost(HostConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",)))
    await raw.start()
    try:
        await raw.connect(o.host.addrs[0])

        async def nothing(_msg: object) -> None:
            return None

        await raw.subscribe(ATTESTATIONS_TOPIC, nothing)
        await wait_for(
            lambda: o.host.peer_id in raw.mesh_peers(ATTESTATIONS_TOPIC), "topic peer", timeout=30.0
        )
        gossip_rejected = o.attestation_gossip.rejected
        stats = dict(o.attest.stats)
        # Malformed, and forged (V1's identity, another key's signature).
        other = sign_attestation(
            load_or_create_validator_key(ws_o),
            dataset_id=held.dataset_id,
            block_hash=held.block_hash,
            sequence_number=held.sequence_number,
            verdict=Verdict.DIVERGED,
            detail="newData.logicalHash",
            engine=held.engine,
        )
        forged = dataclasses.replace(
            held, verdict=Verdict.DIVERGED, detail="newData.logicalHash", signature=other.signature
        )
        for data in (b'{"verdict": "reproduced"}', b"\xff" * 10, forged.to_json()):
            await raw.publish(ATTESTATIONS_TOPIC, data)
        # Replayed byte for byte, and the same verdict re-signed later by V1's key.
        resigned = sign_attestation(
            v1_key,
            dataset_id=held.dataset_id,
            block_hash=held.block_hash,
            sequence_number=held.sequence_number,
            verdict=held.verdict,
            engine=held.engine,
            system_time=Timestamp(held.system_time.nanos + 1_000_000_000),
        )
        # A valid signature on a block that is not in the chain (below the head).
        ghost = sign_attestation(
            v1_key,
            dataset_id=held.dataset_id,
            block_hash=Multihash.sha3_256(b"not a block"),
            sequence_number=held.sequence_number,
            verdict=Verdict.REPRODUCED,
            engine=held.engine,
        )
        for att in (held, resigned, ghost):
            await raw.publish(ATTESTATIONS_TOPIC, att.to_json())
        await wait_for(
            lambda: (
                o.attestation_gossip.rejected >= gossip_rejected + 3
                and o.attest.stats["duplicates"] >= stats["duplicates"] + 1
                and o.attest.stats["rejected"] >= stats["rejected"] + 1
            ),
            "rejections",
            timeout=30.0,
        )
    finally:
        await raw.stop()
    assert store_o.attestations(honest) == before  # nothing new stored
    assert not store_o.is_disputed(honest)


#: A stateful derivative: the engine keeps its input and live output in the checkpoint and
#: emits retractions; validators must replay it from the recorded checkpoints.
STATEFUL_QUERY = (
    "SELECT max(event_time) AS event_time, count(*) AS n, sum(population) AS total FROM src"
)


async def test_two_validators_reproduce_a_stateful_derivative(
    tmp_path: Path, engine: EngineClient
) -> None:
    from fbs.model import DatasetKind, DatasetSnapshot

    ws_a, ws_v1, ws_v2 = (Workspace.init(tmp_path / n) for n in ("a", "v1", "v2"))
    ws_a.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=()))
    slices = tmp_path / "slices"
    slices.mkdir()
    src = RootWriter(ws_a, "src", slices)
    src.append([("a", 5), ("b", 6)])
    add_derivative(ws_a, "totals", ["src"], STATEFUL_QUERY)
    pull_derivative(ws_a, "totals", engine=engine)
    src.append([("c", 7)])
    pull_derivative(ws_a, "totals", engine=engine)
    totals = ws_a.resolve("totals").id
    # The second run corrected the first answer: the derivative really is a changelog.
    from node.api import open_workspace

    with open_workspace(ws_a.root.parent) as api:
        ops = api.dataset("totals").to_arrow().column("op").to_pylist()
    assert ops == [0, 2, 3]
    v_ids = {load_or_create_validator_key(w).dataset_id for w in (ws_v1, ws_v2)}

    async with running(ws_a, CFG) as a:
        cfg = dataclasses.replace(
            CFG, bootstrap=(a.host.addrs[0],), validator=True, follow=("all",)
        )
        async with running(ws_v1, cfg, engine), running(ws_v2, cfg, engine):
            for ws in (ws_v1, ws_v2):
                await wait_for(same_head(ws, ws_a, totals), "replication")
            for ws in (ws_v1, ws_v2):
                # 2 transform blocks x 2 validators, none diverged.
                await wait_for_verdicts(
                    ws,
                    totals,
                    v_ids,
                    {Verdict.REPRODUCED: 4},
                    f"stateful attestations on {ws.root.parent.name}",
                )
