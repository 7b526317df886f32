"""The daemon's head shards: joined for what it publishes and follows, left on unfollow."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from node.daemon.service import NodeDaemon
from p2p.libp2p.shards import shard_of, topic_for
from storage.errors import DatasetNotFound
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.test_daemon import CFG
from tests.p2p.sync_helpers import make_dataset, new_workspace, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def held(ws: Workspace, did: DatasetId) -> Multihash | None:
    try:
        return ws.get(did).head()
    except DatasetNotFound:
        return None


async def test_shards_follow_what_the_node_publishes_and_follows(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "shared", tmp_path / "s", slices=1)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    async with NodeDaemon(wa, CFG) as a:
        await wait_for(lambda: topic_for(did) in a.host.topics, "the publisher in its shard")
        cfg_b = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],))
        async with NodeDaemon(wb, cfg_b) as b:
            backbone = set(b.gossip.shards.backbone())
            other = KeyPair.generate().dataset_id
            while shard_of(other) in backbone | {shard_of(did)}:
                other = KeyPair.generate().dataset_id
            b.follow(did.to_did_odf())
            b.follow(other.to_did_odf())
            await wait_for(lambda: topic_for(other) in b.host.topics, "B in a followed shard")
            await wait_for(lambda: held(wb, did) == ds.head(), "B to replicate")
            assert verify_integrity(wb.get(did)).ok
            assert b.follows.unfollow(other.to_did_odf())
            await wait_for(lambda: topic_for(other) not in b.host.topics, "B to leave it")
            # Held and re-announced: B publishes the replica, so it stays in that shard.
            assert topic_for(did) in b.host.topics
