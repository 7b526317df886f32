"""Dataset identifiers (``did:odf`` / ``did:key`` over ed25519 public keys) and dataset names.

Binary form (inside blocks): ``varint(0xed) || 32-byte public key`` = ``ed 01 ...`` (34 bytes).
Text form: ``did:odf:`` + multibase base16 of the binary form (``did:odf:fed01...``).
``did:key`` is the same key with base58btc as the customary multibase (``did:key:z6Mk...``);
like kamu we accept either method with any accepted multibase (``f``, ``F``, ``z``, ``u``).

Names (``DatasetName``, ``AccountName``) are hostname-like: segments of ASCII letters and
digits with inner single hyphens, joined by ``.``. Lookups compare them case-insensitively.
"""

from __future__ import annotations

import re
import struct
from typing import Final

from fbs.errors import InvalidDid, InvalidMultiformat, InvalidName
from fbs.multiformats import decode_multibase, encode_multibase
from fbs.value import OrderedValue, Value, set_field

DID_ODF_PREFIX: Final = "did:odf:"
DID_KEY_PREFIX: Final = "did:key:"
_ED25519_PREFIX: Final = b"\xed\x01"
#: Longest DID string accepted by parsers.
MAX_DID_LEN: Final = 256
#: Seeds of `DatasetId.new_seeded` are zero-padded to this many bytes; longer ones are refused.
SEED_LEN: Final = 32
#: Longest dataset or account name (a DNS name's limit; names may become directory names).
MAX_NAME_LEN: Final = 253

_HEX_DID_LEN: Final = 1 + 2 * 34  # "f" + hex of ed01 || key
_HEX_LOWER_RE: Final = re.compile(r"[0-9a-f]{68}")
# Explicit ASCII classes: `\w` and `str.isalnum` would admit letters and digits of other scripts.
_NAME_RE: Final = re.compile(r"[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*(?:\.[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*)*")
_U64: Final = (1 << 64) - 1


