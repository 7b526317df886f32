"""Attestation gossip between real libp2p hosts on loopback."""

from __future__ import annotations

import dataclasses

import pytest

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from p2p.attestation import Attestation, Verdict, sign_attestation
from p2p.errors import InvalidAttestation
from p2p.libp2p.attestation_gossip import AttestationGossip
from p2p.libp2p.host import P2PHost
from tests.p2p.sync_helpers import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOPIC = "/odf/attestations/test"


def attestation(key: KeyPair, seq: int) -> Attestation:
    return sign_attestation(
        key,
        dataset_id=KeyPair(b"\x07" * 32).dataset_id,
        block_hash=Multihash.sha3_256(b"block %d" % seq),
        sequence_number=seq,
        verdict=Verdict.DIVERGED,
        detail="newData.logicalHash",
        engine="spark (test)",
    )


async def test_attestations_travel_and_forgeries_die_at_the_first_hop() -> None:
    got: list[tuple[Attestation, str]] = []

    async def on_attestation(att: Attestation, origin: str) -> None:
        got.append((att, origin))

    async def ignore(_att: Attestation, _origin: str) -> None:
        return None

    async with P2PHost() as a, P2PHost() as b, P2PHost() as m:
        ga = AttestationGossip(a, ignore, topic=TOPIC)
        gb = AttestationGossip(b, on_attestation, topic=TOPIC)
        await ga.start()
        await gb.start()
        await b.connect(a.addrs[0])
        await m.connect(b.addrs[0])
        await wait_for(
            lambda: b.peer_id in a.mesh_peers(TOPIC) and b.peer_id in m.mesh_peers(TOPIC),
            "meshes to form",
        )
        key = KeyPair.generate()
        good = attestation(key, 1)
        await ga.publish(good)
        await wait_for(lambda: len(got) == 1, "B to receive the attestation")
        assert got == [(good, a.peer_id)]

        forged = dataclasses.replace(good, signature=attestation(KeyPair.generate(), 1).signature)
        with pytest.raises(InvalidAttestation):
            await ga.publish(forged)  # never sent by an honest node
        # M has no validator of its own and publishes garbage and the forgery anyway.
        await m.publish(TOPIC, forged.to_json())
        await m.publish(TOPIC, b"{not json")
        await wait_for(lambda: gb.rejected >= 2, "B to reject both")
        # The same attestation relayed again (by M this time) is not delivered twice.
        await m.publish(TOPIC, good.to_json())
        second = attestation(key, 2)
        await ga.publish(second)
        await wait_for(lambda: len(got) == 2, "the second attestation")
        assert [g[0] for g in got] == [good, second]
        await wait_for(lambda: gb.duplicates >= 1, "the relayed copy to be dropped")
