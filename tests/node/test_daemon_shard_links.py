"""Shard links: a follower reaches its datasets' shards through the DHT, single topic off.

Real daemons and libp2p hosts on loopback, every node with the single head topic switched
off (`GossipSettings.legacy_topic`), so heads travel on shard topics only, and with
py-libp2p's auto-connector stopped (in a network this small it would connect everyone).
A follower that already holds a dataset, bootstrapped only to a relay that holds nothing,
links the dataset's shard and gets the publisher's later heads over it; cut off, it looks
the dataset up again; after the publisher restarts (same identity, new port) it links
again and gets the next head. A provider that never serves is skipped, a new peer still
connects, and the publisher, back, is linked. A head only in the DHT is pulled on the slow
schedule. Every wait polls a condition; every node is stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from fbs.did import DatasetId
from fbs.multiformats import Multihash
from node.daemon.config import NodeConfig
from node.daemon.service import NodeDaemon
from p2p.dht.settings import DhtSettings
from p2p.libp2p.host import P2PHost
from p2p.libp2p.shards import topic_for
from storage.dataset import Dataset
from storage.errors import DatasetNotFound
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

#: Lookups back off to 2 s here (60 s in a node), so a lost link is looked up again soon.
CFG = NodeConfig(
    http_port=0, head_poll_interval_s=0.2, pull_retry_delay_s=0.1, dht_lookup_interval_s=2.0
)
#: Generous bound for a condition on a loaded 2-core machine.
WAIT_S = 120.0


@contextlib.asynccontextmanager
async def shards_only(ws: Workspace, config: NodeConfig) -> AsyncIterator[NodeDaemon]:
    """A started daemon of ``ws`` that speaks shard topics only.

    py-libp2p's auto-connector dials every peer its peerstore has addresses of (up to
    200): in a network this small it would connect the follower to the publisher by
    itself. It is stopped here, so only the shard links (and the pulls) connect them.
    """
    daemon = NodeDaemon(ws, config)
    gossip = dataclasses.replace(daemon.host.config.gossip, legacy_topic=False)
    daemon.host.config = dataclasses.replace(daemon.host.config, gossip=gossip)
    await daemon.start()

    await daemon.host.run_trio(stop_auto_connect, daemon.host)
    try:
        assert daemon.gossip.topics and all("/shard/" in t for t in daemon.gossip.topics)
        yield daemon
    finally:
        await daemon.stop()


async def stop_auto_connect(host: P2PHost) -> None:
    await host.libp2p_host.get_network().auto_connector.stop()


def head_of(ws: Workspace, did: DatasetId) -> Multihash | None:
    try:
        return ws.get(did).head()
    except DatasetNotFound:
        return None


def shard_links(daemon: NodeDaemon) -> dict[str, Any]:
    doc: dict[str, Any] = daemon.status_info()["dht"]["shardLinks"]
    return doc


def linked(follower: NodeDaemon, publisher: str, did: DatasetId) -> bool:
    """The publisher is connected and in the follower's view of the dataset's shard."""
    return publisher in follower.host.topic_peers([topic_for(did)])


async def commit_and_wait(ds: Dataset, tmp: Path, follower: Workspace, what: str) -> None:
    add_slices(ds, tmp, 1)
    head = ds.head()
    await wait_for(lambda: head_of(follower, id_of(ds)) == head, what, WAIT_S)


def id_of(ds: Dataset) -> DatasetId:
    state = ds.state()
    assert state is not None
    return state.dataset_id


async def test_a_follower_links_the_shard_of_a_held_dataset_and_of_a_restarted_publisher(
    tmp_path: Path,
) -> None:
    wp, wr, wf = (new_workspace(tmp_path / n) for n in ("publisher", "relay", "follower"))
    ds = make_dataset(wp, "sharded", tmp_path / "s0", slices=1)
    did = id_of(ds)
    async with contextlib.AsyncExitStack() as stack:
        p = await stack.enter_async_context(shards_only(wp, CFG))
        via_p = dataclasses.replace(CFG, bootstrap=(p.host.addrs[0],))
        r = await stack.enter_async_context(shards_only(wr, via_p))
        via_r = dataclasses.replace(CFG, bootstrap=(r.host.addrs[0],), follow=(did.to_did_odf(),))
        async with shards_only(wf, via_r) as f:  # not held yet: found and pulled
            await wait_for(lambda: head_of(wf, did) == ds.head(), "the first pull", WAIT_S)
        # Started again holding the dataset, connected only to the relay (which holds
        # nothing): the follower links the shard through the DHT, then hears new heads.
        f = await stack.enter_async_context(shards_only(wf, via_r))
        publisher = p.host.peer_id
        await wait_for(lambda: linked(f, publisher, did), "the shard linked", WAIT_S)
        assert head_of(wr, did) is None
        await commit_and_wait(ds, tmp_path / "s1", wf, "a head over the shard")
        assert f.watcher.routing is not None
        # Cut off from the publisher (no auto-connector on either side), the follower
        # looks the dataset up and dials it again.
        lookups = shard_links(f)["lookups"]
        await f.host.disconnect(publisher)
        await wait_for(lambda: shard_links(f)["lookups"] > lookups, "a lookup", WAIT_S)
        await wait_for(lambda: linked(f, publisher, did), "the shard linked again", WAIT_S)
        await commit_and_wait(ds, tmp_path / "s1b", wf, "a head over the relinked shard")

        # The publisher restarts with the same identity on a new port.
        old_addr = p.host.addrs[0]
        await p.stop()
        p2 = await stack.enter_async_context(shards_only(wp, via_r))
        assert p2.host.peer_id == publisher and p2.host.addrs[0] != old_addr
        await wait_for(lambda: linked(f, publisher, did), "the restarted publisher", WAIT_S)
        await commit_and_wait(ds, tmp_path / "s2", wf, "a head after the restart")
        assert all(rec.ok for rec in f.history)


async def test_a_provider_that_never_serves_is_skipped_and_a_new_peer_still_connects(
    tmp_path: Path,
) -> None:
    wp, wr, wf, wn = (new_workspace(tmp_path / n) for n in ("publisher", "relay", "f", "new"))
    ds = make_dataset(wp, "real", tmp_path / "s0", slices=1)
    did = id_of(ds)
    async with contextlib.AsyncExitStack() as stack:
        r = await stack.enter_async_context(shards_only(wr, CFG))
        via_r = dataclasses.replace(CFG, bootstrap=(r.host.addrs[0],))
        following = dataclasses.replace(via_r, follow=(did.to_did_odf(),))
        async with shards_only(wp, via_r) as p, shards_only(wf, following):
            publisher = p.host.peer_id
            await wait_for(lambda: head_of(wf, did) == ds.head(), "the first pull", WAIT_S)
        # The publisher is down; a host claims to provide the dataset and serves nothing.
        liar = await stack.enter_async_context(P2PHost(dht=DhtSettings(lookup_timeout_s=10.0)))
        await liar.run_trio(stop_auto_connect, liar)
        await liar.connect(r.host.addrs[0])

        async def claim() -> bool:
            while liar.dht.routing_table_size < 1:
                await trio.sleep(0.05)
            return bool(await liar.dht.provide(did))

        assert await liar.run_trio(claim)
        # The follower starts again holding the dataset: its shard links try the liar.
        f = await stack.enter_async_context(shards_only(wf, following))
        await wait_for(lambda: shard_links(f)["skipped"] >= 1, "the false provider skipped", WAIT_S)
        # Skipped, not linked (a DHT query may still talk to it: it is a DHT peer).
        assert liar.peer_id not in shard_links(f)["links"]
        assert liar.peer_id not in f.pulls.providers_of(did)
        # A new peer still connects to the follower; the publisher, back, is linked.
        n = await stack.enter_async_context(
            shards_only(wn, dataclasses.replace(CFG, bootstrap=(f.host.addrs[0],)))
        )
        await wait_for(lambda: n.host.peer_id in f.host.peers(), "a new peer", WAIT_S)
        await stack.enter_async_context(shards_only(wp, via_r))
        await wait_for(lambda: linked(f, publisher, did), "the shard linked", WAIT_S)
        await commit_and_wait(ds, tmp_path / "s1", wf, "the next head")


async def test_a_head_only_in_the_dht_is_pulled_on_the_slow_schedule(tmp_path: Path) -> None:
    wp, wf = new_workspace(tmp_path / "publisher"), new_workspace(tmp_path / "follower")
    ds = make_dataset(wp, "quiet", tmp_path / "s0", slices=1)
    did = id_of(ds)
    # The publisher's round runs once (its first); later heads are not gossiped by it.
    quiet = dataclasses.replace(CFG, head_poll_interval_s=3600.0)
    async with shards_only(wp, quiet) as p:
        following = dataclasses.replace(
            CFG, bootstrap=(p.host.addrs[0],), follow=(did.to_did_odf(),)
        )
        async with shards_only(wf, following) as f:
            await wait_for(lambda: head_of(wf, did) == ds.head(), "the first pull", WAIT_S)
            # Linked and read once: what moves the head from here is the next reading.
            await wait_for(lambda: shard_links(f)["rechecks"] >= 1, "a first reading", WAIT_S)
            add_slices(ds, tmp_path / "s1", 1)
            head = ds.head()
            assert head is not None
            record = await f.threads.run(p.watcher.record_for_head, did, head)
            assert record is not None and p.routing is not None
            p.routing.publish(record)  # in the DHT only
            await wait_for(lambda: head_of(wf, did) == head, "the head read again", WAIT_S)
            assert shard_links(f)["rechecks"] >= 2
            assert all(rec.ok for rec in f.history)
