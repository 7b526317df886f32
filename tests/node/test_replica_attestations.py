"""A replica brings the attestations of the blocks it holds from its source.

Node A (an ``odf node run`` process) holds a dataset every data block of which a
validator attested ``reproduced``; B clones it with ``odf pull http://A/...`` (an ``odf``
process) and ``odf verify --trust 1`` accepts the head on B as on A. A new block
attested at A comes over with ``odf pull DS``. Every attestation goes through B's own
store rules: one signed by a forged key, or of a block B does not hold, is not taken.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fbs.keys import KeyPair
from fbs.model import AddData, ExecuteTransform
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.attestation_store import AttestationStore
from storage.workspace import Workspace
from tests.node.test_daemon_process import REPO, node, write_config
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

pytestmark = pytest.mark.timeout(240)


def odf(ws: Workspace, *argv: str) -> subprocess.CompletedProcess[str]:
    """``odf --workspace WS ARGV...`` as a process."""
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "--workspace", str(ws.root.parent), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def attest_all(ws: Workspace, alias: str, validator: KeyPair) -> int:
    """Sign ``reproduced`` for every data block of ``alias`` not attested yet (at A)."""
    store = AttestationStore.for_workspace(ws)
    did = ws.resolve(alias).id
    done = {a.block_hash for a in store.attestations(did)}
    signed = 0
    for h, _raw, block in ws.get(did).iter_blocks():
        if isinstance(block.event, AddData | ExecuteTransform) and h not in done:
            att = sign_attestation(
                validator,
                dataset_id=did,
                block_hash=h,
                sequence_number=block.sequence_number,
                verdict=Verdict.REPRODUCED,
                engine="spark-test",
            )
            store.accept(att)
            signed += 1
    return signed


def test_attestations_come_with_a_clone_and_an_update(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "prices", tmp_path / "s1", 2)
    validator = KeyPair.generate()
    assert attest_all(wa, "prices", validator) == 2
    with node(wa.root.parent, "--config", str(write_config(tmp_path / "a.yaml"))) as a:
        assert a.info is not None
        proc = odf(wb, "pull", f"{a.info.http_url}/prices", "--no-progress")
        assert proc.returncode == 0, proc.stderr
        assert "2 attestation(s)" in proc.stdout, proc.stdout
        proc = odf(wb, "verify", "--trust", "1", "prices")
        assert proc.returncode == 0, proc.stdout + proc.stderr

        add_slices(ds, tmp_path / "s2", 1)
        assert attest_all(wa, "prices", validator) == 1
        proc = odf(wb, "pull", "prices", "--no-progress")
        assert proc.returncode == 0, proc.stderr
        assert "Updated prices" in proc.stdout and "1 attestation(s)" in proc.stdout
        assert odf(wb, "verify", "--trust", "1", "prices").returncode == 0
    held = AttestationStore.for_workspace(wb).attestations(wb.resolve("prices").id)
    assert {a.validator for a in held} == {validator.dataset_id} and len(held) == 3


def test_only_attestations_the_local_rules_accept_are_taken(tmp_path: Path) -> None:
    from node.remote.attestations import accept_attestations

    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "prices", tmp_path / "s1", 1)
    did = wa.resolve("prices").id
    (h, _raw, block) = next(iter(ds.iter_blocks()))
    good = sign_attestation(
        KeyPair.generate(),
        dataset_id=did,
        block_hash=h,
        sequence_number=block.sequence_number,
        verdict=Verdict.REPRODUCED,
        engine="spark-test",
    )
    forged = good.to_dict() | {"validator": KeyPair.generate().dataset_id.to_did_key()}
    # B holds no such dataset: even a well-signed attestation has nothing to attest.
    assert accept_attestations(wb, [good.to_dict(), forged, {"junk": 1}, "x"]) == 0
    assert accept_attestations(wa, [forged, {"junk": 1}, "x"]) == 0
    assert accept_attestations(wa, [good.to_dict(), good.to_dict()]) == 1
    assert isinstance(Attestation.from_dict(good.to_dict()), Attestation)
