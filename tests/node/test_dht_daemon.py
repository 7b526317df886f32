"""Content routing in daemons of this process: a restart, a false provider, deletes, DHT off.

Real libp2p hosts on loopback (each in its own trio thread, as in ``odf node run``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import pytest
import trio

from fbs.did import DatasetId
from node.daemon.config import NodeConfig
from p2p.dht.settings import DhtSettings
from p2p.libp2p.host import P2PHost
from storage.errors import DatasetNotFound
from storage.workspace import Workspace
from tests.node.conftest import running
from tests.p2p.sync_helpers import make_dataset, new_workspace, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CFG = NodeConfig(http_port=0, head_poll_interval_s=0.2, pull_retry_delay_s=0.1)


async def test_a_restarted_host_provides_again_and_a_new_peer_still_finds_it(
    tmp_path: Path,
) -> None:
    wa, wb, wc = (new_workspace(tmp_path / n) for n in "abc")
    ds = make_dataset(wa, "kept", tmp_path / "slices", slices=2)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(running(wa, CFG))
        b_cfg = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],))
        b = await stack.enter_async_context(running(wb, b_cfg))
        assert a.routing is not None and b.routing is not None
        routing = a.routing
        await wait_for(lambda: routing.counters.published >= 1, "the first provide")
        await a.host.restart("a test restart")
        # A new DHT on the restarted host: every record is published again.
        await wait_for(lambda: routing.counters.republished_after_restart >= 1, "restart")
        await wait_for(lambda: routing.counters.published >= 2, "the provide again")
        found = await b.routing.find(did)
        assert a.host.peer_id in found.providers
        # A node that joins after the restart, bootstrapped to a non-holder, finds it.
        c_cfg = dataclasses.replace(CFG, bootstrap=(b.host.addrs[0],), follow=(did.to_did_odf(),))
        c = await stack.enter_async_context(running(wc, c_cfg))
        await wait_for(lambda: _held(wc, did), "the dataset found through the DHT")
        # Through its own lookup or the shard links' (both ask the DHT).
        assert c.routing is not None and c.routing.counters.lookups >= 1
        status = c.status_info()["dht"]
        assert status["enabled"] and status["routingTableSize"] >= 1


def _held(ws: Workspace, did: DatasetId) -> bool:
    try:
        return ws.get(did).head() is not None
    except DatasetNotFound:
        return False


async def test_a_node_without_the_dht_reports_it_off(tmp_path: Path) -> None:
    async with running(new_workspace(tmp_path / "a"), dataclasses.replace(CFG, dht=False)) as a:
        assert a.routing is None
        assert a.status_info()["dht"] == {"enabled": False}
        assert all("inRoutingTable" in p and not p["inRoutingTable"] for p in a.peers_info())


async def test_a_deleted_dataset_is_no_longer_provided(tmp_path: Path) -> None:
    wa, wb = new_workspace(tmp_path / "a"), new_workspace(tmp_path / "b")
    ds = make_dataset(wa, "gone", tmp_path / "slices", slices=1)
    state = ds.state()
    assert state is not None
    fast = dataclasses.replace(CFG, dht_lookup_interval_s=0.5)
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(running(wa, fast))
        b_cfg = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],))
        await stack.enter_async_context(running(wb, b_cfg))
        await wait_for(lambda: a.status_info()["dht"]["provided"] == 1, "the provide")
        wa.delete(state.dataset_id)
        await wait_for(lambda: a.status_info()["dht"]["provided"] == 0, "the provide to stop")


async def test_a_provider_that_does_not_serve_the_dataset_is_passed_by(tmp_path: Path) -> None:
    wa, wb, wc = (new_workspace(tmp_path / n) for n in "abc")
    ds = make_dataset(wa, "real", tmp_path / "slices", slices=2)
    state = ds.state()
    assert state is not None
    did = state.dataset_id
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(running(wa, CFG))
        b_cfg = dataclasses.replace(CFG, bootstrap=(a.host.addrs[0],))
        b = await stack.enter_async_context(running(wb, b_cfg))
        assert a.routing is not None
        routing = a.routing
        await wait_for(lambda: routing.counters.published >= 1, "the owner's provide")
        # A host that announces itself as a holder but serves nothing.
        liar = await stack.enter_async_context(P2PHost(dht=DhtSettings(lookup_timeout_s=10.0)))
        await liar.connect(b.host.addrs[0])

        async def claim() -> bool:
            while liar.dht.routing_table_size < 1:
                await trio.sleep(0.05)
            return await liar.dht.provide(did)

        assert await liar.run_trio(claim)
        c_cfg = dataclasses.replace(CFG, bootstrap=(b.host.addrs[0],), follow=(did.to_did_odf(),))
        c = await stack.enter_async_context(running(wc, c_cfg))
        await wait_for(lambda: _held(wc, did), "the dataset from the honest provider")
        assert all(r.ok for r in c.history)
        found = {p for f in c.status_info()["dht"]["providersFound"] for p in f["providers"]}
        assert {a.host.peer_id, liar.peer_id} <= found
