"""Per-peer queues for the exchange's shared capacity (`p2p.libp2p.fair_queue`), on trio.

A real `Admission` with a small shared capacity: peer A fills it and queues more; peer
B's one request must be served before A's later ones (peers in turn), never taken by a
request that arrives after the queue formed, and never queued when it is over its own
per-peer share.
"""

from __future__ import annotations

import pytest
import trio

from p2p.libp2p.admission import Admission, AdmissionLimits, Busy, Ticket
from p2p.libp2p.fair_queue import CAPACITY_REASONS, FairAdmission

pytestmark = [pytest.mark.timeout(30)]


def _fair(max_requests: int = 2, per_peer: int = 8, wait_s: float = 5.0) -> FairAdmission:
    limits = AdmissionLimits(
        max_requests=max_requests,
        max_requests_per_peer=per_peer,
        reserved_requests=0,
        max_object_reads=max_requests,
        max_object_reads_per_peer=per_peer,
    )
    return FairAdmission(Admission(limits), wait_s=wait_s, max_waiting_per_peer=4)


def test_a_peer_with_one_request_is_served_before_another_peers_queue() -> None:
    async def main() -> list[str]:
        fair, served = _fair(), []
        held = [await fair.admit("A", "head") for _ in range(2)]
        assert all(isinstance(t, Ticket) for t in held)

        async def request(peer: str) -> None:
            ticket = await fair.admit(peer, "object")
            assert isinstance(ticket, Ticket), ticket
            served.append(peer)
            held.append(ticket)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(request, "A")
                await trio.sleep(0.01)
            nursery.start_soon(request, "B")  # queued after A's three
            await trio.sleep(0.01)
            assert fair.stats.waiting == 4
            for _ in range(4):
                fair.release(held.pop(0))
                await trio.sleep(0.01)
        return served

    # In turn: A's oldest, then B, then A's other two (a plain queue: A, A, A, B).
    assert trio.run(main) == ["A", "B", "A", "A"]


def test_a_new_request_does_not_take_a_slot_freed_for_the_queue() -> None:
    async def main() -> None:
        fair = _fair(max_requests=1)
        first = await fair.admit("A", "head")
        assert isinstance(first, Ticket)
        got: list[Ticket | Busy] = []

        async def waiter() -> None:
            got.append(await fair.admit("B", "head"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.01)
            fair.release(first)  # freed for B
            c = await _admit_with_timeout(fair, "C", 0.05)
            assert isinstance(c, Busy)  # C queued behind B, gave up after its wait
        assert isinstance(got[0], Ticket)

    trio.run(main)


async def _admit_with_timeout(fair: FairAdmission, peer: str, wait_s: float) -> Ticket | Busy:
    fair.wait_s = wait_s
    try:
        return await fair.admit(peer, "head")
    finally:
        fair.wait_s = 5.0


def test_the_wait_is_bounded() -> None:
    async def main() -> None:
        fair = _fair(max_requests=1, wait_s=0.2)
        assert isinstance(await fair.admit("A", "head"), Ticket)
        t0 = trio.current_time()
        busy = await fair.admit("B", "head")
        assert isinstance(busy, Busy) and busy.reason in CAPACITY_REASONS
        assert 0.15 <= trio.current_time() - t0 < 1.0
        assert fair.stats.gave_up == 1 and fair.stats.waiting == 0

    trio.run(main)


def test_a_peer_over_its_own_share_is_refused_at_once() -> None:
    async def main() -> None:
        fair = _fair(max_requests=8, per_peer=1)
        assert isinstance(await fair.admit("A", "head"), Ticket)
        with trio.fail_after(0.1):
            busy = await fair.admit("A", "head")
        assert isinstance(busy, Busy) and busy.reason not in CAPACITY_REASONS
        assert fair.stats.queued == 0

    trio.run(main)


def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    async def main() -> None:
        fair = _fair(max_requests=1)
        first = await fair.admit("A", "head")
        assert isinstance(first, Ticket)
        got: list[Ticket | Busy] = []

        async def wait_for(peer: str) -> None:
            got.append(await fair.admit(peer, "head"))

        async with trio.open_nursery() as nursery:
            b_scope = trio.CancelScope()

            async def b() -> None:
                with b_scope:
                    await wait_for("B")

            nursery.start_soon(b)
            await trio.sleep(0.01)
            nursery.start_soon(wait_for, "C")
            await trio.sleep(0.01)
            # B's stream ends while it waits; the slot freed in the same moment wakes B,
            # which must hand it on to C rather than lose it.
            b_scope.cancel()
            fair.release(first)
            await trio.sleep(0.05)
        assert len(got) == 1 and isinstance(got[0], Ticket) and got[0].peer == "C"

    trio.run(main)


def test_capacity_reasons_are_admissions_own() -> None:
    # Admission's shared-capacity refusals, produced for real: the set must name them.
    limits = AdmissionLimits(
        max_requests=4,
        max_requests_per_peer=4,
        reserved_requests=2,
        max_object_reads=1,
        max_object_reads_per_peer=1,
    )
    adm = Admission(limits)
    assert isinstance(adm.admit("A", "object"), Ticket)
    objects_full = adm.admit("B", "object")
    assert isinstance(adm.admit("A", "head"), Ticket)
    reserved = adm.admit("A", "head")
    assert isinstance(adm.admit("B", "head"), Ticket) and isinstance(adm.admit("C", "head"), Ticket)
    full = adm.admit("D", "head")
    reasons = [r.reason for r in (objects_full, reserved, full) if isinstance(r, Busy)]
    assert len(reasons) == 3 and set(reasons) == CAPACITY_REASONS
