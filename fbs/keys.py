"""Ed25519 key pairs behind dataset (and node) identities, with domain-separated signatures.

ODF blocks carry no signatures (v0.38); a dataset's identity is the public key in its
`Seed` event. This module lets a node prove control of such a key over its own
messages (e.g. signed refs or announcements).

Domain separation: a signature never covers the raw message. It covers::

    b"odf-node:" + domain + b"\\x00" + message

where ``domain`` is a short ASCII label naming the purpose (``"refs/head"``,
``"announce"``...). The label cannot contain NUL, so the split between domain and
message is unambiguous, and a signature made for one domain never verifies for
another. See `signing_input`.
"""

from __future__ import annotations

import re
from typing import Final

import nacl.exceptions
import nacl.signing

from fbs.did import DID_KEY_PREFIX, DatasetId
from fbs.errors import InvalidDid, InvalidKey, InvalidMultiformat, InvalidSignature
from fbs.multiformats import decode_multibase, encode_multibase

#: Prefix of every signed payload; keeps our signatures from being valid in other protocols.
SIGNING_CONTEXT: Final = b"odf-node:"
#: Longest accepted domain label.
MAX_DOMAIN_LEN: Final = 64
#: Sizes fixed by ed25519.
SEED_SIZE: Final = 32
SIGNATURE_SIZE: Final = 64
#: Longest accepted multibase signature text (base16 of 64 bytes is 129 characters).
MAX_SIGNATURE_TEXT_LEN: Final = 160

_DOMAIN_RE: Final = re.compile(r"[a-z0-9][a-z0-9._/-]*")
_BYTES_LIKE: Final = (bytes, bytearray, memoryview)


def signing_input(domain: str, message: bytes | bytearray | memoryview) -> bytes:
    """The exact bytes an ed25519 signature covers for ``message`` in ``domain``.

    Raises:
        InvalidKey: ``domain`` is not a lowercase ASCII label of at most
            `MAX_DOMAIN_LEN` characters (``[a-z0-9][a-z0-9._/-]*``), or ``message``
            is not bytes-like.
    """
    if not isinstance(domain, str) or len(domain) > MAX_DOMAIN_LEN:
        raise InvalidKey(f"signing domain must be a str of at most {MAX_DOMAIN_LEN} characters")
    if not _DOMAIN_RE.fullmatch(domain):
        raise InvalidKey(f"invalid signing domain {domain!r}")
    if not isinstance(message, _BYTES_LIKE):
        raise InvalidKey(f"message must be bytes, got {type(message).__name__}")
    return SIGNING_CONTEXT + domain.encode("ascii") + b"\x00" + bytes(message)


class KeyPair:
    """An ed25519 key pair. The private half never appears in ``repr``/``str``."""

    __slots__ = ("_signing_key",)

    def __init__(self, seed: bytes) -> None:
        """Build the key pair whose private key is the 32-byte ``seed``.

        Raises:
            InvalidKey: ``seed`` is not 32 bytes.
        """
        if not isinstance(seed, _BYTES_LIKE) or len(seed) != SEED_SIZE:
            raise InvalidKey(f"an ed25519 private key (seed) is {SEED_SIZE} bytes")
        self._signing_key = nacl.signing.SigningKey(bytes(seed))

    @classmethod
    def generate(cls) -> KeyPair:
        """A fresh key pair from the OS CSPRNG (as kamu does for every new dataset)."""
        return cls(bytes(nacl.signing.SigningKey.generate()))

    @classmethod
    def from_private_bytes(cls, data: bytes) -> KeyPair:
        """Restore a key pair from `private_bytes` output.

        Raises:
            InvalidKey: ``data`` is not 32 bytes.
        """
        return cls(data)

    @property
    def public_key(self) -> bytes:
        """The 32-byte ed25519 public key."""
        return bytes(self._signing_key.verify_key)

    @property
    def dataset_id(self) -> DatasetId:
        """The DID naming this key (``did:odf:fed01...``)."""
        return DatasetId(self.public_key)

    def private_bytes(self) -> bytes:
        """The 32-byte private seed, for storage. Keep it secret."""
        return bytes(self._signing_key)

    def sign(self, message: bytes | bytearray | memoryview, domain: str) -> bytes:
        """A 64-byte detached signature over `signing_input` ``(domain, message)``.

        Raises:
            InvalidKey: invalid ``domain`` or a ``message`` that is not bytes-like.
        """
        payload = signing_input(domain, message)
        return bytes(self._signing_key.sign(payload).signature)

    def __repr__(self) -> str:
        return f"KeyPair({self.dataset_id.to_did_odf()!r})"


