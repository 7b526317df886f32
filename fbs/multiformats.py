"""Multihash / multibase / multicodec for ODF identifiers.

ODF names every object by a multihash rendered in multibase base16 (``f1620...``).
The `multiformats` package is the reference for code tables and non-hex multibases,
but it is slow (~2k encodes/s) because of runtime type validation, so the hot path
(sha3-256 hashing, base16 rendering and parsing) is implemented here and
cross-checked against the library in the tests. The other multibases ODF reads (``z``
base58btc in ``did:key`` keys, ``u`` base64url in signatures) go through the small codecs
of `fbs.multiformats_bases`, also cross-checked against the library.

Parsing is strict: every accepted text is the *canonical* encoding of its bytes
(single-case hex, no whitespace, no padding, no stray bits), so one value never has
two accepted spellings in the same base.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from fbs.errors import InvalidHash, InvalidMultiformat
from fbs.multiformats_bases import b58decode, b58encode, b64url_decode, b64url_encode
from fbs.value import OrderedValue, set_field

# Multicodec codes used by ODF.
SHA2_256: Final = 0x12
SHA3_256: Final = 0x16
ED25519_PUB: Final = 0xED
ARROW0_SHA3_256: Final = 0x300016
ODF_METADATA_BLOCK: Final = 0x400000
ODF_DATASET_SNAPSHOT: Final = 0x400001

#: Digest sizes we accept per hash code; anything else is refused.
DIGEST_SIZES: Final[dict[int, int]] = {SHA2_256: 32, SHA3_256: 32, ARROW0_SHA3_256: 32}

#: Longest multibase string accepted by parsers (defence against huge inputs).
MAX_MULTIBASE_LEN: Final = 256
#: Longest binary multihash accepted by `Multihash.from_bytes` (code and length
#: varints are at most 9 bytes each, digests at most 32 bytes).
MAX_MULTIHASH_BYTES: Final = 64
#: Varints are capped at 9 bytes (63 bits) by the multiformats spec.
MAX_VARINT_BYTES: Final = 9

#: Multibase name -> prefix character, for the encodings ODF readers accept.
MULTIBASE_PREFIXES: Final[dict[str, str]] = {
    "base16": "f",
    "base16upper": "F",
    "base58btc": "z",
    "base64url": "u",
}
_PREFIX_BASES: Final[dict[str, str]] = {p: name for name, p in MULTIBASE_PREFIXES.items()}

# Explicit ASCII ranges: `str.isdigit`/`int()` would accept other scripts' digits and
# `bytes.fromhex` skips whitespace, so neither may be used to validate hex text.
_HEX_LOWER_RE: Final = re.compile(r"(?:[0-9a-f]{2})*")
_HEX_UPPER_RE: Final = re.compile(r"(?:[0-9A-F]{2})*")

_SHA3_PREFIX: Final = b"\x16\x20"
_ARROW0_PREFIX: Final = b"\x96\x80\xc0\x01\x20"


def encode_varint(value: int) -> bytes:
    """Encode an unsigned LEB128 varint as used by multiformats.

    Raises:
        InvalidMultiformat: if ``value`` is not a non-negative int below 2**63.
    """
    if type(value) is not int or value < 0 or value >= 1 << (7 * MAX_VARINT_BYTES):
        raise InvalidMultiformat(f"varint must be an int in [0, 2**63), got {value!r}")
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns (value, next_pos).

    Multiformats caps varints at 9 bytes and forbids non-minimal encodings.

    Raises:
        InvalidMultiformat: truncated, overlong or non-minimal varint.
    """
    value = 0
    shift = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise InvalidMultiformat("truncated varint")
        b = data[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if b == 0 and i > 0:
                raise InvalidMultiformat("non-minimal varint")
            return value, pos + i + 1
        shift += 7
    raise InvalidMultiformat("varint longer than 9 bytes")


def encode_multibase(data: bytes, base: str = "base16") -> str:
    """Render ``data`` as a multibase string.

    Args:
        data: the bytes to encode.
        base: one of `MULTIBASE_PREFIXES` (``base16`` is the ODF canonical form).

    Raises:
        InvalidMultiformat: for an unsupported base name.
    """
    if base == "base16":
        return "f" + data.hex()
    if base == "base16upper":
        return "F" + data.hex().upper()
    if base == "base58btc":
        return "z" + b58encode(bytes(data))
    if base == "base64url":
        return "u" + b64url_encode(bytes(data))
    raise InvalidMultiformat(f"unsupported multibase {base!r}")


def decode_multibase(text: str, *, max_len: int = MAX_MULTIBASE_LEN) -> bytes:
    """Decode a multibase string in one of the accepted bases (``f``, ``F``, ``z``, ``u``).

    Only canonical spellings are accepted: re-encoding the result in the same base
    gives back ``text`` exactly.

    Raises:
        InvalidMultiformat: non-string, empty, longer than ``max_len``, unsupported
            base, or malformed body.
    """
    if not isinstance(text, str):
        raise InvalidMultiformat(f"multibase text must be a str, got {type(text).__name__}")
    if not text or len(text) > max_len:
        raise InvalidMultiformat(f"multibase text empty or longer than {max_len} characters")
    prefix, body = text[0], text[1:]
    if prefix == "f":
        if not _HEX_LOWER_RE.fullmatch(body):
            raise InvalidMultiformat(f"invalid lowercase base16 text: {text!r}")
        return bytes.fromhex(body)
    if prefix == "F":
        if not _HEX_UPPER_RE.fullmatch(body):
            raise InvalidMultiformat(f"invalid uppercase base16 text: {text!r}")
        return bytes.fromhex(body)
    base = _PREFIX_BASES.get(prefix)
    if base is None or not body.isascii():
        raise InvalidMultiformat(f"unsupported multibase or non-ASCII text: {text!r}")
    raw = b58decode(body) if prefix == "z" else b64url_decode(body)
    # base64url tolerates stray bits in its last character; insist on the canonical form.
    if encode_multibase(raw, base) != text:
        raise InvalidMultiformat(f"non-canonical {base} text: {text!r}")
    return raw


class Multihash(OrderedValue):
    """A multihash: hash-function code plus digest.

    Only codes in `DIGEST_SIZES` with their exact digest size are constructible,
    so a `Multihash` value is always something ODF can address by.

    Raises:
        InvalidHash: on construction with an unsupported code or a wrong digest.
    """

    __slots__ = ("code", "digest")

    code: int
    digest: bytes

    def __init__(self, code: int, digest: bytes) -> None:
        # `type(...) is int` also refuses bool and float (22.0 == 0x16 as a dict key).
        size = DIGEST_SIZES.get(code) if type(code) is int else None
        if size is None:
            raise InvalidHash(f"unsupported multihash code {code!r}")
        if not isinstance(digest, bytes):
            raise InvalidHash(f"digest must be bytes, got {type(digest).__name__}")
        if len(digest) != size:
            raise InvalidHash(f"multihash 0x{code:x} needs a {size}-byte digest, got {len(digest)}")
        set_field(self, "code", code)
        set_field(self, "digest", digest)

    # Written out (not `Value`'s): hashes are dictionary keys on every hot path.
    def __eq__(self, other: object) -> bool:
        if other.__class__ is Multihash:
            return self.digest == other.digest and self.code == other.code
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.code, self.digest))

    # -- constructors -------------------------------------------------------------

    @classmethod
    def sha3_256(cls, data: bytes | bytearray | memoryview) -> Multihash:
        """Hash ``data`` with SHA3-256 (the ODF default)."""
        return cls(SHA3_256, hashlib.sha3_256(data).digest())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Multihash:
        """Parse the binary form ``varint(code) varint(len) digest``.

        Raises:
            InvalidHash: for anything that is not a supported, well-formed multihash.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidHash(f"binary multihash must be bytes, got {type(data).__name__}")
        # Check the size before copying: a memoryview may be arbitrarily large.
        if len(data) > MAX_MULTIHASH_BYTES:
            raise InvalidHash(f"binary multihash longer than {MAX_MULTIHASH_BYTES} bytes")
        data = bytes(data)
        # Fast paths: the two codes ODF writes.
        if len(data) == 34 and data[:2] == _SHA3_PREFIX:
            return cls(SHA3_256, data[2:])
        if len(data) == 37 and data[:5] == _ARROW0_PREFIX:
            return cls(ARROW0_SHA3_256, data[5:])
        try:
            code, pos = decode_varint(data)
            length, pos = decode_varint(data, pos)
        except InvalidMultiformat as e:
            raise InvalidHash(f"invalid binary multihash: {e}") from None
        if code not in DIGEST_SIZES:
            raise InvalidHash(f"unsupported multihash code 0x{code:x}")
        if length != DIGEST_SIZES[code] or len(data) - pos != length:
            raise InvalidHash("multihash length does not match its digest")
        return cls(code, data[pos:])

    @classmethod
    def from_multibase(cls, text: str) -> Multihash:
        """Parse a multibase string: ``f``/``F`` (base16), ``z`` (base58btc), ``u`` (base64url).

        Raises:
            InvalidHash: for anything that is not a supported, well-formed multihash.
        """
        try:
            raw = decode_multibase(text)
        except InvalidMultiformat as e:
            raise InvalidHash(str(e)) from None
        return cls.from_bytes(raw)

    # -- renderings ---------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Binary multihash as stored inside flatbuffers."""
        if self.code == SHA3_256:
            return _SHA3_PREFIX + self.digest
        if self.code == ARROW0_SHA3_256:
            return _ARROW0_PREFIX + self.digest
        return encode_varint(self.code) + encode_varint(len(self.digest)) + self.digest

    def to_multibase(self, base: str = "base16") -> str:
        """Multibase text; the default base16 lowercase is the canonical ODF form (``f1620...``).

        Raises:
            InvalidMultiformat: for an unsupported base name.
        """
        return encode_multibase(self.to_bytes(), base)

    def short(self) -> str:
        """Last 8 characters of the multibase form, for display."""
        return self.to_multibase()[-8:]

    def __str__(self) -> str:
        return self.to_multibase()

    def __repr__(self) -> str:
        return f"Multihash({self.to_multibase()!r})"


def parse_hash(text: str, *, code: int | None = None) -> Multihash:
    """Parse a textual ODF hash (block, physical or logical), e.g. from a CLI argument or a URL.

    Args:
        text: multibase text of a binary multihash.
        code: if given, the multihash code the caller requires (e.g. `SHA3_256` for
            block hashes).

    Raises:
        InvalidHash: malformed text, unsupported code, or a code other than ``code``.
    """
    mh = Multihash.from_multibase(text)
    if code is not None and mh.code != code:
        raise InvalidHash(f"expected multihash code 0x{code:x}, got 0x{mh.code:x}")
    return mh
