"""A node that replicates a dataset over libp2p brings the attestations its source holds.

Node A (an ``odf node run`` process, not a validator: it never gossips the attestations
it holds) owns a dataset every data block of which a validator attested ``reproduced``
before D existed. Node D joins with ``--follow all``; its replica comes with those
attestations, asked of A over ``/odf/exchange/attestations/1.0.0``, and ``odf verify --trust 1``
accepts D's head.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fbs.keys import KeyPair
from p2p.attestation_store import AttestationStore
from tests.node.test_daemon_process import node, wait_until, write_config
from tests.node.test_replica_attestations import attest_all, odf
from tests.p2p.sync_helpers import make_dataset, new_workspace

pytestmark = pytest.mark.timeout(240)


def test_a_followed_replica_brings_the_attestations_of_its_source(tmp_path: Path) -> None:
    wa, wd = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "d")
    make_dataset(wa, "prices", tmp_path / "s1", 2)
    validator = KeyPair.generate()
    assert attest_all(wa, "prices", validator) == 2
    did = wa.resolve("prices").id
    store = AttestationStore.for_workspace(wd)
    with node(wa.root.parent, "--config", str(write_config(tmp_path / "a.yaml"))) as a:
        assert a.info is not None
        config = str(write_config(tmp_path / "d.yaml"))
        args = ("--config", config, "--bootstrap", a.info.addrs[0], "--follow", "all")
        with node(wd.root.parent, *args) as d:
            wait_until(lambda: len(store.attestations(did)) == 2, "D to hold 2 attestations")
            assert d.terminate() == 0
        assert a.terminate() == 0
    assert {att.validator for att in store.attestations(did)} == {validator.dataset_id}
    proc = odf(wd, "verify", "--trust", "1", did.to_did_odf())
    assert proc.returncode == 0, proc.stdout + proc.stderr
