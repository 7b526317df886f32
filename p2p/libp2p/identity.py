"""The node's persistent libp2p identity: an ed25519 key in a 0600 file.

The file holds the libp2p protobuf encoding of the private key (``PrivateKey {Type,
Data}``, the form other libp2p implementations marshal keys to), so the peer id stays
the same across restarts. Data of 32 bytes (the seed, as py-libp2p writes it) and of 64
bytes (seed followed by the public key, as go-libp2p writes it) are both read.

The file is created with mode 0600 by an atomic durable write and never followed
through a symlink; a file readable by group or others is refused, like ssh does.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from libp2p.crypto.ed25519 import Ed25519PrivateKey, create_new_key_pair
from libp2p.crypto.keys import KeyPair, KeyType, PrivateKey
from libp2p.peer.id import ID

from p2p.errors import IdentityError, PeerUnavailable
from storage.errors import StorageError
from storage.fsutil import atomic_write_bytes, ensure_dir, open_for_read

__all__ = [
    "IDENTITY_FILE_MODE",
    "MAX_IDENTITY_FILE_BYTES",
    "create_identity",
    "load_identity",
    "load_or_create_identity",
    "parse_peer_id",
    "peer_id_of",
]

#: Permission bits of the identity file.
IDENTITY_FILE_MODE: Final = 0o600
#: Largest identity file read (an ed25519 key file is under 100 bytes).
MAX_IDENTITY_FILE_BYTES: Final = 4096
_SEED_SIZE: Final = 32


def peer_id_of(key_pair: KeyPair) -> str:
    """The base58 peer id (``12D3Koo...``) of ``key_pair``."""
    return str(ID.from_pubkey(key_pair.public_key))


def create_identity(path: Path) -> KeyPair:
    """Generate a new ed25519 identity and store it durably at ``path`` (mode 0600).

    Raises:
        IdentityError: ``path`` exists already.
        OSError: the file cannot be written.
    """
    path = Path(path)
    if os.path.lexists(path):
        raise IdentityError(f"identity file {path} already exists")
    key_pair = create_new_key_pair()
    ensure_dir(path.parent)
    atomic_write_bytes(path, key_pair.private_key.serialize(), mode=IDENTITY_FILE_MODE)
    return key_pair


def load_identity(path: Path) -> KeyPair:
    """Read the identity stored at ``path``.

    Raises:
        IdentityError: missing file, symlink, unsafe permissions, or content that is
            not a libp2p ed25519 private key.
    """
    path = Path(path)
    try:
        f = open_for_read(path)
    except FileNotFoundError:
        raise IdentityError(f"no identity file at {path}") from None
    except (OSError, StorageError) as e:  # UnsafePath for a symlink
        raise IdentityError(f"cannot open identity file {path}: {e}") from None
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise IdentityError(f"identity file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise IdentityError(
                f"identity file {path} is accessible by others (mode {st.st_mode & 0o777:o});"
                " run chmod 600"
            )
        data = f.read(MAX_IDENTITY_FILE_BYTES + 1)
    if len(data) > MAX_IDENTITY_FILE_BYTES:
        raise IdentityError(f"identity file {path} is larger than {MAX_IDENTITY_FILE_BYTES} bytes")
    return _decode_private_key(data, path)


def _decode_private_key(data: bytes, path: Path) -> KeyPair:
    try:
        pb = PrivateKey.deserialize_from_protobuf(data)
    except Exception:  # protobuf raises its own DecodeError family
        raise IdentityError(f"identity file {path} is not a libp2p private key") from None
    if pb.key_type != KeyType.Ed25519.value:
        raise IdentityError(f"identity file {path} does not hold an ed25519 key")
    raw = bytes(pb.data)
    if len(raw) not in (_SEED_SIZE, 2 * _SEED_SIZE):
        raise IdentityError(f"identity file {path} holds an ed25519 key of {len(raw)} bytes")
    try:
        private = Ed25519PrivateKey.from_bytes(raw[:_SEED_SIZE])
    except Exception:
        raise IdentityError(f"identity file {path} holds an invalid ed25519 key") from None
    public = private.get_public_key()
    if len(raw) == 2 * _SEED_SIZE and public.to_bytes() != raw[_SEED_SIZE:]:
        raise IdentityError(f"identity file {path}: public key does not match the private key")
    return KeyPair(private, public)


def load_or_create_identity(path: Path) -> KeyPair:
    """Load the identity at ``path``, creating it on first use.

    Raises:
        IdentityError: see `load_identity`.
        OSError: the new file cannot be written.
    """
    path = Path(path)
    if os.path.lexists(path):
        return load_identity(path)
    return create_identity(path)


def parse_peer_id(text: str) -> ID:
    """Parse a base58 peer id.

    Raises:
        PeerUnavailable: ``text`` is not a peer id.
    """
    try:
        return ID.from_base58(text)
    except Exception:  # base58 / multihash errors of assorted types
        raise PeerUnavailable(f"invalid peer id {text!r}") from None
