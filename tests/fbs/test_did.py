"""DatasetId (did:odf / did:key), seeded test DIDs and names: kamu vectors (odf-format.md §7.4)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import multibase

from fbs.did import (
    MAX_NAME_LEN,
    AccountName,
    DatasetAlias,
    DatasetId,
    DatasetName,
    parse_did,
    xoshiro256pp_bytes,
)
from fbs.errors import InvalidDid, InvalidName

SEEDED = {
    b"multihash": "did:odf:fed012126262ba49e1ba8392c26f7a39e1ba8d756c7469786d3365200c68402ff65dc",
    b"input1": "did:odf:fed01816ef0a9abe93aba816ef0a9abe93aba90e6065747170300c0d3d30c2cd8d7a4",
    b"input2": "did:odf:fed01826ef0a9abea3a3a826ef0a9abea3a3a90e6065747270300c1d3b30a2cd9d724",
    b"test": "did:odf:fed017465732eb3393a007465732eb3393a004057364707000000e082e0b8bdb9d037",
}
TRANSCODE_ODF = "did:odf:fed012e6fcce36701dc791488e0d0b1745cc1e33a4c1c9fcc41c63bd343dbbe0970e6"
TRANSCODE_KEY = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


@pytest.mark.parametrize(("seed", "did"), sorted(SEEDED.items()))
def test_seeded_vectors(seed: bytes, did: str) -> None:
    dataset_id = DatasetId.new_seeded(seed)
    assert dataset_id.to_did_odf() == did
    assert str(dataset_id) == did
    assert DatasetId.from_did(did) == dataset_id


def test_seeded_did_key_vector() -> None:
    dataset_id = DatasetId.new_seeded(b"multihash")
    assert dataset_id.to_did_key() == "did:key:z6MkggfEoTnRceFGdwjUtm1JaWeHQVKUpttKZUY6KAMaWvqq"


def test_transcode_vector_both_ways() -> None:
    from_odf = DatasetId.from_did(TRANSCODE_ODF)
    from_key = DatasetId.from_did(TRANSCODE_KEY)
    assert from_odf == from_key
    assert from_odf.to_did_key() == TRANSCODE_KEY
    assert from_key.to_did_odf() == TRANSCODE_ODF


def test_both_methods_accept_every_encoding() -> None:
    dataset_id = DatasetId.from_did(TRANSCODE_ODF)
    raw = dataset_id.to_bytes()
    body_z = TRANSCODE_KEY[len("did:key:") :]
    body_f = TRANSCODE_ODF[len("did:odf:") :]
    spellings = [
        "did:odf:" + body_z,
        "did:key:" + body_f,
        "did:odf:F" + raw.hex().upper(),
        "did:key:" + multibase.encode(raw, "base64url"),
    ]
    for text in spellings:
        assert DatasetId.from_did(text) == dataset_id
        assert parse_did(text) == dataset_id


def test_binary_and_multibase_forms() -> None:
    dataset_id = DatasetId.new_seeded(b"input1")
    raw = dataset_id.to_bytes()
    assert raw[:2] == b"\xed\x01" and len(raw) == 34
    assert DatasetId.from_bytes(raw) == dataset_id
    assert DatasetId.from_bytes(bytearray(raw)) == dataset_id
    assert DatasetId.from_bytes(memoryview(raw)) == dataset_id
    assert dataset_id.as_multibase() == "f" + raw.hex()
    assert DatasetId.from_multibase(dataset_id.as_multibase()) == dataset_id
    assert repr(dataset_id) == f"DatasetId({dataset_id.to_did_odf()!r})"


def test_public_key_size_checked() -> None:
    with pytest.raises(InvalidDid):
        DatasetId(bytes(31))
    with pytest.raises(InvalidDid):
        DatasetId(bytearray(32))  # type: ignore[arg-type]


# -- seeded generator -------------------------------------------------------------------


def test_xoshiro_reference_outputs() -> None:
    # Reference outputs of xoshiro256++ for state words (1, 2, 3, 4), as published with Rust `rand`.
    seed = struct.pack("<4Q", 1, 2, 3, 4)
    words = struct.unpack("<10Q", xoshiro256pp_bytes(seed, 80))
    assert words == (
        41943041,
        58720359,
        3588806011781223,
        3591011842654386,
        9228616714210784205,
        9973669472204895162,
        14011001112246962877,
        12406186145184390807,
        15849039046786891736,
        10450023813501588000,
    )


def test_xoshiro_all_zero_seed_uses_splitmix() -> None:
    words = struct.unpack("<4Q", xoshiro256pp_bytes(b"", 32))
    assert words == (
        5987356902031041503,
        7051070477665621255,
        6633766593972829180,
        211316841551650330,
    )
    assert xoshiro256pp_bytes(bytes(32), 32) == xoshiro256pp_bytes(b"", 32)


def test_xoshiro_partial_words_are_prefixes() -> None:
    full = xoshiro256pp_bytes(b"seed", 40)
    assert xoshiro256pp_bytes(b"seed", 13) == full[:13]
    assert xoshiro256pp_bytes(b"seed", 0) == b""


@pytest.mark.parametrize("seed", [bytes(33), "multihash", None, 5])
def test_bad_seeds(seed: object) -> None:
    with pytest.raises(InvalidDid):
        DatasetId.new_seeded(seed)  # type: ignore[arg-type]


def test_bad_byte_count() -> None:
    with pytest.raises(InvalidDid):
        xoshiro256pp_bytes(b"x", -1)


# -- properties -------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_roundtrip_all_forms(key: bytes) -> None:
    dataset_id = DatasetId(key)
    did_key = dataset_id.to_did_key()
    assert did_key == "did:key:" + multibase.encode(b"\xed\x01" + key, "base58btc")
    assert did_key.startswith("did:key:z6Mk")
    assert DatasetId.from_did(did_key) == dataset_id
    assert DatasetId.from_did(dataset_id.to_did_odf()) == dataset_id
    assert DatasetId.from_bytes(dataset_id.to_bytes()) == dataset_id
    assert DatasetId.from_multibase(dataset_id.as_multibase()) == dataset_id


# -- names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "A",
        "0",
        "com.example.prices",
        "ca.bankofcanada.exchange-rates.daily",
        "A1-b2.C3",
        "x-y-z",
        "a" * MAX_NAME_LEN,
    ],
)
def test_valid_names(name: str) -> None:
    assert str(DatasetName(name)) == name
    assert str(AccountName(name)) == name
    assert str(DatasetAlias.parse(name)) == name


def test_name_comparison_is_case_insensitive_only_on_request() -> None:
    a, b = DatasetName("Com.Example"), DatasetName("com.example")
    assert a != b
    assert a.same_as(b)
    assert a.key == b.key == "com.example"
    assert not a.same_as(DatasetName("com.example2"))
    assert AccountName("Alice").same_as(AccountName("aLICE"))


def test_alias_parse_and_compare() -> None:
    alias = DatasetAlias.parse("Alice/Com.Example")
    assert alias.account_name == AccountName("Alice")
    assert alias.dataset_name == DatasetName("Com.Example")
    assert str(alias) == "Alice/Com.Example"
    assert alias.same_as(DatasetAlias.parse("alice/com.example"))
    assert not alias.same_as(DatasetAlias.parse("com.example"))
    assert not alias.same_as(DatasetAlias.parse("bob/com.example"))
    assert not DatasetAlias.parse("com.example").same_as(alias)
    local = DatasetAlias.parse("com.example")
    assert local.account_name is None
    assert local.same_as(DatasetAlias(DatasetName("COM.EXAMPLE")))


def test_alias_field_types_checked() -> None:
    with pytest.raises(InvalidName):
        DatasetAlias("name")  # type: ignore[arg-type]
    with pytest.raises(InvalidName):
        DatasetAlias(DatasetName("a"), DatasetName("b"))  # type: ignore[arg-type]
