"""Fair service between real hosts: a peer that keeps the exchange's shared capacity full
cannot starve another peer's requests (`p2p.libp2p.fair_queue` in the exchange server).

The server's shared capacity is small (4 requests); a greedy peer runs 8 download loops
that ask again the moment they are answered or refused. A peer asking for the head now
and then must be answered (not ``busy``): its request waits for the next freed slot, in
turn with the greedy peer's, instead of losing every race for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from fbs.multiformats import Multihash
from p2p.errors import RemoteError
from p2p.libp2p.admission import Admission, AdmissionLimits
from p2p.libp2p.exchange import ExchangeClient, ExchangeServer
from p2p.libp2p.host import P2PHost
from storage.workspace import Workspace

pytestmark = [pytest.mark.timeout(120)]

LIMITS = AdmissionLimits(
    max_requests=4,
    max_requests_per_peer=4,
    reserved_requests=0,
    max_object_reads=4,
    max_object_reads_per_peer=4,
    objects_per_s=10_000.0,
    objects_burst=10_000,
)
HEAD_REQUESTS = 10


def test_a_greedy_peer_does_not_starve_another_peers_head_requests(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "node")
    assert ws is not None
    ds = ws.create_dataset("acme/things")
    state = ds.state()
    assert state is not None
    data = os.urandom(1 << 20)
    obj = Multihash.sha3_256(data)
    ds.layout.data.put(obj, data)
    server = ExchangeServer(ws, admission=Admission(LIMITS))

    async def main() -> tuple[int, int]:
        node, greedy, honest = P2PHost(), P2PHost(), P2PHost()
        server.register(node)
        async with node, greedy, honest:
            await greedy.connect(node.addrs[0])
            await honest.connect(node.addrs[0])
            stop = asyncio.Event()
            grab = ExchangeClient(greedy)

            async def download_loop(i: int) -> None:
                dest = tmp_path / f"g{i}"
                while not stop.is_set():
                    with contextlib.suppress(RemoteError):
                        await greedy.run_trio(
                            grab.get_object, node.peer_id, state.dataset_id, "data", obj, dest
                        )

            loops = [asyncio.create_task(download_loop(i)) for i in range(8)]
            try:
                await asyncio.sleep(0.5)  # the capacity is full
                ask = ExchangeClient(honest)
                answered, busy = 0, 0
                for _ in range(HEAD_REQUESTS):
                    try:
                        await honest.run_trio(ask.get_head, node.peer_id, state.dataset_id)
                        answered += 1
                    except RemoteError as e:
                        assert e.code == "busy", e
                        busy += 1
                    await asyncio.sleep(0.05)
            finally:
                stop.set()
                for t in loops:
                    t.cancel()
                await asyncio.gather(*loops, return_exceptions=True)
            return answered, busy

    answered, busy = asyncio.run(main())
    assert (answered, busy) == (HEAD_REQUESTS, 0)
    assert server.fair.stats.served_after_wait >= 1  # the capacity was full indeed
