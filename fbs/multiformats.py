"""Multihash / multibase / multicodec for ODF identifiers.

ODF names every object by a multihash rendered in multibase base16 (``f1620...``).
The `multiformats` package is the reference for code tables and parsing, but it is
slow (~2k encodes/s) because of runtime type validation, so the hot sha3-256 path
(hashing, hex rendering and parsing of ``f1620`` strings) is implemented here and
cross-checked against the library in the tests.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from fbs.errors import InvalidHash, InvalidMultiformat

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

_HEX_RE: Final = re.compile(r"[0-9a-fA-F]*")


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 varint as used by multiformats."""
    if value < 0:
        raise InvalidMultiformat(f"varint must be non-negative, got {value}")
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
    """
    value = 0
    shift = 0
    for i in range(9):
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


@dataclass(frozen=True, slots=True, order=True)
class Multihash:
    """A multihash: hash-function code plus digest.

    Only codes in `DIGEST_SIZES` with their exact digest size are constructible,
    so a `Multihash` value is always something ODF can address by.
    """

    code: int
    digest: bytes

    def __post_init__(self) -> None:
        size = DIGEST_SIZES.get(self.code)
        if size is None:
            raise InvalidHash(f"unsupported multihash code 0x{self.code:x}")
        if not isinstance(self.digest, bytes) or len(self.digest) != size:
            raise InvalidHash(
                f"multihash 0x{self.code:x} needs a {size}-byte digest, got {len(self.digest)}"
            )

    # -- constructors -------------------------------------------------------------

    @classmethod
    def sha3_256(cls, data: bytes | bytearray | memoryview) -> Multihash:
        """Hash ``data`` with SHA3-256 (the ODF default)."""
        return cls(SHA3_256, hashlib.sha3_256(data).digest())

    @classmethod
    def from_bytes(cls, data: bytes) -> Multihash:
        """Parse the binary form ``varint(code) varint(len) digest``."""
        data = bytes(data)
        # Fast path: the overwhelmingly common sha3-256 prefix.
        if len(data) == 34 and data[0] == 0x16 and data[1] == 0x20:
            return cls(SHA3_256, data[2:])
        code, pos = decode_varint(data)
        length, pos = decode_varint(data, pos)
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
        if not isinstance(text, str):
            raise InvalidHash(f"hash must be a string, got {type(text).__name__}")
        if not text or len(text) > MAX_MULTIBASE_LEN:
            raise InvalidHash("hash string empty or too long")
        base = text[0]
        body = text[1:]
        if base in "fF":
            if len(body) % 2 or not _HEX_RE.fullmatch(body):
                raise InvalidHash(f"invalid base16 hash: {text!r}")
            # Multibase base16 is single-case: 'f' lowercase, 'F' uppercase.
            if (base == "f" and body != body.lower()) or (base == "F" and body != body.upper()):
                raise InvalidHash(f"mixed-case base16 hash: {text!r}")
            raw = bytes.fromhex(body)
        elif base in "zu":
            raw = _decode_with_library(text)
        else:
            raise InvalidHash(f"unsupported multibase prefix {base!r} in {text!r}")
        try:
            return cls.from_bytes(raw)
        except InvalidMultiformat as e:
            raise InvalidHash(f"invalid multihash {text!r}: {e}") from None

    # -- renderings ---------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Binary multihash as stored inside flatbuffers."""
        if self.code == SHA3_256:
            return b"\x16\x20" + self.digest
        return encode_varint(self.code) + encode_varint(len(self.digest)) + self.digest

    def to_multibase(self) -> str:
        """Multibase base16 lowercase: the canonical ODF text form (``f1620...``)."""
        return "f" + self.to_bytes().hex()

    def short(self) -> str:
        """Last 8 characters of the multibase form, for display."""
        return self.to_multibase()[-8:]

    def __str__(self) -> str:
        return self.to_multibase()

    def __repr__(self) -> str:
        return f"Multihash({self.to_multibase()!r})"


def _decode_with_library(text: str) -> bytes:
    """Decode non-hex multibase via the `multiformats` package (cold path)."""
    try:
        from multiformats import multibase
    except ImportError as e:  # pragma: no cover - it is a hard dependency
        raise InvalidHash("multiformats package is not installed") from e
    try:
        return bytes(multibase.decode(text))
    except Exception as e:  # the library raises assorted exception types
        raise InvalidHash(f"invalid multibase string {text!r}: {e}") from None


def parse_hash(text: str) -> Multihash:
    """Parse a textual ODF hash (block or physical), e.g. from a CLI argument or a URL."""
    return Multihash.from_multibase(text)
