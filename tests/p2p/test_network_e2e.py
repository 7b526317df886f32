"""End to end over the network: node daemons on loopback, gossip, verified replication.

Daemons run in this process (each libp2p host in its own trio thread, as in
``odf node run``); the subprocess scenarios (kill -9, SIGTERM) are in
tests/node/test_daemon_process.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fbs.did import DatasetId
from fbs.multiformats import Multihash
from node.daemon.config import NodeConfig
from p2p.head_record import sign_head
from p2p.head_store import HeadStore
from p2p.libp2p.gossip import HEADS_TOPIC
from p2p.libp2p.host import P2PHost
from storage.errors import DatasetNotFound
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.conftest import running
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CFG = NodeConfig(http_port=0, head_poll_interval_s=0.1, pull_retry_delay_s=0.1)


def head_of(ws: Workspace, did: DatasetId) -> Multihash | None:
    try:
        return ws.get(did).head()
    except DatasetNotFound:
        return None


async def test_three_nodes_replicate_signed_heads(tmp_path: Path) -> None:
    wa, wb, wc = (new_workspace(tmp_path / n) for n in "abc")
    ds = make_dataset(wa, "pub.data", tmp_path / "slices", slices=3, checkpoints=True)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    # Gossip alone: DHT lookups would connect A and C directly.
    follow_all = dataclasses.replace(CFG, follow=("all",), dht=False)
    async with running(wa, dataclasses.replace(CFG, dht=False)) as a:
        # A line: C only knows B, so A's announcement reaches C by gossip through B.
        cfg_b = dataclasses.replace(follow_all, bootstrap=(a.host.addrs[0],))
        async with running(wb, cfg_b) as b:
            cfg_c = dataclasses.replace(follow_all, bootstrap=(b.host.addrs[0],))
            async with running(wc, cfg_c) as c:
                assert a.host.peer_id not in c.host.peers()
                for w in (wb, wc):
                    await wait_for(lambda w=w: head_of(w, did) == ds.head(), "replication")
                # A new commit on the owner: signed, gossiped, replicated on both.
                add_slices(ds, tmp_path / "more", 2)
                for w in (wb, wc):
                    await wait_for(lambda w=w: head_of(w, did) == ds.head(), "the update")
                assert c.history and all(r.ok for r in c.history)
                status = c.status_info()
                assert status["followAll"] and status["peerId"] == c.host.peer_id
                assert b.host.peer_id in {p["peerId"] for p in c.peers_info()}
    new_state = ds.state()
    assert new_state is not None
    for w in (wb, wc):
        report = verify_integrity(w.get(did))
        assert report.ok, report.problems
        held = HeadStore.for_workspace(w.root).get(did)
        assert held is not None and held.head == ds.head()
        assert held.sequence_number == new_state.sequence_number
        held.verify()  # signed by the dataset key (A's keystore), checked from the DID
        assert not w.keys.has(did)  # replicas never hold the key


async def test_followers_only_pull_followed_datasets(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    one = make_dataset(wa, "one", tmp_path / "s1", slices=1)
    two = make_dataset(wa, "two", tmp_path / "s2", slices=1)
    s1, s2 = one.state(), two.state()
    assert s1 is not None and s2 is not None
    async with running(wa, CFG) as a:
        cfg_b = dataclasses.replace(
            CFG, bootstrap=(a.host.addrs[0],), follow=(s1.dataset_id.to_did_odf(),)
        )
        async with running(wb, cfg_b) as b:
            await wait_for(lambda: head_of(wb, s1.dataset_id) == one.head(), "followed pull")
            await wait_for(lambda: s2.dataset_id in b._known, "the other announcement")
            assert head_of(wb, s2.dataset_id) is None
            # Following it later (as `odf node follow` does through the API) pulls it.
            b.follow(s2.dataset_id.to_did_odf())
            await wait_for(lambda: head_of(wb, s2.dataset_id) == two.head(), "late follow")


async def test_forged_replayed_and_lower_records_are_ignored(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "target", tmp_path / "s", slices=2)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    key = wa.keys.load(did)
    store_b = HeadStore.for_workspace(wb.root)
    async with running(wa, CFG) as a:
        cfg_b = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],), follow=("all",))
        async with running(wb, cfg_b) as b:
            await wait_for(lambda: head_of(wb, did) == ds.head(), "honest replication")
            old = store_b.get(did)
            assert old is not None
            add_slices(ds, tmp_path / "s2", 1)
            await wait_for(lambda: head_of(wb, did) == ds.head(), "second head")
            current = store_b.get(did)
            assert current is not None and current.sequence_number > old.sequence_number

            evil = P2PHost()
            await evil.start()
            try:
                await evil.connect(b.host.addrs[0])
                await wait_for(lambda: b.host.peer_id in evil.mesh_peers(HEADS_TOPIC), "mesh")
                fake_head = Multihash.sha3_256(b"not a block")
                forged = dataclasses.replace(
                    sign_head(key, current.head, current.sequence_number + 5, current.system_time),
                    head=fake_head,  # signature no longer matches
                )
                # A record whose signature is from another key (claims the same DID).
                other = Workspace.init(tmp_path / "other").create_dataset("x")
                other_state = other.state()
                assert other_state is not None
                wrong_key = dataclasses.replace(
                    sign_head(
                        Workspace.open(tmp_path / "other").keys.load(other_state.dataset_id),
                        fake_head,
                        current.sequence_number + 9,
                        current.system_time,
                    ),
                    dataset_id=did,
                )
                lower = sign_head(key, old.head, old.sequence_number - 1, old.system_time)
                rejected_before = b.gossip.rejected
                for payload in (
                    forged.to_json(),
                    wrong_key.to_json(),
                    old.to_json(),  # replay of a record B held before
                    current.to_json(),  # replay of the held record itself
                    lower.to_json(),  # validly signed, lower sequence number
                    b"{not json",
                ):
                    await evil.publish(HEADS_TOPIC, payload)
                await wait_for(lambda: b.gossip.rejected >= rejected_before + 3, "rejections")
                assert store_b.get(did) == current
                assert head_of(wb, did) == ds.head()
                assert all(r.ok for r in b.history)  # nothing was pulled for the fakes
                # Honest data still arrives.
                add_slices(ds, tmp_path / "s3", 1)
                # Had B accepted a fake (sequence numbers up to +9), this record (+1)
                # would be refused as stale and never arrive.
                await wait_for(lambda: head_of(wb, did) == ds.head(), "honest head after attack")
                held = store_b.get(did)
                assert held is not None and held.head == ds.head()
                assert all(r.ok for r in b.history)
            finally:
                await evil.stop()
    assert verify_integrity(wb.get(did)).ok


async def test_equivocation_is_recorded_not_applied(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "eq", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    async with running(wa, CFG) as a:
        cfg_b = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],), follow=("all",))
        async with running(wb, cfg_b) as b:
            await wait_for(lambda: head_of(wb, did) == ds.head(), "replication")
            held = HeadStore.for_workspace(wb.root).get(did)
            assert held is not None
            # The key holder signs a second head for the same sequence number.
            twin = sign_head(
                wa.keys.load(did),
                Multihash.sha3_256(b"another history"),
                held.sequence_number,
                held.system_time,
            )
            await a.gossip.announce(twin)
            store_b = HeadStore.for_workspace(wb.root)
            await wait_for(lambda: bool(store_b.list_evidence(did)), "evidence")
            assert store_b.get(did) == held
            assert head_of(wb, did) == ds.head()
            # A pull's record is written once its sources' attestations are in.
            await wait_for(lambda: bool(b.history), "the pull's record")
            assert all(r.ok for r in b.history)
