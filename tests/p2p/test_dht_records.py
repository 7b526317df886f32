"""The DHT's pure parts: keys of a dataset, the head-record validator, the evidence log."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.dht.evidence import EvidenceLog
from p2p.dht.keys import MAX_KEY_BYTES, head_key, provider_key
from p2p.dht.records import HeadRecordValidator, best_record, parse_head_value
from p2p.dht.settings import DhtSettings
from p2p.errors import InvalidHeadRecord
from p2p.head_record import HeadRecord, sign_head

KEY = KeyPair(bytes(range(32)))
OTHER = KeyPair(bytes(range(1, 33)))
T = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")


def rec(seq: int, tag: str = "", key: KeyPair = KEY) -> HeadRecord:
    return sign_head(
        key, Multihash.sha3_256(f"b{seq}{tag}".encode()), seq, Timestamp(T.nanos + seq)
    )


def test_keys_are_fixed_size_and_per_dataset() -> None:
    a, b = rec(1).dataset_id, rec(1, key=OTHER).dataset_id
    assert len(head_key(a).encode()) == MAX_KEY_BYTES
    assert head_key(a).startswith("/odf-head/") and head_key(a) != head_key(b)
    assert provider_key(a)[:2] == b"\x12\x20" and len(provider_key(a)) == 34
    assert provider_key(a) != provider_key(b)
    # The canonical DID decides, whatever multibase the ID was parsed from.
    assert head_key(DatasetId.from_did(a.to_did_odf())) == head_key(a)


def test_validator_takes_only_verified_records_under_their_own_key() -> None:
    v = HeadRecordValidator()
    r = rec(1)
    v.validate(head_key(r.dataset_id), r.to_json())
    with pytest.raises(InvalidHeadRecord, match="another key"):
        v.validate(head_key(rec(1, key=OTHER).dataset_id), r.to_json())
    forged = HeadRecord(r.dataset_id, r.head, 2, r.system_time, r.signature)
    with pytest.raises(InvalidHeadRecord):
        v.validate(head_key(r.dataset_id), forged.to_json())
    with pytest.raises(InvalidHeadRecord):
        v.validate(head_key(r.dataset_id), b"x" * 2000)
    with pytest.raises(InvalidHeadRecord):
        parse_head_value(head_key(r.dataset_id), b"{}")


def test_select_keeps_the_highest_and_the_held_one_on_a_fork() -> None:
    seen = EvidenceLog(10)
    v = HeadRecordValidator(seen.add)
    k = head_key(rec(1).dataset_id)
    assert v.select(k, [rec(1).to_json(), rec(3).to_json(), rec(2).to_json()]) == 1
    assert v.select(k, [rec(2).to_json(), rec(1).to_json()]) == 0
    assert seen.pairs() == []
    assert v.select(k, [rec(2).to_json(), rec(2, "fork").to_json()]) == 0
    assert v.select(k, [rec(2, "fork").to_json(), rec(2).to_json()]) == 0
    (pair,) = seen.pairs()  # one pair, whichever order it was seen in
    assert {pair[0].head, pair[1].head} == {rec(2).head, rec(2, "fork").head}
    assert pair[0].head < pair[1].head


@given(st.lists(st.integers(0, 20), min_size=1, max_size=12))
def test_best_record_is_the_first_of_the_highest(seqs: list[int]) -> None:
    records = [rec(s) for s in seqs]
    best = best_record(records)
    assert seqs[best] == max(seqs) and best == seqs.index(max(seqs))


def test_evidence_log_is_bounded_and_ignores_non_conflicts() -> None:
    log = EvidenceLog(2)
    log.add(rec(1), rec(1))
    log.add(rec(1), rec(2))
    log.add(rec(1), rec(1, key=OTHER))
    assert log.pairs() == []
    for i in range(3):
        log.add(rec(5, f"a{i}"), rec(5, f"b{i}"))
    assert len(log.pairs()) == 2 and log.dropped == 1
    assert best_record([]) == -1


@pytest.mark.parametrize(
    "bad",
    [{"quorum": 0}, {"reprovide_interval_s": 0}, {"query_timeout_s": -1}, {"max_evidence": 0}],
)
def test_settings_refuse_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        DhtSettings(**bad)  # type: ignore[arg-type]
