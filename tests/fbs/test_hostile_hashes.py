"""Hostile input to every hash, DID and name parser: only ever the typed error."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.did import AccountName, DatasetAlias, DatasetId, DatasetName, parse_did
from fbs.errors import InvalidDid, InvalidHash, InvalidMultiformat, InvalidName
from fbs.multiformats import MAX_MULTIBASE_LEN, Multihash, decode_multibase, parse_hash

GOOD = "f162008c3792b2a4deed1bd7ea2328fb5de5531eccf0fbfa04a7d800cdc267137c635"
GOOD_HEX = GOOD[5:]
GOOD_DID = "did:odf:fed012126262ba49e1ba8392c26f7a39e1ba8d756c7469786d3365200c68402ff65dc"
ARABIC_INDIC = "".join(chr(0x660 + int(c, 16) % 10) for c in GOOD_HEX)
FULLWIDTH = "".join(
    chr(0xFF10 + int(c)) if c.isdigit() else chr(0xFF41 + ord(c) - 97) for c in GOOD_HEX
)

HOSTILE_HASH_TEXTS: list[object] = [
    "",
    "f",
    "F",
    "z",
    "u",
    "../x",
    "f1620/../..",
    "f1620" + "/.." * 21 + "/",
    "f" + "0" * 10_000_000,
    "z" + "2" * 100_000,
    "f1620" + "00" * 31,
    "f1620" + "00" * 33,
    "f1620" + GOOD_HEX[:-1],
    "f1620" + GOOD_HEX + "0",
    "f1621" + GOOD_HEX,
    "f1220" + GOOD_HEX[:-2],
    "f1320" + GOOD_HEX,
    "f0020" + GOOD_HEX,
    "fed01" + GOOD_HEX,  # a DID key, not a hash
    "f9680c00120" + GOOD_HEX[:-2],
    "f960020" + GOOD_HEX,  # non-minimal varint for 0x16
    "f16a000" + GOOD_HEX,  # non-minimal varint for the length
    "f" + "ff" * 10 + GOOD_HEX,  # overlong varint
    "f1620" + GOOD_HEX[:10].upper() + GOOD_HEX[10:],  # mixed case
    "F1620" + GOOD_HEX,  # uppercase prefix, lowercase body
    "f1620 " + GOOD_HEX[:-2],  # bytes.fromhex would skip the space
    "f1620" + " ".join(GOOD_HEX[i : i + 2] for i in range(0, 64, 2)),
    "f1620\t" + GOOD_HEX,
    "f1620" + GOOD_HEX + "\n",
    " " + GOOD,
    GOOD + " ",
    "\ufeff" + GOOD,
    "f1620" + GOOD_HEX[:30] + "\x00" + GOOD_HEX[31:],
    GOOD + "\x00",
    "f1620" + ARABIC_INDIC,
    "f1620" + FULLWIDTH,
    "f１６２０" + GOOD_HEX,
    "z" + "0OIl" * 12,
    "zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY",  # truncated base58btc
    "zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8x",
    "z" + "٣" * 46,
    "u!!!!",
    "uFiAIw3krKk3u0b1-ojKPtd5VMezPD7-gSn2ADNwmcTfGNQ=",  # padded base64url
    "uFiAIw3krKk3u0b1+ojKPtd5VMezPD7/gSn2ADNwmcTfGNQ",  # base64, not base64url
    "mFiAIw3krKk3u0b1+ojKPtd5VMezPD7/gSn2ADNwmcTfGNQ",  # base64: not accepted
    "b" + "a" * 55,  # base32: not accepted
    "x1620" + GOOD_HEX,
    "1620" + GOOD_HEX,
    "/f1620" + GOOD_HEX,
    "did:odf:f1620" + GOOD_HEX,
    None,
    0,
    34,
    1.5,
    b"f1620" + GOOD_HEX.encode(),
    bytearray(34),
    [GOOD],
    {GOOD: GOOD},
    object(),
]

HOSTILE_DIDS: list[object] = [
    "",
    "did:odf:",
    "did:key:",
    "did:odf",
    "did:web:example.com",
    "DID:ODF:" + GOOD_DID[8:],
    "did:ODF:" + GOOD_DID[8:],
    "did:odf:Fed01" + GOOD_DID[13:],
    "did:odf:fED01" + GOOD_DID[13:],
    "did:odf:fed01" + GOOD_DID[13:-2],
    "did:odf:fed01" + GOOD_DID[13:] + "00",
    "did:odf:fed01 " + GOOD_DID[14:],
    "did:odf:fed01" + " " * 64,
    "did:odf:fed01" + ARABIC_INDIC,
    "did:odf:fed01" + FULLWIDTH,
    "did:odf:fed01" + GOOD_DID[13:40] + "\x00" + GOOD_DID[41:],
    GOOD_DID + "\n",
    GOOD_DID + "#key",
    " " + GOOD_DID,
    "did:odf:" + GOOD,  # a hash, not a key
    "did:odf:fec01" + GOOD_DID[13:],  # another key codec
    "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme",  # secp256k1, not ed25519
    "did:key:z6MkggfEoTnRceFGdwjUtm1JaWeHQVKUpttKZUY6KAMaWvq",  # truncated
    "did:key:z6MkggfEoTnRceFGdwjUtm1JaWeHQVKUpttKZUY6KAMaWvqq0",
    "did:odf:../../etc/passwd",
    "did:odf:f" + "0" * 10_000_000,
    "did:odf:u!!",
    None,
    b"did:odf:fed01",
    42,
    ["did:odf:"],
]

HOSTILE_NAMES: list[object] = [
    "",
    "-a",
    "a-",
    "a--b",
    ".a",
    "a.",
    "a..b",
    "a_b",
    "a b",
    " a",
    "a\n",
    "a\x00",
    "../x",
    "..",
    "/",
    "ä",
    "٣",
    "ａ",
    "a" * 254,
    None,
    b"abc",
    7,
]


def _hash_parsers() -> list[Callable[[object], object]]:
    return [
        parse_hash,  # type: ignore[list-item]
        Multihash.from_multibase,  # type: ignore[list-item]
        lambda t: parse_hash(t, code=0x16),  # type: ignore[arg-type]
    ]


def _test_id(value: object) -> str:
    """A test id from ``repr``, without the object's address (``<object object at 0x..>``):
    every process must collect the same ids (pytest-xdist's workers compare them)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))[:40]


@pytest.mark.parametrize("text", HOSTILE_HASH_TEXTS, ids=_test_id)
def test_hostile_hash_texts(text: object) -> None:
    for parser in _hash_parsers():
        with pytest.raises(InvalidHash):
            parser(text)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x16",
        b"\x16\x20",
        b"\x16\x20" + bytes(31),
        b"\x16\x20" + bytes(33),
        b"\x16\x21" + bytes(33),
        b"\x12\x20" + bytes(31),
        b"\x13\x20" + bytes(32),
        b"\xed\x01" + bytes(32),
        b"\x96\x80\xc0\x01\x20" + bytes(31),
        b"\x96\x00\x20" + bytes(32),
        b"\xff" * 100,
        b"\xff" * 9 + b"\x01",
        bytes(10_000_000),
        memoryview(bytes(10_000_000)),
        "1620" + GOOD_HEX,
        GOOD,
        34,  # bytes(34) would be 34 zero bytes
        None,
        [0x16, 0x20],
        1.0,
    ],
    ids=_test_id,
)
def test_hostile_hash_bytes(data: object) -> None:
    with pytest.raises(InvalidHash):
        Multihash.from_bytes(data)  # type: ignore[arg-type]


