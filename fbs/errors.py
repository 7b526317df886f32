"""Errors raised by the `fbs` package.

Tree::

    OdfError                      (base of every odf-node error, all packages)
    └── FbsError
        ├── MalformedBlock        bytes that are not a valid v0.38 block/manifest
        │   └── BlockLimitExceeded    a named decode limit was hit (size, depth, count)
        ├── UnsupportedVersion    manifest version other than 2 or 3, or wrong kind
        ├── ManifestError         YAML/JSON manifest that does not describe a valid value
        ├── InvalidMultiformat    bad multihash / multibase / multicodec text or bytes
        │   └── InvalidHash       a string/bytes that is not an acceptable ODF hash
        ├── InvalidDid            bad did:odf / did:key
        ├── InvalidSignature      an ed25519 signature that does not verify
        └── UnsupportedDataType   an Arrow type the logical hash cannot digest
"""

from __future__ import annotations


class OdfError(Exception):
    """Base class of every error raised by odf-node."""


class FbsError(OdfError):
    """Base class of the metadata-model errors."""


class MalformedBlock(FbsError, ValueError):
    """Bytes that do not decode to a valid block (or flatbuffer table)."""


class BlockLimitExceeded(MalformedBlock):
    """Decoding stopped because a named limit (size, depth, count) was exceeded."""


class UnsupportedVersion(MalformedBlock):
    """A manifest whose kind or version this implementation does not read."""


class ManifestError(FbsError, ValueError):
    """A YAML/JSON manifest that does not describe a valid value."""


class InvalidMultiformat(FbsError, ValueError):
    """Malformed multihash, multibase or multicodec data."""


class InvalidHash(InvalidMultiformat):
    """A hash string or byte string that is not an acceptable ODF multihash."""


class InvalidDid(FbsError, ValueError):
    """A malformed or unsupported DID."""


class InvalidSignature(FbsError, ValueError):
    """An ed25519 signature that does not verify."""


class UnsupportedDataType(FbsError, TypeError):
    """An Arrow data type that the logical hash (arrow-digest V0) cannot digest."""