def verify(
    dataset_id: DatasetId,
    message: bytes | bytearray | memoryview,
    signature: bytes | bytearray | memoryview,
    domain: str,
) -> None:
    """Check that ``signature`` was made by ``dataset_id``'s key over ``message`` in ``domain``.

    Raises:
        InvalidSignature: the signature is malformed or does not verify (wrong key,
            wrong domain, altered message, a public key that is not a curve point, or
            a message that is not bytes-like).
        InvalidKey: invalid ``domain``.
    """
    if not isinstance(dataset_id, DatasetId):
        raise InvalidSignature(f"expected a DatasetId, got {type(dataset_id).__name__}")
    if not isinstance(signature, _BYTES_LIKE) or len(signature) != SIGNATURE_SIZE:
        raise InvalidSignature(f"an ed25519 signature is {SIGNATURE_SIZE} bytes")
    if not isinstance(message, _BYTES_LIKE):
        raise InvalidSignature(f"message must be bytes, got {type(message).__name__}")
    payload = signing_input(domain, message)
    try:
        nacl.signing.VerifyKey(dataset_id.public_key).verify(payload, bytes(signature))
    except (nacl.exceptions.CryptoError, ValueError, TypeError):
        raise InvalidSignature(f"signature does not verify for {dataset_id}") from None


# -- did:key verification methods and textual signatures -----------------------------


def verification_method(dataset_id: DatasetId) -> str:
    """The did:key verification-method id of a key: ``did:key:z6Mk...#z6Mk...``."""
    key = dataset_id.to_did_key()[len(DID_KEY_PREFIX) :]
    return f"{DID_KEY_PREFIX}{key}#{key}"


def parse_verification_method(text: str) -> DatasetId:
    """Parse a did:key verification method, with or without its ``#<key>`` fragment.

    Raises:
        InvalidDid: not a did:key, a bad key, or a fragment that names another key.
    """
    if not isinstance(text, str):
        raise InvalidDid(f"verification method must be a string, got {type(text).__name__}")
    did, sep, fragment = text.partition("#")
    if not did.startswith(DID_KEY_PREFIX):
        raise InvalidDid(f"verification method is not a did:key: {text!r}")
    dataset_id = DatasetId.from_did(did)
    if sep and fragment != did[len(DID_KEY_PREFIX) :]:
        raise InvalidDid(f"verification method fragment does not match its key: {text!r}")
    return dataset_id


def signature_to_multibase(signature: bytes | bytearray | memoryview) -> str:
    """Multibase base64url (``u...``) text of a signature, the form W3C proofs use.

    Raises:
        InvalidSignature: ``signature`` is not 64 bytes.
    """
    if not isinstance(signature, _BYTES_LIKE) or len(signature) != SIGNATURE_SIZE:
        raise InvalidSignature(f"an ed25519 signature is {SIGNATURE_SIZE} bytes")
    return encode_multibase(bytes(signature), "base64url")


def signature_from_multibase(text: str) -> bytes:
    """Parse a multibase signature (any accepted base).

    Raises:
        InvalidSignature: malformed text or not 64 bytes.
    """
    try:
        raw = decode_multibase(text, max_len=MAX_SIGNATURE_TEXT_LEN)
    except InvalidMultiformat as e:
        raise InvalidSignature(f"invalid signature text: {e}") from None
    if len(raw) != SIGNATURE_SIZE:
        raise InvalidSignature(f"an ed25519 signature is {SIGNATURE_SIZE} bytes")
    return raw
