"""Per-peer admission of the exchange server between real hosts.

A hostile peer parks silent streams, opens more than its share, and asks for objects
faster than its budget; an honest peer must keep being served, and the hostile one
must be told ``busy`` with a hint its client honours (`p2p.libp2p.source`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fbs.did import DatasetId
from fbs.multiformats import Multihash
from p2p.errors import PeerUnavailable, RemoteError, TransferError
from p2p.libp2p.admission import Admission, AdmissionLimits
from p2p.libp2p.exchange import EXCHANGE_PROTOCOL, ExchangeClient, ExchangeServer
from p2p.libp2p.host import P2PHost
from p2p.libp2p.source import Libp2pSource
from storage.workspace import Workspace
from tests.p2p.sync_helpers import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

LIMITS = AdmissionLimits(
    request_timeout_s=0.5,
    max_streams_per_peer=3,
    objects_per_s=2.0,
    objects_burst=2,
    busy_retry_after_s=0.2,
)


@dataclass
class Net:
    server: ExchangeServer
    node: P2PHost
    hostile: P2PHost
    honest: P2PHost
    did: DatasetId
    obj: Multihash


@pytest.fixture
async def net(tmp_path: Path) -> AsyncIterator[Net]:
    ws = Workspace.init(tmp_path / "node")
    ds = ws.create_dataset("acme/things")
    state = ds.state()
    assert state is not None
    data = os.urandom(200_000)
    h = Multihash.sha3_256(data)
    ds.layout.data.put(h, data)
    node, hostile, honest = P2PHost(), P2PHost(), P2PHost()
    server = ExchangeServer(ws, admission=Admission(LIMITS))
    server.register(node)
    async with node, hostile, honest:
        await hostile.connect(node.addrs[0])
        await honest.connect(node.addrs[0])
        yield Net(server, node, hostile, honest, state.dataset_id, h)


async def _head(host: P2PHost, net: Net) -> Multihash | None:
    client = ExchangeClient(host)
    remote = await host.run_trio(client.get_head, net.node.peer_id, net.did)
    return remote.head


async def test_parked_streams_are_capped_and_closed_the_honest_peer_is_served(net: Net) -> None:
    parked = []
    for _ in range(5):
        # A stream over the cap is reset at once: opening fails or the stream dies.
        with contextlib.suppress(PeerUnavailable):
            parked.append(await net.hostile.open_stream(net.node.peer_id, EXCHANGE_PROTOCOL))
    stats = net.server.admission.stats
    await wait_for(lambda: stats.streams_refused >= 2, "streams over the cap to be refused")
    await wait_for(lambda: stats.idle_closed >= 3, "silent streams to be closed at the deadline")
    assert await _head(net.honest, net) is not None  # never blocked by the parked ones
    for s in parked:
        with contextlib.suppress(Exception):
            await s.close()
    # The hostile peer's own slots are free again once its streams are gone.
    await wait_for(lambda: net.server.admission.peer_load(net.hostile.peer_id)[0] == 0, "release")
    assert await _head(net.hostile, net) is not None


async def test_object_rate_over_budget_is_busy_with_a_hint_the_client_honours(
    net: Net, tmp_path: Path
) -> None:
    client = ExchangeClient(net.hostile)
    peer = net.node.peer_id

    async def fetch(i: int) -> None:
        dest = tmp_path / f"o{i}"
        await net.hostile.run_trio(client.get_object, peer, net.did, "data", net.obj, dest)

    await fetch(0)
    await fetch(1)  # the burst
    with pytest.raises(RemoteError) as e:
        await fetch(2)
    assert e.value.code == "busy" and e.value.retry_after_s == pytest.approx(0.5)
    # A patient source (the one pulls use) waits out the hint and gets the object.
    source = Libp2pSource(net.hostile, client, peer, net.did)
    t0 = time.monotonic()
    digest = await source.get_object("data", net.obj, tmp_path / "patient")
    assert digest == net.obj.digest
    assert time.monotonic() - t0 >= 0.2
    assert net.server.admission.stats.busy >= 2
    # Budgets are per peer: the honest peer was never told busy.
    honest = ExchangeClient(net.honest)
    for i in range(2):
        dest = tmp_path / f"h{i}"
        await net.honest.run_trio(honest.get_object, peer, net.did, "data", net.obj, dest)


async def test_an_aborted_download_is_counted_not_logged_as_a_failure(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    import json
    import struct

    body = json.dumps(
        {"op": "object", "dataset": net.did.to_did_odf(), "kind": "data", "hash": str(net.obj)}
    ).encode()
    stream = await net.hostile.open_stream(net.node.peer_id, EXCHANGE_PROTOCOL)
    await stream.write(struct.pack(">IB", len(body), 1) + body)
    with contextlib.suppress(TransferError):
        await stream.read(100)
    await stream.close()
    stats = net.server.admission.stats
    await wait_for(lambda: stats.aborted_downloads >= 1 or net.server.served_requests >= 1, "end")
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