def test_fromhex_whitespace_trap_is_real() -> None:
    # Documents why the parsers never hand unchecked text to bytes.fromhex.
    spaced = " ".join(GOOD_HEX[i : i + 2] for i in range(0, 64, 2))
    assert bytes.fromhex(spaced) == bytes.fromhex(GOOD_HEX)
    assert "٣".isdigit() and int("٣") == 3
    with pytest.raises(InvalidHash):
        parse_hash("f1620" + spaced)


@pytest.mark.parametrize("text", HOSTILE_DIDS, ids=_test_id)
def test_hostile_dids(text: object) -> None:
    with pytest.raises(InvalidDid):
        DatasetId.from_did(text)  # type: ignore[arg-type]
    with pytest.raises(InvalidDid):
        parse_did(text)  # type: ignore[arg-type]
    if isinstance(text, str) and text.startswith("did:odf:"):
        with pytest.raises(InvalidDid):
            DatasetId.from_multibase(text[len("did:odf:") :])


@pytest.mark.parametrize(
    "data", [b"", b"\xed\x01", b"\xed\x01" + bytes(31), b"\xec\x01" + bytes(32), 34, None, "ed01"]
)
def test_hostile_did_bytes(data: object) -> None:
    with pytest.raises(InvalidDid):
        DatasetId.from_bytes(data)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=_test_id)
def test_hostile_names(name: object) -> None:
    with pytest.raises(InvalidName):
        DatasetName(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidName):
        AccountName(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidName):
        DatasetAlias.parse(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("alias", ["a/b/c", "/a", "a/", "//", "../x", "a/../b", "a/b\x00"])
def test_hostile_aliases(alias: str) -> None:
    with pytest.raises(InvalidName):
        DatasetAlias.parse(alias)


# -- fuzzing: arbitrary text and bytes only ever produce a value or the typed error -------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=MAX_MULTIBASE_LEN + 8))
def test_fuzz_text(text: str) -> None:
    try:
        mh = parse_hash(text)
    except InvalidHash:
        pass
    else:
        assert mh.to_multibase(_base_of(text)) == text
    try:
        did = DatasetId.from_did(text)
    except InvalidDid:
        pass
    else:
        assert DatasetId.from_did(did.to_did_odf()) == did
    try:
        alias = DatasetAlias.parse(text)
    except InvalidName:
        pass
    else:
        assert str(alias) == text


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789abcdefABCDEF \t\n\x00٣０", max_size=80).map(lambda s: "f" + s),
        st.text(alphabet="0123456789abcdefABCDEF", max_size=80).map(lambda s: "F" + s),
        st.text(max_size=60).map(lambda s: "z" + s),
        st.text(max_size=60).map(lambda s: "u" + s),
        st.text(max_size=40).map(lambda s: "f1620" + s),
    )
)
def test_fuzz_multibase_shaped(text: str) -> None:
    try:
        raw = decode_multibase(text)
    except InvalidMultiformat:
        with pytest.raises(InvalidHash):
            parse_hash(text)
        return
    try:
        mh = parse_hash(text)
    except InvalidHash:
        return
    assert mh.to_bytes() == raw


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.binary(max_size=40).map(lambda b: b"\x16\x20" + b),
        st.binary(max_size=40).map(lambda b: b"\x96\x80\xc0\x01\x20" + b),
    )
)
def test_fuzz_bytes(data: bytes) -> None:
    try:
        mh = Multihash.from_bytes(data)
    except InvalidHash:
        return
    assert mh.to_bytes() == data


def _base_of(text: str) -> str:
    return {"f": "base16", "F": "base16upper", "z": "base58btc", "u": "base64url"}[text[0]]
