"""HeadStore: high-water marks, replay/rollback refusal, equivocation evidence, restarts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.errors import Equivocation, InvalidHeadRecord, NotDescendant, StaleHead
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore

KEY = KeyPair(bytes(range(32)))
OTHER = KeyPair(bytes(range(1, 33)))
T = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")


def h(tag: str) -> Multihash:
    return Multihash.sha3_256(tag.encode())


def rec(seq: int, tag: str | None = None, key: KeyPair = KEY) -> HeadRecord:
    return sign_head(key, h(tag or f"b{seq}"), seq, Timestamp(T.nanos + seq))


def yes(_old: Multihash, _new: Multihash) -> bool:
    return True


def no(_old: Multihash, _new: Multihash) -> bool:
    return False


def test_first_and_higher_records_are_accepted(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    d1 = store.accept(rec(1), is_descendant=no)  # not consulted for the first record
    assert d1.previous is None and store.get(KEY.dataset_id) == rec(1)
    seen: list[tuple[Multihash, Multihash]] = []

    def spy(old: Multihash, new: Multihash) -> bool:
        seen.append((old, new))
        return True

    d2 = store.accept(rec(5), is_descendant=spy)
    assert d2.previous == rec(1) and seen == [(h("b1"), h("b5"))]
    assert store.get(KEY.dataset_id) == rec(5)
    assert store.list() == [rec(5)]


def test_replay_and_lower_sequence_are_stale(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    store.accept(rec(5), is_descendant=yes)
    with pytest.raises(StaleHead, match="replay"):
        store.accept(rec(5), is_descendant=yes)
    with pytest.raises(StaleHead):
        store.accept(rec(4), is_descendant=yes)
    # Same head and sequence, signed again with another time: still not newer.
    with pytest.raises(StaleHead):
        store.accept(sign_head(KEY, h("b5"), 5, T), is_descendant=yes)
    assert store.get(KEY.dataset_id) == rec(5)


def test_equivocation_is_recorded_and_raised(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    store.accept(rec(5), is_descendant=yes)
    evil = rec(5, "fork")
    with pytest.raises(Equivocation) as info:
        store.accept(evil, is_descendant=yes)
    assert info.value.held == rec(5) and info.value.offered == evil
    assert store.get(KEY.dataset_id) == rec(5)
    evidence = store.list_evidence()
    assert len(evidence) == 1
    ev = evidence[0]
    assert {ev.first, ev.second} == {rec(5), evil}
    assert ev.sequence_number == 5 and ev.dataset_id == KEY.dataset_id
    # Evidence is self-verifying and survives a restart.
    again = HeadStore(tmp_path).list_evidence(KEY.dataset_id)
    assert again[0].to_json() == ev.to_json()
    assert HeadStore(tmp_path).list_evidence(OTHER.dataset_id) == []
    # check() records the same evidence without duplicating it.
    with pytest.raises(Equivocation):
        store.check(evil)
    assert len(store.list_evidence()) == 1


def test_non_descendant_is_refused(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    store.accept(rec(1), is_descendant=yes)
    with pytest.raises(NotDescendant):
        store.accept(rec(2), is_descendant=no)
    assert store.get(KEY.dataset_id) == rec(1)


def test_forged_and_foreign_records(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    forged = HeadRecord(KEY.dataset_id, h("x"), 9, T, rec(9, key=OTHER).signature)
    with pytest.raises(InvalidHeadRecord):
        store.accept(forged, is_descendant=yes)
    with pytest.raises(InvalidHeadRecord, match="dataset"):
        store.accept(rec(1, key=OTHER), is_descendant=yes, expected_dataset_id=KEY.dataset_id)
    assert store.list() == []


def test_restart_cannot_roll_back(tmp_path: Path) -> None:
    HeadStore(tmp_path).accept(rec(10), is_descendant=yes)
    restarted = HeadStore(tmp_path)
    assert restarted.get(KEY.dataset_id) == rec(10)
    with pytest.raises(StaleHead):
        restarted.accept(rec(9), is_descendant=yes)
    restarted.accept(rec(11), is_descendant=yes)
    assert HeadStore(tmp_path).get(KEY.dataset_id) == rec(11)
    # No temp files are left behind by the durable writes.
    leftovers = [n for n in os.listdir(tmp_path / "heads") if n.startswith(".pending")]
    assert leftovers == []


def test_damaged_held_record_is_an_error_not_a_reset(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    store.accept(rec(3), is_descendant=yes)
    path = tmp_path / "heads" / f"{KEY.dataset_id.as_multibase()}.json"
    path.write_bytes(path.read_bytes().replace(b'"sequenceNumber":3', b'"sequenceNumber":0'))
    with pytest.raises(InvalidHeadRecord, match="damaged"):
        store.get(KEY.dataset_id)
    with pytest.raises(InvalidHeadRecord):
        store.accept(rec(1), is_descendant=yes)


def test_check_does_not_persist(tmp_path: Path) -> None:
    store = HeadStore(tmp_path)
    assert store.check(rec(1)) is None
    assert store.get(KEY.dataset_id) is None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=12))
def test_high_water_mark_only_rises(
    tmp_path_factory: pytest.TempPathFactory, seqs: list[int]
) -> None:
    root = tmp_path_factory.mktemp("hs")
    best = -1
    for seq in seqs:
        store = HeadStore(root)  # a "restart" before every offer
        if seq > best:
            store.accept(rec(seq), is_descendant=yes)
            best = seq
        else:
            with pytest.raises((StaleHead, Equivocation)):
                store.accept(rec(seq, "alt" if seq == best else None), is_descendant=yes)
        held = store.get(KEY.dataset_id)
        assert held is not None and held.sequence_number == best
