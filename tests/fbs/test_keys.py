"""Ed25519 key pairs, domain-separated signatures and did:key helpers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.did import DatasetId
from fbs.errors import InvalidDid, InvalidKey, InvalidSignature
from fbs.keys import (
    MAX_DOMAIN_LEN,
    SIGNATURE_SIZE,
    KeyPair,
    parse_verification_method,
    signature_from_multibase,
    signature_to_multibase,
    signing_input,
    verification_method,
    verify,
)

# RFC 8032 section 7.1, test 1: private key (seed) and its public key.
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")


@pytest.fixture(scope="module")
def pair() -> KeyPair:
    return KeyPair(RFC8032_SEED)


def test_seed_derives_rfc8032_public_key(pair: KeyPair) -> None:
    assert pair.public_key == RFC8032_PUBLIC
    assert pair.dataset_id == DatasetId(RFC8032_PUBLIC)
    assert pair.dataset_id.to_did_odf() == "did:odf:fed01" + RFC8032_PUBLIC.hex()


def test_private_bytes_roundtrip(pair: KeyPair) -> None:
    assert pair.private_bytes() == RFC8032_SEED
    restored = KeyPair.from_private_bytes(pair.private_bytes())
    assert restored.public_key == pair.public_key
    assert restored.sign(b"m", "test") == pair.sign(b"m", "test")  # ed25519 is deterministic


def test_repr_hides_private_key(pair: KeyPair) -> None:
    text = repr(pair) + str(pair)
    assert RFC8032_SEED.hex() not in text
    assert pair.dataset_id.to_did_odf() in text


def test_generate_gives_distinct_working_keys() -> None:
    a, b = KeyPair.generate(), KeyPair.generate()
    assert a.public_key != b.public_key
    assert len(a.private_bytes()) == 32
    verify(a.dataset_id, b"hello", a.sign(b"hello", "test"), "test")


def test_sign_and_verify(pair: KeyPair) -> None:
    sig = pair.sign(b"refs/head f1620...", "refs/head")
    assert len(sig) == SIGNATURE_SIZE
    verify(pair.dataset_id, b"refs/head f1620...", sig, "refs/head")
    verify(pair.dataset_id, bytearray(b"refs/head f1620..."), bytearray(sig), "refs/head")


def test_signature_covers_documented_payload(pair: KeyPair) -> None:
    import nacl.signing

    payload = signing_input("announce", b"msg")
    assert payload == b"odf-node:announce\x00msg"
    sig = pair.sign(b"msg", "announce")
    # The signature is a plain ed25519 signature over the payload ...
    nacl.signing.VerifyKey(pair.public_key).verify(payload, sig)
    # ... and never one over the raw message.
    with pytest.raises(nacl.exceptions.BadSignatureError):
        nacl.signing.VerifyKey(pair.public_key).verify(b"msg", sig)


def test_wrong_domain_rejected(pair: KeyPair) -> None:
    sig = pair.sign(b"payload", "refs/head")
    with pytest.raises(InvalidSignature):
        verify(pair.dataset_id, b"payload", sig, "announce")
    with pytest.raises(InvalidSignature):
        verify(pair.dataset_id, b"payload", sig, "refs/hea")


def test_domain_message_boundary_is_unambiguous(pair: KeyPair) -> None:
    # Moving bytes between domain and message changes the signed payload.
    sig = pair.sign(b"b-msg", "a")
    with pytest.raises(InvalidSignature):
        verify(pair.dataset_id, b"msg", sig, "a-b")


def test_tampered_message_rejected(pair: KeyPair) -> None:
    sig = pair.sign(b"payload", "test")
    for bad in (b"payloaD", b"payload\x00", b"", b"payload" * 2):
        with pytest.raises(InvalidSignature):
            verify(pair.dataset_id, bad, sig, "test")


def test_tampered_signature_rejected(pair: KeyPair) -> None:
    sig = bytearray(pair.sign(b"payload", "test"))
    sig[10] ^= 0x01
    with pytest.raises(InvalidSignature):
        verify(pair.dataset_id, b"payload", bytes(sig), "test")


def test_other_key_rejected(pair: KeyPair) -> None:
    sig = pair.sign(b"payload", "test")
    other = KeyPair(bytes(32))
    with pytest.raises(InvalidSignature):
        verify(other.dataset_id, b"payload", sig, "test")


def test_seeded_id_is_not_a_signing_identity(pair: KeyPair) -> None:
    # Seeded test IDs are random bytes, not derived keys: nothing verifies for them.
    sig = pair.sign(b"payload", "test")
    with pytest.raises(InvalidSignature):
        verify(DatasetId.new_seeded(b"multihash"), b"payload", sig, "test")


@pytest.mark.parametrize("signature", [b"", bytes(63), bytes(65), None, "00" * 64, 64])
def test_malformed_signatures(pair: KeyPair, signature: object) -> None:
    with pytest.raises(InvalidSignature):
        verify(pair.dataset_id, b"payload", signature, "test")  # type: ignore[arg-type]


@pytest.mark.parametrize("message", ["text", None, 5])
def test_non_bytes_message(pair: KeyPair, message: object) -> None:
    sig = pair.sign(b"x", "test")
    with pytest.raises(InvalidSignature):
        verify(pair.dataset_id, message, sig, "test")  # type: ignore[arg-type]
    with pytest.raises(InvalidKey):
        pair.sign(message, "test")  # type: ignore[arg-type]


def test_verify_needs_a_dataset_id(pair: KeyPair) -> None:
    sig = pair.sign(b"x", "test")
    with pytest.raises(InvalidSignature):
        verify(pair.public_key, b"x", sig, "test")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "domain",
    ["", "Test", "a\x00b", "a b", "-a", "ä", "a" * (MAX_DOMAIN_LEN + 1), None, b"test"],
)
def test_invalid_domains(pair: KeyPair, domain: object) -> None:
    with pytest.raises(InvalidKey):
        pair.sign(b"payload", domain)  # type: ignore[arg-type]
    sig = pair.sign(b"payload", "test")
    with pytest.raises(InvalidKey):
        verify(pair.dataset_id, b"payload", sig, domain)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [b"", bytes(31), bytes(33), None, "00" * 32])
def test_invalid_seeds(seed: object) -> None:
    with pytest.raises(InvalidKey):
        KeyPair(seed)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    message=st.binary(max_size=256),
    domain=st.from_regex(r"[a-z0-9][a-z0-9._/-]{0,20}", fullmatch=True),
    flip=st.integers(min_value=0, max_value=10_000),
)
def test_property_sign_verify_and_bit_flip(
    pair: KeyPair, message: bytes, domain: str, flip: int
) -> None:
    sig = pair.sign(message, domain)
    verify(pair.dataset_id, message, sig, domain)
    if message:
        bad = bytearray(message)
        bad[flip % len(bad)] ^= 1 << (flip % 8)
        with pytest.raises(InvalidSignature):
            verify(pair.dataset_id, bytes(bad), sig, domain)


# -- did:key verification methods and signature texts ------------------------------------


def test_verification_method_roundtrip(pair: KeyPair) -> None:
    did_key = pair.dataset_id.to_did_key()
    method = verification_method(pair.dataset_id)
    assert method == did_key + "#" + did_key[len("did:key:") :]
    assert parse_verification_method(method) == pair.dataset_id
    assert parse_verification_method(did_key) == pair.dataset_id


@pytest.mark.parametrize(
    "method",
    [
        "did:odf:fed01" + RFC8032_PUBLIC.hex(),
        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK#z6Mkother",
        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK#",
        "did:key:#z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        "",
        None,
    ],
)
def test_bad_verification_methods(method: object) -> None:
    with pytest.raises(InvalidDid):
        parse_verification_method(method)  # type: ignore[arg-type]


def test_signature_multibase_roundtrip(pair: KeyPair) -> None:
    sig = pair.sign(b"x", "test")
    text = signature_to_multibase(sig)
    assert text.startswith("u") and "=" not in text
    assert signature_from_multibase(text) == sig
    assert signature_from_multibase("f" + sig.hex()) == sig


@pytest.mark.parametrize(
    "text", ["", "u", "uAAAA", "f" + "00" * 63, "f" + "00" * 65, None, "u" * 500]
)
def test_bad_signature_texts(text: object) -> None:
    with pytest.raises(InvalidSignature):
        signature_from_multibase(text)  # type: ignore[arg-type]


def test_signature_to_multibase_checks_size() -> None:
    with pytest.raises(InvalidSignature):
        signature_to_multibase(bytes(63))
