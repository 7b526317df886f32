"""Errors raised by the `fbs` package.

Tree::

    OdfError                      (base of every odf-node error, all packages)
    └── FbsError
        ├── MalformedBlock        bytes that are not a valid v0.38 block/manifest
        │   └── BlockLimitExceeded    a named decode limit was hit (size, depth, count)
        ├── UnsupportedVersion    manifest version other than 2 or 3, or wrong kind
        ├── ManifestError         YAML/JSON manifest that does not describe a valid value
        │   ├── ManifestFieldError      a bad value at a path (``content.metadata[2].read``)
        │   └── ManifestLimitExceeded   a named manifest limit was hit (size, depth, nodes)
        ├── InvalidMultiformat    bad multihash / multibase / multicodec text or bytes
        │   └── InvalidHash       a string/bytes that is not an acceptable ODF hash
        ├── InvalidDid            bad did:odf / did:key
        ├── InvalidSignature      an ed25519 signature that does not verify
        ├── InvalidKey            malformed ed25519 key material or signing domain
        ├── InvalidName           bad dataset / account name or alias
        ├── InvalidTimestamp      an impossible / unparsable timestamp
        ├── InvalidValue          a model value the schema cannot encode (type, range, absent)
        ├── UnsupportedDataType   an Arrow type the logical hash cannot digest
        ├── LogicalHashError      misuse of a logical-hash digest
        │   └── DataSchemaMismatch    a batch/array that does not match the hashed schema
        └── SchemaConversionError an Arrow type with no ODF schema equivalent (or back)
            └── InvalidDdlSchema      a DDL column definition that cannot be parsed
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ExitCategory(StrEnum):
    """What kind of failure an error is: the ``odf`` exit code and the HTTP status it maps
    to (`node.error_contract`). Every error class carries one as ``exit_category``; a
    subclass inherits its base's unless it says otherwise."""

    INTERNAL = "internal"  # a bug: nothing the user did or can retry
    USAGE = "usage"  # a command line or setting that cannot be acted on
    NOT_FOUND = "not-found"  # a named dataset, object, source or file does not exist
    INVALID = "invalid"  # input that is malformed or refused
    REFUSED = "refused"  # well-formed input a rule refuses (HTTP tells it from malformed)
    VERIFICATION_FAILED = "verification-failed"  # a dataset did not verify
    DAMAGED = "damaged"  # stored bytes that no longer match what names them
    CONFLICT = "conflict"  # another writer or history got there first
    UNAVAILABLE = "unavailable"  # a service or source cannot be reached: a retry may cure


class OdfError(Exception):
    """Base class of every error raised by odf-node."""

    exit_category: ClassVar[ExitCategory] = ExitCategory.INTERNAL


class FbsError(OdfError):
    """Base class of the metadata-model errors."""

    exit_category = ExitCategory.INVALID


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


class InvalidTimestamp(FbsError, ValueError):
    """An impossible or unparsable timestamp (calendar fields, RFC 3339 text)."""


class InvalidValue(FbsError, ValueError):
    """A model value that cannot be encoded (wrong type, out-of-range scalar, missing field)."""


class InvalidKey(FbsError, ValueError):
    """Malformed ed25519 key material (wrong size or type) or signing parameters."""


class InvalidName(FbsError, ValueError):
    """A dataset name, account name or alias that violates the naming rules."""


class LogicalHashError(FbsError):
    """Misuse of a logical-hash digest (e.g. updating it after `finalize`)."""


class DataSchemaMismatch(LogicalHashError, ValueError):
    """A record batch or array whose columns do not match the schema being hashed."""


class ManifestFieldError(ManifestError):
    """A manifest value that is wrong at a specific place.

    Attributes:
        path: dotted/indexed location, e.g. ``content.metadata[2].read.schema``
            (empty for the document root).
        reason: what is wrong there.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class ManifestLimitExceeded(ManifestError):
    """A manifest exceeded a named limit (document size, nesting depth, node count)."""


class SchemaConversionError(FbsError, ValueError):
    """An Arrow type with no RFC-016 (ODF schema) equivalent, or an ODF type Arrow lacks."""


class InvalidDdlSchema(SchemaConversionError):
    """A DDL column definition (``ddlSchema``) that cannot be parsed; names the definition."""
