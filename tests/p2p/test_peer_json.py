"""Bounded JSON of peers: every hostile document is one typed error, never a traceback."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.attestation import Attestation
from p2p.errors import InvalidAttestation, InvalidHeadRecord, PeerMisbehaved
from p2p.head_record import HeadRecord
from p2p.head_store import EquivocationEvidence
from p2p.peer_json import JsonLimits, PeerJsonError, load_peer_json, load_peer_object
from p2p.peers import Offence

LIMIT = Offence.LIMIT_EXCEEDED
SYNTAX = Offence.PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("doc", "offence", "match"),
    [
        (b"1" * 5000, LIMIT, "number longer"),
        (b'{"size":' + b"9" * 5000 + b"}", LIMIT, "number longer"),
        (b"-0." + b"1" * 100, LIMIT, "number longer"),
        (b"1e999", LIMIT, "out of range"),
        (b"[" * 100_000 + b"]" * 100_000, LIMIT, "larger than"),
        (b"[" * 33 + b"]" * 33, LIMIT, "nested deeper than 32"),
        (b'{"a":' * 40 + b"1" + b"}" * 40, LIMIT, "nested deeper"),
        (b"[" * 5000, LIMIT, "nested deeper"),  # unterminated, still no recursion
        (b'"' + b"x" * 9000 + b'"', LIMIT, "string longer"),
        (b'{"' + b"k" * 9000 + b'":1}', LIMIT, "string longer"),
        (b"[" + b"0," * 5000 + b"0]", LIMIT, "more than 4096 values"),
        (b'{"a":1,"a":2}', SYNTAX, "duplicate"),
        (b"NaN", SYNTAX, "NaN is not JSON"),
        (b"[-Infinity]", SYNTAX, "is not JSON"),
        (b"\xff\xfe", SYNTAX, "not UTF-8"),
        (b"{", SYNTAX, "is not JSON"),
        (b"", SYNTAX, "is not JSON"),
        (b'"\\ud800', SYNTAX, "is not JSON"),
    ],
)
def test_hostile_documents_are_typed_errors(doc: bytes, offence: Offence, match: str) -> None:
    with pytest.raises(PeerJsonError, match=match) as info:
        load_peer_json(doc)
    assert isinstance(info.value, PeerMisbehaved)
    assert info.value.offence is offence


def test_limits_are_inclusive_and_adjustable() -> None:
    assert load_peer_json(b"[" * 32 + b"]" * 32) is not None
    assert load_peer_json(b"1" * 40) == int("1" * 40)
    assert load_peer_json(b'"' + b"x" * 8192 + b'"') == "x" * 8192
    tight = JsonLimits(max_bytes=10, max_depth=1, max_number_chars=2, max_string_chars=1)
    assert load_peer_json(b'[1,"a"]', tight) == [1, "a"]
    for doc in (b"[[]]", b"123", b'["ab"]', b"[" + b"1," * 5 + b"1]"):
        with pytest.raises(PeerJsonError):
            load_peer_json(doc, tight)


def test_brackets_inside_strings_do_not_count() -> None:
    doc = json.dumps({"m": "[[[[{{{{" * 100 + '\\"[[['}).encode()
    assert load_peer_object(doc)["m"].startswith("[[[[")


def test_object_required() -> None:
    assert load_peer_object(b'{"op":"head","n":[1,2.5,null,true]}') == {
        "op": "head",
        "n": [1, 2.5, None, True],
    }
    with pytest.raises(PeerJsonError, match="not a JSON object"):
        load_peer_object(b"[1]", what="frame")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_ordinary_documents_decode_like_json(value: object) -> None:
    doc = json.dumps(value).encode()
    assert load_peer_json(doc) == json.loads(doc)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(alphabet='[]{}",:0123456789e.-\\ntrufalse', max_size=200))
def test_garbage_is_a_value_or_a_typed_error(data: bytes | str) -> None:
    raw = data.encode() if isinstance(data, str) else data
    with contextlib.suppress(PeerJsonError):
        load_peer_json(raw)


@pytest.mark.parametrize(
    "doc",
    [
        b'{"sequence_number":' + b"7" * 5000 + b"}",
        b"[" * 500 + b"]" * 500,
        b'{"a":1,"a":1}',
    ],
    ids=["huge-int", "deep", "duplicate-key"],
)
def test_signed_records_use_the_bounded_reader(doc: bytes) -> None:
    # Head records and attestations arrive by gossip, HTTP and the exchange protocol.
    with pytest.raises(InvalidHeadRecord, match="not ASCII JSON"):
        HeadRecord.from_json(doc[:1024])
    with pytest.raises(InvalidAttestation, match="not ASCII JSON"):
        Attestation.from_json(doc)
    with pytest.raises(InvalidHeadRecord, match="not ASCII JSON"):
        EquivocationEvidence.from_json(doc, Path("evidence.json"))
