"""Dataset identifiers: ``did:odf`` (and ``did:key``) over ed25519 public keys.

Binary form (inside blocks): ``varint(0xed) || 32-byte public key`` = ``ed 01 ...`` (34 bytes).
Text form: ``did:odf:`` + multibase base16 of the binary form (``did:odf:fed01...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fbs.errors import InvalidDid

DID_ODF_PREFIX: Final = "did:odf:"
DID_KEY_PREFIX: Final = "did:key:"
_ED25519_PREFIX: Final = b"\xed\x01"
#: Longest DID string accepted by parsers.
MAX_DID_LEN: Final = 256


@dataclass(frozen=True, slots=True, order=True)
class DatasetId:
    """The identity of a dataset: an ed25519 public key."""

    public_key: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.public_key, bytes) or len(self.public_key) != 32:
            raise InvalidDid("an ed25519 public key is 32 bytes")

    @classmethod
    def from_bytes(cls, data: bytes) -> DatasetId:
        """Parse the binary form ``ed 01 || key``."""
        data = bytes(data)
        if len(data) != 34 or data[:2] != _ED25519_PREFIX:
            raise InvalidDid("binary DatasetID must be 'ed01' followed by a 32-byte key")
        return cls(data[2:])

    def to_bytes(self) -> bytes:
        """Binary form stored in blocks."""
        return _ED25519_PREFIX + self.public_key

    def to_did_odf(self) -> str:
        """``did:odf:fed01...`` (canonical ODF text form)."""
        return DID_ODF_PREFIX + "f" + self.to_bytes().hex()

    def as_multibase(self) -> str:
        """``fed01...``: the multibase part, used as the dataset's directory name."""
        return "f" + self.to_bytes().hex()

    @classmethod
    def from_did(cls, text: str) -> DatasetId:
        """Parse ``did:odf:`` / ``did:key:`` with base16 (``f``) multibase.

        Other multibases are handled by `fbs.did` extensions (see parse_did).
        """
        if not isinstance(text, str) or len(text) > MAX_DID_LEN:
            raise InvalidDid("DID must be a short string")
        for prefix in (DID_ODF_PREFIX, DID_KEY_PREFIX):
            if text.startswith(prefix):
                body = text[len(prefix) :]
                break
        else:
            raise InvalidDid(f"not a did:odf or did:key DID: {text!r}")
        if body.startswith("f") and len(body) == 69:
            try:
                raw = bytes.fromhex(body[1:])
            except ValueError:
                raise InvalidDid(f"invalid hex in DID {text!r}") from None
            if body[1:] != body[1:].lower():
                raise InvalidDid(f"mixed-case hex in DID {text!r}")
            return cls.from_bytes(raw)
        raise InvalidDid(f"unsupported DID encoding: {text!r}")

    def __str__(self) -> str:
        return self.to_did_odf()

    def __repr__(self) -> str:
        return f"DatasetId({self.to_did_odf()!r})"
