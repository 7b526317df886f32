"""Binary codec: model values <-> flatbuffers bytes, byte-exact with kamu-cli.

Blocks are stored as a `Manifest` flatbuffer (``kind = 0x400000``, ``version`` 2 or 3)
whose ``content`` is a complete, independently finished `MetadataBlock` flatbuffer.
The block hash is the SHA3-256 multihash of the whole stored manifest bytes.

Public API:

- `encode_block(block, version=2) -> bytes`: full manifest bytes of a block.
- `decode_block(data, limits) -> MetadataBlock`; `decode_block_versioned` also returns
  the manifest version.
- `block_hash(data) -> Multihash`: SHA3-256 of the stored bytes.
- `is_canonical(data) -> bool`: whether re-encoding the decoded block reproduces ``data``.
- `encode_table(value, version=2) -> bytes` / `decode_table(cls, data, limits)`:
  standalone root tables (engine protocol messages, DatasetSnapshot, ...).
- `encode_manifest(kind, version, content)` / `decode_manifest(data, limits)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeVar

from fbs.codec.decoder import decode_root
from fbs.errors import FbsError, InvalidValue, MalformedBlock, UnsupportedVersion
from fbs.limits import DEFAULT_LIMITS, DecodeLimits
from fbs.model.events import Manifest, MetadataBlock
from fbs.model.schema import schema_of
from fbs.multiformats import ODF_DATASET_SNAPSHOT, ODF_METADATA_BLOCK, Multihash

if TYPE_CHECKING:
    from fbs.codec.encoder import timestamp_alignment

__all__ = [
    "DEFAULT_BLOCK_VERSION",
    "MANIFEST_KIND_BLOCK",
    "MANIFEST_KIND_SNAPSHOT",
    "SUPPORTED_VERSIONS",
    "block_hash",
    "decode_block",
    "decode_block_versioned",
    "decode_manifest",
    "decode_table",
    "encode_block",
    "encode_manifest",
    "encode_table",
    "is_canonical",
    "timestamp_alignment",
]

#: Manifest kind (multicodec ``odf-metadata-block``) of stored blocks.
MANIFEST_KIND_BLOCK: Final = ODF_METADATA_BLOCK
#: Manifest kind (multicodec ``odf-dataset-snapshot``) of binary snapshots.
MANIFEST_KIND_SNAPSHOT: Final = ODF_DATASET_SNAPSHOT
#: Version written by default: 2 is readable by kamu v0.264 *and* >= v0.265.
DEFAULT_BLOCK_VERSION: Final = 2
#: Block format versions read and written: 2 (kamu <= 0.264) and 3 (kamu >= 0.265).
SUPPORTED_VERSIONS: Final = (2, 3)

_T = TypeVar("_T")


def __getattr__(name: str) -> Any:
    # The encoder (flatbuffers, which imports numpy) loads on first use: reading blocks,
    # what most commands do, does not need it.
    if name == "timestamp_alignment":
        from fbs.codec import encoder

        return encoder.timestamp_alignment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def encode_table(value: object, version: int = DEFAULT_BLOCK_VERSION) -> bytes:
    """Encode a model table as a standalone, finished flatbuffer.

    Args:
        value: any model table instance (e.g. `TransformRequest`, `DatasetSnapshot`).
        version: block format whose Timestamp layout to use (2: unaligned, 3: aligned).

    Raises:
        InvalidValue: if the value does not fit the schema (wrong types, ranges,
            missing required fields) or the version is unsupported.
    """
    from fbs.codec.encoder import TableEncoder

    return TableEncoder(version).finish(value)


def encode_manifest(kind: int, version: int, content: bytes) -> bytes:
    """Wrap already-finished ``content`` bytes into a Manifest flatbuffer.

    Raises:
        InvalidValue: if ``kind``/``version`` do not fit their int64/int32 fields.
    """
    from fbs.codec.encoder import TableEncoder

    return TableEncoder(DEFAULT_BLOCK_VERSION, len(content) + 64).finish(
        Manifest(kind=kind, version=version, content=content)
    )


def encode_block(block: MetadataBlock, version: int = DEFAULT_BLOCK_VERSION) -> bytes:
    """The exact bytes kamu stores for ``block`` in block format ``version`` (2 or 3).

    Raises:
        InvalidValue: if the block does not fit the schema or the version is unsupported.
    """
    value: object = block  # callers may pass anything at runtime
    if not isinstance(value, MetadataBlock):
        raise InvalidValue(f"expected a MetadataBlock, got {type(block).__name__}")
    from fbs.codec.encoder import TableEncoder

    inner = TableEncoder(version).finish(block)
    return encode_manifest(MANIFEST_KIND_BLOCK, version, inner)


def block_hash(data: bytes | bytearray | memoryview) -> Multihash:
    """Block hash: SHA3-256 multihash of the stored manifest bytes."""
    return Multihash.sha3_256(data)


def decode_table(
    cls: type[_T], data: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS
) -> _T:
    """Decode a standalone flatbuffer whose root table is ``cls``.

    Raises:
        MalformedBlock: for any invalid input (`BlockLimitExceeded` for limit hits).
    """
    value: _T = decode_root(data, schema_of(cls), limits)
    return value


def decode_manifest(
    data: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS
) -> Manifest:
    """Decode the Manifest envelope only (no check of kind/version, content not parsed).

    Raises:
        MalformedBlock: for any invalid input.
    """
    return decode_table(Manifest, data, limits)


def decode_block_versioned(
    data: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS
) -> tuple[MetadataBlock, int]:
    """Decode stored block bytes; returns the block and the manifest version (2 or 3).

    Raises:
        UnsupportedVersion: if the manifest kind is not a block or its version is not 2/3.
        MalformedBlock: for any other invalid input.
    """
    manifest = decode_manifest(data, limits)
    if manifest.kind != MANIFEST_KIND_BLOCK:
        raise UnsupportedVersion(f"manifest kind 0x{manifest.kind:x} is not a metadata block")
    if manifest.version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersion(f"unsupported block format version {manifest.version}")
    return decode_table(MetadataBlock, manifest.content, limits), manifest.version


def decode_block(
    data: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS
) -> MetadataBlock:
    """Decode stored block bytes (manifest versions 2 and 3).

    Raises:
        UnsupportedVersion: if the manifest kind is not a block or its version is not 2/3.
        MalformedBlock: for any other invalid input.
    """
    return decode_block_versioned(data, limits)[0]


def is_canonical(
    data: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS
) -> bool:
    """True if ``data`` is exactly what `encode_block` produces for its decoded block.

    kamu v0.264 re-serializes blocks it receives and checks the hash, so a
    non-canonical block (valid but differently laid out) is rejected by it.

    Raises:
        MalformedBlock: if ``data`` does not decode at all.
    """
    block, version = decode_block_versioned(data, limits)
    try:
        return encode_block(block, version) == bytes(data)
    except FbsError as e:  # a decoded value always re-encodes; keep the contract typed
        raise MalformedBlock(f"decoded block does not re-encode: {e}") from None
