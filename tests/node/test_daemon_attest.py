"""`node.daemon.attest.AttestationService`: gossiped attestations of datasets not held yet.

Gossip delivers an attestation once (by digest). One that arrives before the dataset's
first pull is kept in memory and offered again when the chain grows. The race pinned
here: the pull commits (and its ``on_new_head`` runs) between the store answering
"unknown dataset" and the service keeping the attestation; it must not wait for a
next head that may never come (a rare CI timeout in the validator network test).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.model import AddData, DatasetKind, DatasetSnapshot
from node.daemon.attest import AttestationService
from node.daemon.config import NodeConfig
from node.worker_threads import WorkerThreads
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import AcceptResult, AttestationStore, ChainView, WorkspaceChains
from p2p.errors import UnknownAttestedDataset
from p2p.head_store import P2P_DIR, HeadStore
from p2p.libp2p.host import P2PHost
from storage.workspace import Workspace
from tests.node.conftest import RootWriter

pytestmark = pytest.mark.anyio


class LateStore(AttestationStore):
    """Answers as if the dataset were absent for the first ``hidden`` lookups."""

    def __init__(self, ws: Workspace) -> None:
        real = WorkspaceChains(ws)
        super().__init__(Path(ws.root) / P2P_DIR, self._late(real))
        self.hidden = 0

    def _late(self, real: WorkspaceChains) -> Callable[[DatasetId], ChainView | None]:
        def chains(dataset_id: DatasetId) -> ChainView | None:
            return None if self._hide() else real(dataset_id)

        return chains

    def _hide(self) -> bool:
        if self.hidden > 0:
            self.hidden -= 1
            return True
        return False

    def accept(self, attestation: Attestation) -> AcceptResult:
        if self._hide():
            raise UnknownAttestedDataset(f"unknown dataset {attestation.dataset_id}")
        return super().accept(attestation)


def setup(tmp_path: Path) -> tuple[AttestationService, LateStore, Attestation]:
    ws = Workspace.init(tmp_path / "ws")
    ws.add_snapshot(DatasetSnapshot(name="src", kind=DatasetKind.Root, metadata=()))
    (tmp_path / "slices").mkdir()
    RootWriter(ws, "src", tmp_path / "slices").append([("a", 1)])
    h, block = next(
        (h, b) for h, _r, b in ws.get("src").iter_blocks() if isinstance(b.event, AddData)
    )
    did = ws.resolve("src").id
    att = sign_attestation(
        KeyPair.generate(),
        dataset_id=did,
        block_hash=h,
        sequence_number=block.sequence_number,
        verdict=Verdict.REPRODUCED,
        detail="",
        engine="spark (test)",
    )
    store = LateStore(ws)
    service = AttestationService(
        ws,
        NodeConfig(),
        P2PHost(),
        HeadStore.for_workspace(ws.root),
        store,
        replicas=list,
        threads=WorkerThreads(),
    )
    return service, store, att


async def test_an_attestation_racing_the_first_pull_is_accepted(tmp_path: Path) -> None:
    service, store, att = setup(tmp_path)
    store.hidden = 1  # "unknown" from accept; the pull has committed by the next lookup
    await service.on_gossip(att, "peer")
    assert store.attestations(att.dataset_id) == [att]
    assert service.counters()["rejected"] == 0 and service.counters()["accepted"] == 1


async def test_an_early_attestation_waits_for_the_dataset_then_is_accepted(
    tmp_path: Path,
) -> None:
    service, store, att = setup(tmp_path)
    store.hidden = 2  # not there for accept, nor for the re-check: kept in memory
    await service.on_gossip(att, "peer")
    assert store.attestations(att.dataset_id) == []
    assert service.counters()["early"] == 1
    await service.on_new_head(att.dataset_id)  # the pull committed
    assert store.attestations(att.dataset_id) == [att]
    assert service.counters()["early"] == 0
