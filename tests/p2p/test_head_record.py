"""Head records: canonical signing, wire form, and refusal of every kind of tampering."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.errors import InvalidHeadRecord
from p2p.head_record import (
    HEAD_RECORD_DOMAIN,
    MAX_HEAD_RECORD_BYTES,
    HeadRecord,
    sign_head,
    unsigned_message,
)

KEY = KeyPair(bytes(range(32)))
OTHER = KeyPair(bytes(range(1, 33)))
HEAD = Multihash.sha3_256(b"block 7")
T = Timestamp.parse_rfc3339("2024-05-06T07:08:09.123456789Z")
RECORD = sign_head(KEY, HEAD, 7, T)
WIRE = RECORD.to_json()


def test_roundtrip_and_verify() -> None:
    RECORD.verify()
    parsed = HeadRecord.from_json(WIRE)
    assert parsed == RECORD
    assert parsed.dataset_id == KEY.dataset_id
    doc = json.loads(WIRE)
    assert doc["head"] == HEAD.to_multibase() and doc["sequenceNumber"] == 7
    assert doc["version"] == 1 and doc["datasetId"].startswith("did:odf:fed01")


def test_signing_message_is_versioned_and_binds_every_field() -> None:
    msg = RECORD.signing_message()
    assert msg.startswith(b"odf-head-record\x00\x01")
    variants = [
        unsigned_message(OTHER.dataset_id, HEAD, 7, T),
        unsigned_message(KEY.dataset_id, Multihash.sha3_256(b"x"), 7, T),
        unsigned_message(KEY.dataset_id, HEAD, 8, T),
        unsigned_message(KEY.dataset_id, HEAD, 7, Timestamp(T.nanos + 1)),
    ]
    assert all(v != msg for v in variants) and len(set(variants)) == 4


@pytest.mark.parametrize(
    "change",
    [
        {"head": Multihash.sha3_256(b"other")},
        {"sequence_number": 8},
        {"sequence_number": 6},
        {"system_time": Timestamp(T.nanos + 1)},
        {"dataset_id": OTHER.dataset_id},
        {"signature": bytes(64)},
    ],
)
def test_any_field_change_fails_verification(change: dict[str, object]) -> None:
    tampered = replace(RECORD, **change)  # type: ignore[arg-type]
    with pytest.raises(InvalidHeadRecord):
        tampered.verify()
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_json(tampered.to_json())


def test_forged_key_and_wrong_domain() -> None:
    # Signed by another key but claiming KEY's dataset.
    forged = HeadRecord(
        KEY.dataset_id, HEAD, 7, T, OTHER.sign(RECORD.signing_message(), HEAD_RECORD_DOMAIN)
    )
    with pytest.raises(InvalidHeadRecord):
        forged.verify()
    # The right key, but a signature made for another purpose.
    cross = HeadRecord(KEY.dataset_id, HEAD, 7, T, KEY.sign(RECORD.signing_message(), "announce"))
    with pytest.raises(InvalidHeadRecord):
        cross.verify()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_byte_mutation_is_refused(data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(WIRE) - 1))
    b = data.draw(st.integers(0, 255).filter(lambda v: v != WIRE[i]))
    mutated = WIRE[:i] + bytes([b]) + WIRE[i + 1 :]
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_json(mutated)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(WIRE) - 1), st.binary(min_size=1, max_size=4))
def test_insertions_and_truncations_are_refused(i: int, extra: bytes) -> None:
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_json(WIRE[:i] + extra + WIRE[i:])
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_json(WIRE[:i])


def test_non_canonical_and_malformed_forms() -> None:
    doc = json.loads(WIRE)
    spaced = json.dumps(doc, sort_keys=True).encode()
    with pytest.raises(InvalidHeadRecord, match="canonical"):
        HeadRecord.from_json(spaced)
    # The same hash in uppercase hex is the same value but not the canonical text.
    upper = dict(doc, head="F" + doc["head"][1:].upper())
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_json(json.dumps(upper, sort_keys=True, separators=(",", ":")).encode())
    for bad in (
        dict(doc, sequenceNumber=True),
        dict(doc, sequenceNumber=7.0),
        dict(doc, sequenceNumber=-1),
        dict(doc, version=2),
        dict(doc, extra=1),
        {k: v for k, v in doc.items() if k != "signature"},
        dict(doc, head=Multihash(0x12, bytes(32)).to_multibase()),
    ):
        with pytest.raises(InvalidHeadRecord):
            HeadRecord.from_json(json.dumps(bad, sort_keys=True, separators=(",", ":")).encode())
    for junk in (b"", b"[]", b"null", b"\xff\xfe", b"{" * 600, b" " * (MAX_HEAD_RECORD_BYTES + 1)):
        with pytest.raises(InvalidHeadRecord):
            HeadRecord.from_json(junk)


def test_constructor_refuses_bad_values() -> None:
    with pytest.raises(InvalidHeadRecord):
        HeadRecord(KEY.dataset_id, HEAD, 2**63, T, RECORD.signature)
    with pytest.raises(InvalidHeadRecord):
        HeadRecord(KEY.dataset_id, HEAD, 1, T, b"short")
    with pytest.raises(InvalidHeadRecord):
        sign_head(KEY, Multihash(0x12, bytes(32)), 1, T)
    with pytest.raises(InvalidHeadRecord):
        sign_head(KEY, HEAD, -1, T)


def test_signature_is_deterministic() -> None:
    # Re-signing the same head never produces a second, conflicting record.
    assert sign_head(KEY, HEAD, 7, T) == RECORD


# -- version 2: the publisher's name, signed -----------------------------------------------

NAMED = sign_head(KEY, HEAD, 7, T, "acme/com.acme.prices")


def test_named_record_roundtrips_as_version_2() -> None:
    NAMED.verify()
    wire = NAMED.to_json()
    doc = json.loads(wire)
    assert doc["version"] == 2 and doc["name"] == "acme/com.acme.prices"
    assert HeadRecord.from_json(wire) == NAMED
    msg = NAMED.signing_message()
    assert msg.startswith(b"odf-head-record\x00\x02")
    assert msg.endswith(bytes((20,)) + b"acme/com.acme.prices")
    # Without a name the record is version 1, byte for byte what it always was.
    assert RECORD.version == 1 and b'"name"' not in WIRE


def test_the_name_cannot_be_changed_or_dropped_by_a_peer() -> None:
    doc = json.loads(NAMED.to_json())
    renamed = dict(doc, name="mallory.prices")
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_dict(renamed)
    # Dropping the name (and claiming version 1) keeps the v2 signature: it must fail,
    # the two versions sign under different domains.
    dropped = {k: v for k, v in doc.items() if k != "name"} | {"version": 1}
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_dict(dropped)
    # A v1 signature with a name added does not verify either.
    added = json.loads(WIRE) | {"name": "x", "version": 2}
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_dict(added)


@pytest.mark.parametrize(
    "doc_change",
    [
        {"version": 1},  # a name with version 1
        {"name": 5},
        {"name": "a/b/c"},
        {"name": "bad name"},
        {"name": ""},
    ],
)
def test_malformed_named_records_are_refused(doc_change: dict[str, object]) -> None:
    doc = json.loads(NAMED.to_json()) | doc_change
    with pytest.raises(InvalidHeadRecord):
        HeadRecord.from_dict(doc, verify=False)


def test_sign_head_refuses_an_invalid_name() -> None:
    with pytest.raises(InvalidHeadRecord):
        sign_head(KEY, HEAD, 1, T, "no/such/alias")
    with pytest.raises(InvalidHeadRecord):
        sign_head(KEY, HEAD, 1, T, "x" * 300)
