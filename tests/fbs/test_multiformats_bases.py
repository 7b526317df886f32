"""The base58btc and base64url codecs against the spec vectors and the `multiformats` package."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import multibase

from fbs.errors import InvalidMultiformat
from fbs.multiformats import decode_multibase, encode_multibase
from fbs.multiformats_bases import b58decode, b58encode, b64url_decode

# draft-msporny-base58 and the multibase test vectors.
B58_VECTORS = [
    (b"", ""),
    (b"\0", "1"),
    (b"\0\0", "11"),
    (b"Hello World!", "2NEpo7TZRRrLZSi2U"),
    (
        b"The quick brown fox jumps over the lazy dog.",
        "USm3fpXnKG5EUBx2ndxBDMPVciP5hGey2Jh4NDv6gmeo1LkMeiKrLJUUBk6Z",
    ),
    (bytes.fromhex("0000287fb4cd"), "11233QC4"),
    (b"yes mani !", "7paNL19xttacUY"),
    (b"\0yes mani !", "17paNL19xttacUY"),
    (b"\0\0yes mani !", "117paNL19xttacUY"),
]
B64URL_VECTORS = [(b"yes mani !", "eWVzIG1hbmkgIQ"), (b"\0yes mani !", "AHllcyBtYW5pICE")]


@pytest.mark.parametrize(("raw", "text"), B58_VECTORS)
def test_base58btc_spec_vectors(raw: bytes, text: str) -> None:
    assert b58encode(raw) == text
    assert b58decode(text) == raw


@pytest.mark.parametrize(("raw", "text"), B64URL_VECTORS)
def test_base64url_spec_vectors(raw: bytes, text: str) -> None:
    assert encode_multibase(raw, "base64url") == "u" + text
    assert decode_multibase("u" + text) == raw


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.sampled_from(["base58btc", "base64url"]))
def test_same_text_as_the_package_both_ways(raw: bytes, base: str) -> None:
    ours = encode_multibase(raw, base)
    assert ours == str(multibase.encode(raw, base))
    assert decode_multibase(ours) == raw == bytes(multibase.decode(ours))


@pytest.mark.parametrize(
    "text",
    ["z0OIl", "z2NEpo7TZRRrLZSi2U=", "z é", "ueWVzIG1hbmkgIQ==", "ueWVzIG1hbmkgIR", "uA", "u+/"],
)
def test_foreign_characters_padding_and_stray_bits_refused(text: str) -> None:
    with pytest.raises(InvalidMultiformat):
        decode_multibase(text)


def test_b64url_decode_refuses_an_impossible_length() -> None:
    with pytest.raises(InvalidMultiformat):
        b64url_decode("abcde")