class DatasetId(OrderedValue):
    """The identity of a dataset (or account): an ed25519 public key.

    Raises:
        InvalidDid: on construction with anything but 32 bytes.
    """

    __slots__ = ("public_key",)

    public_key: bytes

    def __init__(self, public_key: bytes) -> None:
        if not isinstance(public_key, bytes) or len(public_key) != 32:
            raise InvalidDid("an ed25519 public key is 32 bytes")
        set_field(self, "public_key", public_key)

    # -- constructors -------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> DatasetId:
        """Parse the binary form ``ed 01 || key``.

        Raises:
            InvalidDid: not 34 bytes starting with the ed25519-pub multicodec.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidDid(f"binary DatasetID must be bytes, got {type(data).__name__}")
        if len(data) != 34:
            raise InvalidDid("binary DatasetID must be 'ed01' followed by a 32-byte key")
        data = bytes(data)
        if data[:2] != _ED25519_PREFIX:
            raise InvalidDid("binary DatasetID must be 'ed01' followed by a 32-byte key")
        return cls(data[2:])

    @classmethod
    def from_multibase(cls, text: str) -> DatasetId:
        """Parse the multibase part alone (``fed01...``, ``z6Mk...``), e.g. a directory name.

        Raises:
            InvalidDid: malformed multibase or not an ed25519 public key.
        """
        if not isinstance(text, str):
            raise InvalidDid(f"DatasetID must be a string, got {type(text).__name__}")
        # Fast path: the canonical base16 form every ODF writer produces.
        if len(text) == _HEX_DID_LEN and text[0] == "f" and _HEX_LOWER_RE.fullmatch(text, 1):
            return cls.from_bytes(bytes.fromhex(text[1:]))
        try:
            raw = decode_multibase(text, max_len=MAX_DID_LEN)
        except InvalidMultiformat as e:
            raise InvalidDid(f"invalid DatasetID multibase: {e}") from None
        return cls.from_bytes(raw)

    @classmethod
    def from_did(cls, text: str) -> DatasetId:
        """Parse ``did:odf:<multibase>`` or ``did:key:<multibase>``.

        Both methods accept every supported multibase (``f``, ``F``, ``z``, ``u``).

        Raises:
            InvalidDid: not a string, too long, another DID method, or a bad key.
        """
        if not isinstance(text, str):
            raise InvalidDid(f"DID must be a string, got {type(text).__name__}")
        if len(text) > MAX_DID_LEN:
            raise InvalidDid(f"DID longer than {MAX_DID_LEN} characters")
        for prefix in (DID_ODF_PREFIX, DID_KEY_PREFIX):
            if text.startswith(prefix):
                return cls.from_multibase(text[len(prefix) :])
        raise InvalidDid(f"not a did:odf or did:key DID: {text!r}")

    @classmethod
    def new_seeded(cls, seed: bytes) -> DatasetId:
        """Deterministic *test-only* ID from ``seed``, matching kamu's seeded test DIDs.

        The 32 "key" bytes come from Xoshiro256++ (see `xoshiro256pp_bytes`); they are
        not derived from a private key, so nobody can sign for such an ID.

        Raises:
            InvalidDid: ``seed`` is not bytes or longer than `SEED_LEN`.
        """
        return cls(xoshiro256pp_bytes(seed, 32))

    # -- renderings ---------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Binary form stored in blocks."""
        return _ED25519_PREFIX + self.public_key

    def to_did_odf(self) -> str:
        """``did:odf:fed01...`` (canonical ODF text form)."""
        return DID_ODF_PREFIX + "f" + self.to_bytes().hex()

    def to_did_key(self) -> str:
        """``did:key:z6Mk...`` (base58btc, the customary did:key form)."""
        return DID_KEY_PREFIX + encode_multibase(self.to_bytes(), "base58btc")

    def as_multibase(self) -> str:
        """``fed01...``: the multibase part, used as the dataset's directory name."""
        return "f" + self.to_bytes().hex()

    def __str__(self) -> str:
        return self.to_did_odf()

    def __repr__(self) -> str:
        return f"DatasetId({self.to_did_odf()!r})"


def parse_did(text: str) -> DatasetId:
    """Parse a ``did:odf`` / ``did:key`` DID (alias of `DatasetId.from_did`).

    Raises:
        InvalidDid: see `DatasetId.from_did`.
    """
    return DatasetId.from_did(text)


# -- test-only seeded randomness ------------------------------------------------------


