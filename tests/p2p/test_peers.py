"""Peer scoring: penalties, bans, expiry, ordering (p2p.peers)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.peers import MAX_TRACKED_PEERS, Offence, PeerScores, ScoringPolicy


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_wrong_bytes_bans_at_once_and_notifies() -> None:
    clock = FakeClock()
    scores = PeerScores(clock=clock)
    banned: list[tuple[str, str]] = []
    scores.add_ban_listener(lambda p, r: banned.append((p, r)))
    standing = scores.penalise("bad", Offence.BAD_BYTES, "hash mismatch")
    assert scores.is_banned("bad")
    assert standing.banned_until == clock.now + scores.policy.ban_duration_s
    assert banned == [("bad", "BAD_BYTES: hash mismatch")]
    # A second offence while banned does not notify again.
    scores.penalise("bad", Offence.TIMEOUT)
    assert len(banned) == 1


def test_stalls_take_several_offences() -> None:
    scores = PeerScores(clock=FakeClock())
    scores.penalise("slow", Offence.TIMEOUT)
    scores.penalise("slow", Offence.TIMEOUT)
    assert not scores.is_banned("slow")
    scores.penalise("slow", Offence.TIMEOUT)
    assert scores.is_banned("slow")
    assert scores.standing("slow").offences == 3


def test_ban_expires_and_peer_returns_on_probation() -> None:
    clock = FakeClock()
    policy = ScoringPolicy(ban_duration_s=60.0)
    scores = PeerScores(policy, clock=clock)
    scores.penalise("p", Offence.BAD_BYTES)
    clock.now += 59.0
    assert scores.is_banned("p")
    clock.now += 1.0
    assert not scores.is_banned("p")
    assert scores.score("p") == policy.after_ban
    # On probation: one more serious offence bans again.
    scores.penalise("p", Offence.LIMIT_EXCEEDED)
    assert scores.is_banned("p")


def test_usable_orders_by_score_and_skips_banned() -> None:
    scores = PeerScores(clock=FakeClock())
    for _ in range(5):
        scores.reward("good")
    scores.penalise("meh", Offence.UNAVAILABLE)
    scores.penalise("evil", Offence.BAD_BYTES)
    assert scores.usable(["meh", "evil", "new", "good"]) == ["good", "new", "meh"]


def test_rewards_are_capped_and_ignored_while_banned() -> None:
    policy = ScoringPolicy(max_score=3.0)
    scores = PeerScores(policy, clock=FakeClock())
    for _ in range(10):
        scores.reward("p")
    assert scores.score("p") == 3.0
    scores.penalise("q", Offence.BAD_BYTES)
    before = scores.score("q")
    scores.reward("q")
    assert scores.score("q") == before


def test_custom_penalties() -> None:
    policy = ScoringPolicy(penalties={Offence.UNAVAILABLE: 200.0})
    scores = PeerScores(policy, clock=FakeClock())
    scores.penalise("p", Offence.UNAVAILABLE)
    assert scores.is_banned("p")


def test_failing_listener_does_not_break_penalise() -> None:
    scores = PeerScores(clock=FakeClock())

    def boom(_p: str, _r: str) -> None:
        raise RuntimeError("listener bug")

    scores.add_ban_listener(boom)
    standing = scores.penalise("p", Offence.BAD_BYTES)
    assert standing.banned_until is not None


def test_tracking_is_bounded_and_keeps_bans() -> None:
    scores = PeerScores(clock=FakeClock())
    scores.penalise("banned", Offence.BAD_BYTES)
    for i in range(MAX_TRACKED_PEERS + 5):
        scores.reward(f"p{i}")
    assert len(scores.snapshot()) <= MAX_TRACKED_PEERS
    assert scores.is_banned("banned")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([*Offence, None]), max_size=30))
def test_banned_iff_score_reached_threshold(events: list[Offence | None]) -> None:
    scores = PeerScores(clock=FakeClock())
    ever_at_threshold = False
    for ev in events:
        if ev is None:
            scores.reward("p")
        else:
            scores.penalise("p", ev)
        ever_at_threshold |= scores.score("p") <= scores.policy.drop_threshold
        assert scores.score("p") <= scores.policy.max_score
    assert scores.is_banned("p") == ever_at_threshold
