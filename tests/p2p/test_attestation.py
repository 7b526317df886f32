"""Signed validator attestations: signatures, canonical JSON, limits, forgeries."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.attestation import (
    MAX_ATTESTATION_BYTES,
    MAX_REASON_CHARS,
    Attestation,
    Verdict,
    sign_attestation,
)
from p2p.errors import InvalidAttestation
from p2p.head_record import sign_head

T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")
ENGINE = "spark (odf-node 0.1.0, Apache Spark 4.0.0)"


def make(
    validator: KeyPair,
    dataset: KeyPair,
    *,
    verdict: Verdict = Verdict.REPRODUCED,
    detail: str = "",
    seq: int = 3,
) -> Attestation:
    return sign_attestation(
        validator,
        dataset_id=dataset.dataset_id,
        block_hash=Multihash.sha3_256(b"block %d" % seq),
        sequence_number=seq,
        verdict=verdict,
        detail=detail,
        engine=ENGINE,
        system_time=T0,
    )


@pytest.fixture
def keys() -> tuple[KeyPair, KeyPair]:
    return KeyPair.generate(), KeyPair.generate()


@pytest.mark.parametrize(
    ("verdict", "detail", "key"),
    [
        (Verdict.REPRODUCED, "", None),
        (Verdict.DIVERGED, "newData.logicalHash", "field"),
        (Verdict.COULD_NOT_CHECK, "missing input: did:odf:fed01... (ünïcode)", "reason"),
    ],
)
def test_round_trip_and_verify(
    keys: tuple[KeyPair, KeyPair], verdict: Verdict, detail: str, key: str | None
) -> None:
    v, d = keys
    att = make(v, d, verdict=verdict, detail=detail)
    att.verify()
    data = att.to_json()
    assert data.isascii() and len(data) < MAX_ATTESTATION_BYTES
    obj = json.loads(data)
    assert obj["validator"].startswith("did:key:z6Mk")
    assert obj["datasetId"] == d.dataset_id.to_did_odf()
    assert obj["verdict"] == verdict.value
    assert (key in obj) if key else ("field" not in obj and "reason" not in obj)
    back = Attestation.from_json(data)
    assert back == att and back.digest == att.digest
    assert back.detail == detail


def test_forged_attestations_do_not_verify(keys: tuple[KeyPair, KeyPair]) -> None:
    v, d = keys
    good = make(v, d)
    mallory = KeyPair.generate()
    # Mallory claims to be the validator: signature by another key.
    forged = dataclasses.replace(good, signature=make(mallory, d).signature)
    with pytest.raises(InvalidAttestation, match="does not verify"):
        forged.verify()
    with pytest.raises(InvalidAttestation):
        Attestation.from_json(forged.to_json())
    # A signed "reproduced" turned into "diverged" (and any other field change) fails.
    flipped = dataclasses.replace(good, verdict=Verdict.DIVERGED, detail="newData.logicalHash")
    with pytest.raises(InvalidAttestation):
        flipped.verify()
    moved = dataclasses.replace(good, dataset_id=mallory.dataset_id)
    with pytest.raises(InvalidAttestation):
        moved.verify()
    # A head-record signature over the same key is no attestation signature (domains).
    head = sign_head(v, good.block_hash, 3, T0)
    with pytest.raises(InvalidAttestation):
        dataclasses.replace(good, signature=head.signature).verify()


def test_only_the_canonical_spelling_is_accepted(keys: tuple[KeyPair, KeyPair]) -> None:
    att = make(*keys, verdict=Verdict.DIVERGED, detail="newWatermark")
    obj = json.loads(att.to_json())
    spaced = json.dumps(obj, sort_keys=True).encode()
    with pytest.raises(InvalidAttestation, match="canonical"):
        Attestation.from_json(spaced)
    reordered = json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")).encode()
    with pytest.raises(InvalidAttestation, match="canonical"):
        Attestation.from_json(reordered)
    # did:odf instead of did:key for the validator parses but is not canonical.
    obj2 = dict(obj, validator=keys[0].dataset_id.to_did_odf())
    with pytest.raises(InvalidAttestation, match="canonical"):
        Attestation.from_json(json.dumps(obj2, sort_keys=True, separators=(",", ":")).encode())


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o.pop("engine"),
        lambda o: o.update(extra=1),
        lambda o: o.update(version=2),
        lambda o: o.update(verdict="maybe"),
        lambda o: o.update(verdict="reproduced"),  # keeps "field": wrong key set
        lambda o: o.update(sequenceNumber="4"),
        lambda o: o.update(sequenceNumber=-1),
        lambda o: o.update(sequenceNumber=2**64),
        lambda o: o.update(blockHash="f1620" + "00" * 31),
        lambda o: o.update(datasetId="did:odf:nope"),
        lambda o: o.update(signature="u" + "A" * 10),
        lambda o: o.update(systemTime="yesterday"),
        lambda o: o.update(field="new data; rm -rf"),
        lambda o: o.update(field=""),
        lambda o: o.update(engine=""),
        lambda o: o.update(engine="spark\n(fake)"),
        lambda o: o.update(engine="x" * 300),
    ],
)
def test_malformed_attestations_are_rejected(keys: tuple[KeyPair, KeyPair], mutate: object) -> None:
    att = make(*keys, verdict=Verdict.DIVERGED, detail="newData.logicalHash")
    obj = json.loads(att.to_json())
    mutate(obj)  # type: ignore[operator]
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(InvalidAttestation):
        Attestation.from_json(data)


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b"null", b"{", '{"verdict":"ré"}'.encode(), b"\xff\xfe", b"{}" + b" " * 9000],
)
def test_garbage_is_rejected_with_a_typed_error(data: bytes) -> None:
    with pytest.raises(InvalidAttestation):
        Attestation.from_json(data)


def test_signing_refuses_bad_values(keys: tuple[KeyPair, KeyPair]) -> None:
    v, d = keys
    with pytest.raises(InvalidAttestation):
        make(v, d, verdict=Verdict.REPRODUCED, detail="something")
    with pytest.raises(InvalidAttestation):
        make(v, d, verdict=Verdict.DIVERGED, detail="")
    with pytest.raises(InvalidAttestation):
        make(v, d, verdict=Verdict.COULD_NOT_CHECK, detail="x" * (MAX_REASON_CHARS + 1))
    with pytest.raises(InvalidAttestation):
        make(v, d, verdict=Verdict.COULD_NOT_CHECK, detail="bell\x07")
    with pytest.raises(InvalidAttestation):
        make(v, d, seq=-1)


@settings(max_examples=40, deadline=None)
@given(
    verdict=st.sampled_from(list(Verdict)),
    reason=st.text(min_size=1, max_size=60).filter(lambda s: s.isprintable()),
    seq=st.integers(min_value=0, max_value=2**63 - 1),
    nanos=st.integers(min_value=0, max_value=4_102_444_800 * 10**9),
)
def test_round_trip_property(verdict: Verdict, reason: str, seq: int, nanos: int) -> None:
    v = KeyPair(b"\x01" * 32)
    d = KeyPair(b"\x02" * 32)
    detail = {
        Verdict.REPRODUCED: "",
        Verdict.DIVERGED: "queryInputs[0].newOffset",
        Verdict.COULD_NOT_CHECK: reason,
    }[verdict]
    att = sign_attestation(
        v,
        dataset_id=d.dataset_id,
        block_hash=Multihash.sha3_256(b"%d" % seq),
        sequence_number=seq,
        verdict=verdict,
        detail=detail,
        engine=ENGINE,
        system_time=Timestamp(nanos),
    )
    assert Attestation.from_json(att.to_json()) == att