def _rotl(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & _U64


def _splitmix64_state(state: int) -> list[int]:
    """Four SplitMix64 outputs: how Rust `rand` replaces an all-zero Xoshiro seed."""
    words = []
    for _ in range(4):
        state = (state + 0x9E3779B97F4A7C15) & _U64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
        words.append(z ^ (z >> 31))
    return words


def xoshiro256pp_bytes(seed: bytes, n: int) -> bytes:
    """``n`` bytes from Xoshiro256++ seeded the way Rust `rand`'s ``SmallRng::from_seed`` is.

    The seed is zero-padded to 32 bytes and read as four little-endian u64 state
    words (an all-zero state is replaced by SplitMix64 outputs seeded with 0); the
    output is successive ``next_u64`` values in little-endian order. Test fixtures
    only: this generator is not cryptographic.

    Raises:
        InvalidDid: ``seed`` is not bytes, longer than `SEED_LEN`, or ``n`` is negative.
    """
    if not isinstance(seed, bytes | bytearray) or len(seed) > SEED_LEN:
        raise InvalidDid(f"seed must be at most {SEED_LEN} bytes")
    if type(n) is not int or n < 0:
        raise InvalidDid(f"byte count must be a non-negative int, got {n!r}")
    s0, s1, s2, s3 = struct.unpack("<4Q", bytes(seed).ljust(SEED_LEN, b"\0"))
    if not (s0 or s1 or s2 or s3):
        s0, s1, s2, s3 = _splitmix64_state(0)
    out = bytearray()
    while len(out) < n:
        out += ((_rotl((s0 + s3) & _U64, 23) + s0) & _U64).to_bytes(8, "little")
        t = (s1 << 17) & _U64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = _rotl(s3, 45)
    return bytes(out[:n])


# -- names ----------------------------------------------------------------------------


def _check_name(kind: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidName(f"{kind} must be a string, got {type(value).__name__}")
    if len(value) > MAX_NAME_LEN:
        raise InvalidName(f"{kind} longer than {MAX_NAME_LEN} characters")
    if not _NAME_RE.fullmatch(value):
        raise InvalidName(
            f"invalid {kind} {value!r}: expected letters/digits with inner '-', "
            "segments joined by '.'"
        )


class DatasetName(Value):
    """A dataset name such as ``com.example.prices``.

    Equality keeps the exact spelling; use `same_as` / `key` for the
    case-insensitive comparison lookups need.

    Raises:
        InvalidName: on construction with an invalid name.
    """

    __slots__ = ("value",)

    value: str

    def __init__(self, value: str) -> None:
        _check_name("dataset name", value)
        set_field(self, "value", value)

    @property
    def key(self) -> str:
        """Case-folded form for lookups (names are ASCII, so lower() is exact)."""
        return self.value.lower()

    def same_as(self, other: DatasetName) -> bool:
        """Case-insensitive equality."""
        return self.key == other.key

    def __str__(self) -> str:
        return self.value


class AccountName(Value):
    """An account name such as ``alice``; same syntax and comparison rules as `DatasetName`.

    Raises:
        InvalidName: on construction with an invalid name.
    """

    __slots__ = ("value",)

    value: str

    def __init__(self, value: str) -> None:
        _check_name("account name", value)
        set_field(self, "value", value)

    @property
    def key(self) -> str:
        """Case-folded form for lookups."""
        return self.value.lower()

    def same_as(self, other: AccountName) -> bool:
        """Case-insensitive equality."""
        return self.key == other.key

    def __str__(self) -> str:
        return self.value


class DatasetAlias(Value):
    """A local dataset alias: ``[account/]name``.

    Raises:
        InvalidName: on construction with fields of the wrong type.
    """

    __slots__ = ("account_name", "dataset_name")

    dataset_name: DatasetName
    account_name: AccountName | None

    def __init__(self, dataset_name: DatasetName, account_name: AccountName | None = None) -> None:
        if not isinstance(dataset_name, DatasetName):
            raise InvalidName("dataset_name must be a DatasetName")
        if account_name is not None and not isinstance(account_name, AccountName):
            raise InvalidName("account_name must be an AccountName or None")
        set_field(self, "dataset_name", dataset_name)
        set_field(self, "account_name", account_name)

    @classmethod
    def parse(cls, text: str) -> DatasetAlias:
        """Parse ``name`` or ``account/name``.

        Raises:
            InvalidName: not a string, too many ``/``, or an invalid part.
        """
        if not isinstance(text, str):
            raise InvalidName(f"alias must be a string, got {type(text).__name__}")
        if len(text) > 2 * MAX_NAME_LEN + 1:
            raise InvalidName("alias too long")
        parts = text.split("/")
        if len(parts) == 1:
            return cls(DatasetName(parts[0]))
        if len(parts) == 2:
            return cls(DatasetName(parts[1]), AccountName(parts[0]))
        raise InvalidName(f"alias must be [account/]name, got {text!r}")

    def same_as(self, other: DatasetAlias) -> bool:
        """Case-insensitive equality of both parts."""
        mine = None if self.account_name is None else self.account_name.key
        theirs = None if other.account_name is None else other.account_name.key
        return mine == theirs and self.dataset_name.same_as(other.dataset_name)

    def __str__(self) -> str:
        if self.account_name is None:
            return self.dataset_name.value
        return f"{self.account_name.value}/{self.dataset_name.value}"
