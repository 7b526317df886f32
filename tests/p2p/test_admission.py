"""`p2p.libp2p.admission`: per-peer fairness of the exchange server, no sockets (fake clock)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.libp2p.admission import Admission, AdmissionLimits, Busy, Ticket


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def adm(**limits: object) -> tuple[Admission, Clock]:
    clock = Clock()
    return Admission(AdmissionLimits(**limits), clock=clock), clock  # type: ignore[arg-type]


def test_streams_per_peer_are_capped_and_freed() -> None:
    a, _ = adm(max_streams_per_peer=3)
    assert [a.open_stream("evil") for _ in range(4)] == [True, True, True, False]
    assert a.open_stream("honest")  # another peer is not affected
    a.close_stream("evil")
    assert a.open_stream("evil")
    assert a.stats.streams_refused == 1


def test_one_peer_cannot_take_every_request_slot() -> None:
    a, _ = adm(max_requests=10, max_requests_per_peer=4, reserved_requests=2)
    evil = [a.admit("evil", "blocks") for _ in range(6)]
    assert sum(isinstance(t, Ticket) for t in evil) == 4
    assert isinstance(evil[-1], Busy) and "this peer" in evil[-1].reason
    # Sybils fill the unreserved rest: 4 + 2 + 2 = 8 = 10 - 2 reserved.
    for sybil in ("s1", "s2"):
        assert all(isinstance(a.admit(sybil, "blocks"), Ticket) for _ in range(2))
    third = a.admit("s1", "blocks")
    assert isinstance(third, Busy) and "reserved" in third.reason
    # The reserve still serves a newcomer with nothing in flight.
    assert isinstance(a.admit("honest", "head"), Ticket)
    assert isinstance(a.admit("honest2", "head"), Ticket)
    full = a.admit("honest3", "head")
    assert isinstance(full, Busy) and "capacity" in full.reason
    assert full.retry_after_s > 0


def test_release_frees_slots() -> None:
    a, _ = adm(max_requests=2, max_requests_per_peer=2, reserved_requests=0)
    t1, t2 = a.admit("p", "head"), a.admit("p", "head")
    assert isinstance(t1, Ticket) and isinstance(t2, Ticket)
    assert isinstance(a.admit("q", "head"), Busy)
    a.release(t1)
    assert isinstance(a.admit("q", "head"), Ticket)
    assert a.in_flight == 2


def test_object_reads_are_capped_per_peer_and_globally() -> None:
    a, _ = adm(max_object_reads=3, max_object_reads_per_peer=2)
    got = [a.admit("p", "object") for _ in range(3)]
    assert [isinstance(t, Ticket) for t in got] == [True, True, False]
    assert isinstance(a.admit("p", "blocks"), Ticket)  # only object bodies are capped
    assert isinstance(a.admit("q", "object"), Ticket)
    r = a.admit("r", "object")
    assert isinstance(r, Busy) and "object downloads at capacity" in r.reason
    first = got[0]
    assert isinstance(first, Ticket)
    a.release(first)
    assert isinstance(a.admit("r", "object"), Ticket)


def test_object_request_rate_is_budgeted_per_peer() -> None:
    a, clock = adm(objects_per_s=2.0, objects_burst=3, max_object_reads_per_peer=100)
    results = []
    for _ in range(5):
        t = a.admit("p", "object")
        results.append(isinstance(t, Ticket))
        if isinstance(t, Ticket):
            a.release(t)
    assert results == [True, True, True, False, False]
    clock.now += 0.5  # one object's worth of budget back
    t = a.admit("p", "object")
    assert isinstance(t, Ticket)
    a.release(t)
    assert isinstance(a.admit("p", "object"), Busy)
    assert isinstance(a.admit("q", "object"), Ticket)


def test_upload_budget_slows_down_instead_of_refusing() -> None:
    a, clock = adm(upload_bytes_per_s=1000.0, upload_burst_bytes=3000)
    assert a.upload_delay("p", 2000) == 0.0
    assert a.upload_delay("p", 1000) == 0.0
    assert a.upload_delay("p", 500) == pytest.approx(0.5)
    clock.now += 0.5  # the wait was paid
    assert a.upload_delay("p", 1000) == pytest.approx(1.0)
    assert a.upload_delay("q", 3000) == 0.0  # per peer
    assert a.stats.throttled_s == pytest.approx(1.5)


def test_a_peer_that_reconnects_keeps_its_spent_budget() -> None:
    a, clock = adm(upload_bytes_per_s=1000.0, upload_burst_bytes=1000)
    assert a.open_stream("p")
    a.upload_delay("p", 1000)
    a.close_stream("p")  # idle, but its bucket is empty: still remembered
    assert a.upload_delay("p", 1000) == pytest.approx(1.0)
    clock.now += 100
    a.open_stream("p")
    a.close_stream("p")  # full again: forgotten
    assert a.peer_load("p") == (0, 0, 0)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_requests": 0},
        {"reserved_requests": 64},
        {"request_timeout_s": 0},
        {"upload_bytes_per_s": -1},
    ],
)
def test_nonsense_limits_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        AdmissionLimits(**bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["admit", "release", "open", "close"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.sampled_from(["head", "blocks", "object"]),
        ),
        max_size=200,
    )
)
def test_limits_hold_under_any_interleaving(ops: list[tuple[str, str, str]]) -> None:
    lim = AdmissionLimits(
        max_requests=6,
        max_requests_per_peer=3,
        reserved_requests=1,
        max_object_reads=3,
        max_object_reads_per_peer=2,
        max_streams_per_peer=2,
    )
    a = Admission(lim, clock=Clock())
    held: list[Ticket] = []
    streams: dict[str, int] = {}
    for op, peer, kind in ops:
        if op == "admit":
            t = a.admit(peer, kind)  # type: ignore[arg-type]
            if isinstance(t, Ticket):
                held.append(t)
        elif op == "release" and held:
            a.release(held.pop(0))
        elif op == "open":
            if a.open_stream(peer):
                streams[peer] = streams.get(peer, 0) + 1
        elif op == "close" and streams.get(peer):
            streams[peer] -= 1
            a.close_stream(peer)
        assert a.in_flight == len(held) <= lim.max_requests
        assert sum(t.op == "object" for t in held) <= lim.max_object_reads
        for p in "abcd":
            mine = [t for t in held if t.peer == p]
            assert len(mine) <= lim.max_requests_per_peer
            assert sum(t.op == "object" for t in mine) <= lim.max_object_reads_per_peer
            assert a.peer_load(p)[:2] == (streams.get(p, 0), len(mine))
