"""The attestation store: accept rules, durability, queueing, disputes, evidence."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.model import AddData, DatasetKind, DatasetSnapshot
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import (
    MAX_CLOCK_SKEW_NS,
    AcceptStatus,
    AttestationStore,
    BlockInfo,
    ChainView,
)
from p2p.errors import AttestationRejected, DuplicateAttestation, InvalidAttestation
from storage.workspace import Workspace
from tests.node.conftest import RootWriter

ENGINE = "spark (test)"


def attest(
    key: KeyPair,
    did: DatasetId,
    h: Multihash,
    seq: int,
    verdict: Verdict = Verdict.REPRODUCED,
    detail: str = "",
    when: Timestamp | None = None,
) -> Attestation:
    return sign_attestation(
        key,
        dataset_id=did,
        block_hash=h,
        sequence_number=seq,
        verdict=verdict,
        detail=detail,
        engine=ENGINE,
        system_time=when,
    )


@pytest.fixture
def root(tmp_path: Path) -> tuple[Workspace, RootWriter, list[tuple[Multihash, int]]]:
    """A workspace with a root dataset of two AddData blocks; returns those blocks."""
    ws = Workspace.init(tmp_path / "ws")
    ws.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=()))
    slices = tmp_path / "slices"
    slices.mkdir()
    writer = RootWriter(ws, "src", slices)
    writer.append([("a", 1)])
    writer.append([("b", 2)])
    data = [
        (h, b.sequence_number)
        for h, _r, b in reversed(list(ws.get("src").iter_blocks()))
        if isinstance(b.event, AddData)
    ]
    assert len(data) == 2
    return ws, writer, data


def test_accept_list_and_durability(
    root: tuple[Workspace, RootWriter, list[tuple[Multihash, int]]],
) -> None:
    ws, _w, data = root
    did = ws.resolve("src").id
    store = AttestationStore.for_workspace(ws)
    v1, v2 = KeyPair.generate(), KeyPair.generate()
    results = [store.accept(attest(k, did, h, s)) for k in (v1, v2) for h, s in data]
    assert all(r.status is AcceptStatus.ACCEPTED and not r.conflict for r in results)
    # A fresh store (a restarted node) sees the same attestations, oldest block first.
    again = AttestationStore.for_workspace(ws)
    held = again.attestations(did)
    assert len(held) == 4
    assert [a.sequence_number for a in held] == sorted(a.sequence_number for a in held)
    assert {a.validator for a in held} == {v1.dataset_id, v2.dataset_id}
    assert len(again.attestations(did, block=data[0][0])) == 2
    status = again.status(did)
    assert not status.disputed and status.head == ws.get("src").head()


def test_replays_and_resigned_verdicts_are_duplicates(
    root: tuple[Workspace, RootWriter, list[tuple[Multihash, int]]],
) -> None:
    ws, _w, data = root
    did = ws.resolve("src").id
    store = AttestationStore.for_workspace(ws)
    key = KeyPair.generate()
    h, seq = data[0]
    first = attest(key, did, h, seq)
    store.accept(first)
    with pytest.raises(DuplicateAttestation, match="replay"):
        store.accept(first)
    with pytest.raises(DuplicateAttestation):  # survives a restart
        AttestationStore.for_workspace(ws).accept(Attestation.from_json(first.to_json()))
    later = attest(key, did, h, seq, when=Timestamp(first.system_time.nanos + 10**9))
    with pytest.raises(DuplicateAttestation, match="re-signed"):
        store.accept(later)
    assert len(store.attestations(did)) == 1


def test_forged_unknown_and_foreign_blocks_are_rejected(
    root: tuple[Workspace, RootWriter, list[tuple[Multihash, int]]],
) -> None:
    ws, _w, data = root
    did = ws.resolve("src").id
    store = AttestationStore.for_workspace(ws)
    key, mallory = KeyPair.generate(), KeyPair.generate()
    h, seq = data[1]
    good = attest(key, did, h, seq)
    forged = dataclasses.replace(good, signature=attest(mallory, did, h, seq).signature)
    with pytest.raises(InvalidAttestation):
        store.accept(forged)
    with pytest.raises(InvalidAttestation):
        store.accept("not an attestation")  # type: ignore[arg-type]
    with pytest.raises(AttestationRejected, match="unknown dataset"):
        store.accept(attest(key, KeyPair.generate().dataset_id, h, seq))
    with pytest.raises(AttestationRejected, match="not in the local chain"):
        store.accept(attest(key, did, Multihash.sha3_256(b"elsewhere"), seq))
    with pytest.raises(AttestationRejected, match="sequence number"):
        store.accept(attest(key, did, h, seq - 1))
    seed_hash = next(h for h, _r, b in ws.get("src").iter_blocks() if b.sequence_number == 0)
    with pytest.raises(AttestationRejected, match="no data"):
        store.accept(attest(key, did, seed_hash, 0))
    future = Timestamp(Timestamp.now().nanos + 2 * MAX_CLOCK_SKEW_NS)
    with pytest.raises(AttestationRejected, match="future"):
        store.accept(attest(key, did, h, seq, when=future))
    assert store.attestations(did) == []


def test_diverged_disputes_the_head_and_is_kept_as_evidence(
    root: tuple[Workspace, RootWriter, list[tuple[Multihash, int]]],
) -> None:
    ws, writer, data = root
    did = ws.resolve("src").id
    store = AttestationStore.for_workspace(ws)
    honest, flaky = KeyPair.generate(), KeyPair.generate()
    h, seq = data[1]
    store.accept(attest(honest, did, h, seq, Verdict.DIVERGED, "newData.logicalHash"))
    assert store.is_disputed(did)
    # The dispute stays when the chain grows: the block is still in the head's chain.
    writer.append([("c", 3)])
    status = store.status(did)
    assert status.disputed and status.disputed_blocks == (h,)
    # A validator that says both things for one block is recorded with both.
    r1 = store.accept(attest(flaky, did, h, seq))
    r2 = store.accept(attest(flaky, did, h, seq, Verdict.DIVERGED, "newWatermark"))
    assert not r1.conflict and r2.conflict
    assert store.validator_conflicts(did) == [(flaky.dataset_id, h)]
    # A could-not-check followed by a definitive verdict is a re-check, not a conflict.
    other = KeyPair.generate()
    store.accept(attest(other, did, data[0][0], data[0][1], Verdict.COULD_NOT_CHECK, "busy"))
    assert not store.accept(attest(other, did, data[0][0], data[0][1])).conflict
    evidence = store.divergence_evidence()
    assert len(evidence) == 1
    ev = evidence[0]
    assert ev.dataset_id == did and ev.block_hash == h and ev.sequence_number == seq
    assert set(ev.validators) == {honest.dataset_id, flaky.dataset_id}
    assert set(ev.fields) == {"newData.logicalHash", "newWatermark"}
    for a in ev.attestations:
        a.verify()  # forwardable: anyone can check it


def test_damaged_files_are_skipped_not_trusted(
    root: tuple[Workspace, RootWriter, list[tuple[Multihash, int]]],
) -> None:
    ws, _w, data = root
    did = ws.resolve("src").id
    store = AttestationStore.for_workspace(ws)
    key = KeyPair.generate()
    h, seq = data[0]
    store.accept(attest(key, did, h, seq, Verdict.DIVERGED, "newData.logicalHash"))
    (path,) = list(store.root.rglob("*.diverged.json"))
    path.write_bytes(path.read_bytes().replace(b"diverged", b"reproduced", 1))
    assert store.attestations(did) == []
    assert not store.is_disputed(did)
    os.unlink(path)
    # With the damaged file gone the verdict can be offered again.
    store.accept(attest(key, did, h, seq, Verdict.DIVERGED, "newData.logicalHash"))
    assert store.is_disputed(did)


def test_attestations_ahead_of_the_chain_are_queued(tmp_path: Path) -> None:
    did = KeyPair.generate().dataset_id
    b1, b2 = Multihash.sha3_256(b"1"), Multihash.sha3_256(b"2")
    views = {did: ChainView(b1, 1, {b1: BlockInfo(1, True)})}
    store = AttestationStore(tmp_path / "p2p", views.get)
    key = KeyPair.generate()
    early = attest(key, did, b2, 2)
    assert store.accept(early).status is AcceptStatus.QUEUED
    with pytest.raises(DuplicateAttestation):
        store.accept(early)
    fork = attest(key, did, Multihash.sha3_256(b"fork"), 2)
    assert store.accept(fork).status is AcceptStatus.QUEUED
    assert store.retry_pending(did) == []  # still ahead
    assert store.status(did).pending == 2
    # The chain grows to b2: the attestation of b2 is accepted, the fork's dropped.
    views[did] = ChainView(b2, 2, {b1: BlockInfo(1, True), b2: BlockInfo(2, True)})
    accepted = store.retry_pending(did)
    assert [r.attestation for r in accepted] == [early]
    assert store.pending(did) == []
    assert store.attestations(did) == [early]
