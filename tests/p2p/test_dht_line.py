"""The DHT between real hosts: five in a line, the last finds what the first published.

Each host is connected only to the one before it. The first provides a dataset and
puts two head records (seq 1, then seq 2); the last, with no connection to the first,
finds it as the provider through the DHT, dials it at the address the DHT gave, and
reads seq 2 with a quorum. A lower-sequence record is refused by the storing peers,
and a record for another dataset's key is refused everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import pytest
import trio
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.records.record import make_signed_put_record

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.dht.keys import head_key, provider_key
from p2p.dht.node import DhtNode, HeadLookup
from p2p.dht.protocol import ODF_KAD_PROTOCOL
from p2p.dht.settings import DhtSettings
from p2p.errors import StaleHead
from p2p.head_record import HeadRecord, sign_head
from p2p.libp2p.host import P2PHost

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]

KEY = KeyPair(bytes(range(32)))
OTHER = KeyPair(bytes(range(1, 33)))
T = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")
SETTINGS = DhtSettings(quorum=3, lookup_timeout_s=20.0, query_timeout_s=5.0)


def rec(seq: int, key: KeyPair = KEY, tag: str = "") -> HeadRecord:
    head = Multihash.sha3_256(f"block-{seq}{tag}".encode())
    return sign_head(key, head, seq, Timestamp(T.nanos + seq))


@contextlib.asynccontextmanager
async def line(n: int, settings: DhtSettings = SETTINGS) -> AsyncIterator[list[P2PHost]]:
    """``n`` DHT hosts, each connected to the one before it only; all stopped after."""
    hosts = [P2PHost(dht=settings) for _ in range(n)]
    try:
        for h in hosts:
            await h.start()
        for prev, h in itertools.pairwise(hosts):
            await asyncio.wait_for(h.connect(prev.addrs[0]), 20)
        # Wait until each host's routing table holds its neighbours.
        for i, h in enumerate(hosts):
            want = 1 if i in (0, n - 1) else 2
            await _until(h, lambda d, want=want: d.routing_table_size >= want)
        yield hosts
    finally:
        for h in hosts:
            await h.stop()


async def _until(host: P2PHost, ok: object, timeout_s: float = 20.0) -> None:
    async def poll() -> bool:
        with trio.move_on_after(timeout_s):
            while not ok(host.dht):  # type: ignore[operator]
                await trio.sleep(0.05)
            return True
        return False

    assert await host.run_trio(poll), "routing table did not fill in time"


async def _put_at(host: P2PHost, peer: ID, key: bytes, value: bytes) -> bool:
    """PUT_VALUE ``value`` at ``peer`` (trio thread): whether the peer acknowledged it.

    The record is built here: without one, py-libp2p sends the record the sending host
    holds for ``key``, whatever ``value`` says.
    """
    lib = host.libp2p_host
    record = make_signed_put_record(key, value, lib.get_private_key())
    return bool(await host.dht.kad.value_store._store_at_peer(peer, key, value, record=record))


async def _get(host: P2PHost, record: HeadRecord) -> HeadLookup:
    async def go() -> HeadLookup:
        return await host.dht.get_head(record.dataset_id)

    return await host.run_trio(go)


async def test_last_of_five_finds_the_provider_and_the_newest_head() -> None:
    async with line(5) as hosts:
        first, last = hosts[0], hosts[-1]
        assert first.peer_id not in last.peers()
        r1, r2 = rec(1), rec(2)

        async def publish() -> bool:
            dht = first.dht
            provided = await dht.provide(r1.dataset_id)
            await dht.put_head(r1)
            await dht.put_head(r2)
            return provided

        assert await first.run_trio(publish)

        async def find() -> list[str]:
            found = await last.dht.find_providers(r1.dataset_id)
            return [str(p.peer_id) for p in found] + [str(a) for p in found for a in p.addrs]

        found = await last.run_trio(find)
        assert found[0] == first.peer_id
        addr = next(a for a in found[1:] if a.startswith("/ip4/127.0.0.1/tcp/"))
        assert await asyncio.wait_for(last.connect(f"{addr}/p2p/{first.peer_id}"), 20)

        got = await _get(last, r2)
        assert got.record == r2
        assert got.quorum_met and got.answers >= 3 and got.invalid == 0


async def test_lower_sequence_and_foreign_records_are_refused() -> None:
    async with line(3) as hosts:
        first, mid, last = hosts
        r1, r2 = rec(1), rec(2)

        async def publish_two() -> None:
            await first.dht.put_head(r2)

        await first.run_trio(publish_two)
        key = head_key(r1.dataset_id).encode()
        mid_id = ID.from_base58(mid.peer_id)

        async def offer(value: bytes) -> bool:
            return await _put_at(last, mid_id, key, value)

        # A storing peer holding seq 2 refuses seq 1 (no acknowledgement) and keeps seq 2.
        assert not await last.run_trio(offer, r1.to_json())
        # A record stored under another dataset's key is refused.
        foreign = rec(5, OTHER)
        assert not await last.run_trio(offer, foreign.to_json())
        # The publisher refuses to put an older record itself.
        with pytest.raises(StaleHead):
            await first.run_trio(first.dht.put_head, r1)
        got = await _get(last, r2)
        assert got.record == r2 and got.answers >= 2

        async def held_at_mid() -> bytes | None:
            stored = mid.dht.kad.value_store.get(key)
            return None if stored is None else bytes(stored.value)

        assert await mid.run_trio(held_at_mid) == r2.to_json()
        # The same PUT with a higher sequence number is taken: the refusals above were
        # the validator's, not a broken request.
        r3 = rec(3)
        assert await last.run_trio(offer, r3.to_json())
        assert await mid.run_trio(held_at_mid) == r3.to_json()


async def test_same_sequence_other_head_is_kept_as_evidence_not_served() -> None:
    async with line(3) as hosts:
        first, mid, last = hosts
        r2, fork = rec(2), rec(2, tag="fork")
        await first.run_trio(first.dht.put_head, r2)
        key = head_key(r2.dataset_id).encode()
        mid_id = ID.from_base58(mid.peer_id)

        assert not await last.run_trio(_put_at, last, mid_id, key, fork.to_json())
        assert mid.dht.evidence.pairs() == [tuple(sorted((r2, fork), key=lambda r: r.head))]
        got = await _get(last, r2)
        assert got.record == r2


async def test_the_dht_speaks_only_the_odf_protocol_id() -> None:
    async with line(2) as (a, _b):

        async def protocols() -> list[str]:
            return [str(p) for p in a.libp2p_host.get_mux().get_protocols()]

        served = await a.run_trio(protocols)
        assert str(ODF_KAD_PROTOCOL) in served
        assert "/ipfs/kad/1.0.0" not in served
        assert isinstance(a.dht, DhtNode)


async def test_provided_datasets_are_announced_again_on_schedule() -> None:
    # Every 2 s: within the storing peer's limit of 10 ADD_PROVIDER per 10 s per peer.
    fast = DhtSettings(reprovide_interval_s=2.0, lookup_timeout_s=10.0, query_timeout_s=5.0)
    async with line(2, fast) as (a, b):
        did = rec(1).dataset_id
        assert await a.run_trio(a.dht.provide, did)
        key = provider_key(did)

        def held_at_b() -> list[str]:
            return [str(p.peer_id) for p in b.dht.kad.provider_store.get_providers(key)]

        async def held_within(seconds: float) -> bool:
            with trio.move_on_after(seconds):
                while held_at_b() != [a.peer_id]:
                    await trio.sleep(0.05)
                return True
            return False

        async def forget_then_wait() -> bool:
            # The first ADD_PROVIDER can arrive before b has identified a (it is then
            # lost); the schedule makes up for it, which is what this test is about.
            assert await held_within(10)
            b.dht.kad.provider_store.providers.clear()  # as if the record had expired
            assert held_at_b() == []
            return await held_within(10)

        assert await b.run_trio(forget_then_wait)
        a.dht.stop_providing(did)

        async def forget_and_stay_forgotten() -> bool:
            b.dht.kad.provider_store.providers.clear()
            await trio.sleep(5)  # two intervals and a half
            return held_at_b() == []

        assert await b.run_trio(forget_and_stay_forgotten)


async def test_a_provider_held_locally_does_not_hide_the_others() -> None:
    async with line(3) as (a, b, c):
        did = rec(1).dataset_id
        key = provider_key(did)

        async def seed_locally() -> None:
            # As if c had stored b's record earlier: a lookup must still ask the network.
            lib = b.libp2p_host
            c.dht.kad.provider_store.add_provider(key, PeerInfo(lib.get_id(), lib.get_addrs()))

        await c.run_trio(seed_locally)
        assert await a.run_trio(a.dht.provide, did)

        async def find() -> list[str]:
            return [str(p.peer_id) for p in await c.dht.find_providers(did)]

        found = await c.run_trio(find)
        assert sorted(found) == sorted([a.peer_id, b.peer_id])  # each holder once
