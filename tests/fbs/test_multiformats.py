"""Multihash / multibase: kamu vectors (odf-format.md §7.3), cross-checked with `multiformats`."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import multibase, multicodec, multihash
from multiformats.multicodec import Multicodec

from fbs.errors import InvalidHash, InvalidMultiformat
from fbs.multiformats import (
    ARROW0_SHA3_256,
    DIGEST_SIZES,
    MULTIBASE_PREFIXES,
    SHA2_256,
    SHA3_256,
    Multihash,
    decode_multibase,
    decode_varint,
    encode_multibase,
    encode_varint,
    parse_hash,
)

# The library does not know ODF's private-use logical-hash code; teach it (tests only).
_ARROW0_NAME = "arrow0-sha3-256"
if not multicodec.exists(code=ARROW0_SHA3_256):
    multicodec.register(
        Multicodec(_ARROW0_NAME, "multihash", ARROW0_SHA3_256, "draft", "ODF logical hash")
    )


def _not_computable(data: object, size: int | None = None) -> bytes:
    raise AssertionError("arrow0 digests are never computed by the library")


if not multihash.raw.exists(_ARROW0_NAME):
    multihash.raw.register(_ARROW0_NAME, _not_computable, 32)

LIB_NAMES = {SHA2_256: "sha2-256", SHA3_256: "sha3-256", ARROW0_SHA3_256: _ARROW0_NAME}
ALL_BASES = sorted(MULTIBASE_PREFIXES)

SHA3_VECTORS = {
    b"multihash": "f162008c3792b2a4deed1bd7ea2328fb5de5531eccf0fbfa04a7d800cdc267137c635",
    b"prev": "f16209eb949bd8ff0bb1d827f11809aebc6bd0d5955c7f368469a913c70d196620272",
    b"a": "f162080084bf2fba02475726feb2cab2d8215eab14bc6bdd8bfb2c8151257032ecd8b",
    b"b": "f1620b039179a8a4ce2c252aa6f2f25798251c19b75fc1508d9d511a191e0487d64a7",
    b"checkpoint": "f1620894b355f91b194f31c1116dcec200b68d5cfd90a3df19032829fa643bc711fcb",
    b"foo": "f162076d3bc41c9f588f7fcd0d5bf4718f8f84b1c41b20882703100b9eb9413807c01",
    b"bar": "f1620cceefd7e0545bcf8b6d19f3b5750c8a3ee8350418877bc6fb12e32de28137355",
    b"logical": "f16208aa0c7713491425f3815c269391bd101995919065e784e66e01433d47cfc6a61",
    b"physical": "f16201970ee21101d110c448f2b72aec873f9be2b4e5403a5fdf88e18ca4430d8b1cb",
    b"[]": "f1620ca4510738395af1429224dd785675309c344b2b549632e20275c69b15ed1d210",
}


# -- kamu vectors -----------------------------------------------------------------------


@pytest.mark.parametrize(("data", "text"), sorted(SHA3_VECTORS.items()))
def test_sha3_vectors(data: bytes, text: str) -> None:
    mh = Multihash.sha3_256(data)
    assert mh.to_multibase() == text
    assert str(mh) == text
    assert parse_hash(text) == mh


def test_multihash_vector_other_forms() -> None:
    mh = Multihash.sha3_256(b"multihash")
    assert mh.to_multibase("base58btc") == "zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8"
    assert parse_hash("zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8") == mh
    assert mh.short() == "7137c635"
    upper = "F162008C3792B2A4DEED1BD7EA2328FB5DE5531ECCF0FBFA04A7D800CDC267137C635"
    assert parse_hash(upper) == mh
    assert mh.to_multibase("base16upper") == upper
    b64 = mh.to_multibase("base64url")
    assert b64.startswith("u") and "=" not in b64
    assert parse_hash(b64) == mh


def test_sha2_vector_transcodes() -> None:
    hex_text = "f12209cbc07c3f991725836a3aa2a581ca2029198aa420b9d99bc0e131d9f3e2cbe47"
    b58_text = "zQmYtUc4iTCbbfVSDNKvtQqrfyezPPnFvE33wFmutw9PBBk"
    mh = parse_hash(hex_text)
    assert mh.code == SHA2_256
    assert parse_hash(b58_text) == mh
    assert mh.to_multibase("base58btc") == b58_text
    assert mh.to_multibase() == hex_text


def test_logical_hash_text_and_bytes() -> None:
    digest = hashlib.sha3_256(b"rows").digest()
    mh = Multihash(ARROW0_SHA3_256, digest)
    assert mh.to_bytes() == bytes.fromhex("9680c00120") + digest
    assert len(mh.to_bytes()) == 37
    text = mh.to_multibase()
    assert text.startswith("f9680c00120") and len(text) == 75
    assert parse_hash(text) == mh
    assert Multihash.from_bytes(mh.to_bytes()) == mh


def test_parse_hash_code_requirement() -> None:
    block = Multihash.sha3_256(b"x")
    logical = Multihash(ARROW0_SHA3_256, bytes(32))
    assert parse_hash(str(block), code=SHA3_256) == block
    assert parse_hash(str(logical), code=ARROW0_SHA3_256) == logical
    with pytest.raises(InvalidHash, match="expected multihash code 0x16"):
        parse_hash(str(logical), code=SHA3_256)


def test_sha3_bytes_fast_path_matches_generic_layout() -> None:
    mh = Multihash.sha3_256(b"foo")
    raw = mh.to_bytes()
    assert raw[:2] == b"\x16\x20" and len(raw) == 34
    assert raw == encode_varint(SHA3_256) + encode_varint(32) + mh.digest


def test_unsupported_base_name() -> None:
    with pytest.raises(InvalidMultiformat, match="unsupported multibase"):
        Multihash.sha3_256(b"").to_multibase("base32")
    with pytest.raises(InvalidMultiformat):
        encode_multibase(b"x", "identity")


def test_non_canonical_library_texts_are_refused() -> None:
    mh = Multihash.sha3_256(b"multihash")
    b64 = mh.to_multibase("base64url")
    # The library itself accepts padding; we do not.
    assert bytes(multibase.decode(b64 + "=")) == mh.to_bytes()
    with pytest.raises(InvalidHash):
        parse_hash(b64 + "=")
    # 34 bytes leave 4 spare (zero) bits in the last base64 character; setting one
    # gives a text that is not the canonical spelling of any bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    stray = alphabet[alphabet.index(b64[-1]) | 1]
    assert stray != b64[-1]
    with pytest.raises(InvalidHash):
        parse_hash(b64[:-1] + stray)


def test_multihash_construction_is_checked() -> None:
    with pytest.raises(InvalidHash):
        Multihash(SHA3_256, bytes(31))
    with pytest.raises(InvalidHash):
        Multihash(0x13, bytes(64))
    with pytest.raises(InvalidHash):
        Multihash(True, bytes(32))
    with pytest.raises(InvalidHash):
        Multihash(22.0, bytes(32))  # type: ignore[arg-type]
    with pytest.raises(InvalidHash):
        Multihash(SHA3_256, bytearray(32))  # type: ignore[arg-type]
    with pytest.raises(InvalidHash):
        Multihash(SHA3_256, 32)  # type: ignore[arg-type]


# -- varints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (0x16, "16"), (0x7F, "7f"), (0x80, "8001"), (0xED, "ed01"), (0x300016, "9680c001")],
)
def test_varint_vectors(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize("data", ["", "80", "8000", "ff" * 9 + "01", "ff" * 10])
def test_varint_bad_bytes(data: str) -> None:
    with pytest.raises(InvalidMultiformat):
        decode_varint(bytes.fromhex(data))


@pytest.mark.parametrize("value", [-1, 1 << 63, 1.0, True, "1"])
def test_varint_bad_values(value: object) -> None:
    with pytest.raises(InvalidMultiformat):
        encode_varint(value)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_varint_matches_library(value: int) -> None:
    from multiformats import varint

    encoded = encode_varint(value)
    assert encoded == bytes(varint.encode(value))
    assert decode_varint(encoded + b"tail") == (value, len(encoded))


# -- property cross-checks against the reference library --------------------------------


@settings(max_examples=60, deadline=None)
@given(code=st.sampled_from(sorted(DIGEST_SIZES)), digest=st.binary(min_size=32, max_size=32))
def test_matches_library(code: int, digest: bytes) -> None:
    ours = Multihash(code, digest)
    lib_bytes = bytes(multihash.wrap(digest, LIB_NAMES[code]))
    assert ours.to_bytes() == lib_bytes
    assert bytes(multihash.unwrap(ours.to_bytes())) == digest
    assert Multihash.from_bytes(lib_bytes) == ours
    for base in ALL_BASES:
        text = ours.to_multibase(base)
        assert text == multibase.encode(lib_bytes, base)
        assert text[0] == MULTIBASE_PREFIXES[base]
        assert Multihash.from_multibase(text) == ours
        assert decode_multibase(text) == lib_bytes


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=48), base=st.sampled_from(ALL_BASES))
def test_multibase_roundtrip_matches_library(data: bytes, base: str) -> None:
    text = encode_multibase(data, base)
    assert text == multibase.encode(data, base)
    assert decode_multibase(text) == data


def test_digest_sizes_match_library_table() -> None:
    for code, size in DIGEST_SIZES.items():
        assert multicodec.get(code=code).name == LIB_NAMES[code]
        assert multicodec.get(code=code).tag == "multihash"
        assert size == 32
