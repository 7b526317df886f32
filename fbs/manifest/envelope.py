"""The manifest envelope: ``kind`` / ``version`` / ``content`` documents (RFC-013).

Supported kinds and versions:

- ``MetadataBlock``: content is a `MetadataBlock`. kamu v0.264 writes ``version: 2``
  and kamu >= v0.265 ``version: 3`` (the number of its binary block layout); both are
  read, the version is reported (`ManifestDoc.version`) so a block encoder can default
  to it, and 2 is written unless asked otherwise.
- ``DatasetSnapshot`` version 1: content is a `DatasetSnapshot` (``name``, ``kind``,
  ``metadata`` list of tagged events).
- ``MetadataEvent`` version 1: content is one tagged event.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from fbs.errors import ManifestError, ManifestFieldError
from fbs.manifest.limits import DEFAULT_MANIFEST_LIMITS, ManifestLimits
from fbs.manifest.plain import check_plain, from_plain_desc, to_plain
from fbs.manifest.yamlio import dump_yaml, parse_text
from fbs.model.events import METADATA_EVENT, DatasetSnapshot, MetadataBlock, MetadataEvent
from fbs.model.schema import TableDesc, UnionDesc, schema_of

__all__ = [
    "BLOCK_YAML_VERSIONS",
    "DEFAULT_BLOCK_YAML_VERSION",
    "EVENT_VERSION",
    "SNAPSHOT_VERSION",
    "LoadedBlock",
    "ManifestDoc",
    "ManifestKind",
    "dump_block_yaml",
    "dump_manifest",
    "dump_snapshot_yaml",
    "dumps_json",
    "load_block_yaml",
    "load_event_yaml",
    "load_manifest",
    "load_snapshot_yaml",
    "manifest_from_plain",
    "manifest_to_plain",
]

#: MetadataBlock manifest versions read (kamu v0.264 writes 2, >= v0.265 writes 3).
BLOCK_YAML_VERSIONS: Final = (2, 3)
#: Version written for blocks unless told otherwise (readable by both kamu lines).
DEFAULT_BLOCK_YAML_VERSION: Final = 2
#: The only DatasetSnapshot manifest version.
SNAPSHOT_VERSION: Final = 1
#: The only MetadataEvent manifest version.
EVENT_VERSION: Final = 1

_ENVELOPE_KEYS: Final = ("kind", "version", "content")


class ManifestKind(enum.StrEnum):
    """Resource name in the ``kind`` key of a manifest."""

    METADATA_BLOCK = "MetadataBlock"
    DATASET_SNAPSHOT = "DatasetSnapshot"
    METADATA_EVENT = "MetadataEvent"


_VERSIONS: Final[dict[ManifestKind, tuple[int, ...]]] = {
    ManifestKind.METADATA_BLOCK: BLOCK_YAML_VERSIONS,
    ManifestKind.DATASET_SNAPSHOT: (SNAPSHOT_VERSION,),
    ManifestKind.METADATA_EVENT: (EVENT_VERSION,),
}
_DEFAULT_VERSION: Final[dict[ManifestKind, int]] = {
    ManifestKind.METADATA_BLOCK: DEFAULT_BLOCK_YAML_VERSION,
    ManifestKind.DATASET_SNAPSHOT: SNAPSHOT_VERSION,
    ManifestKind.METADATA_EVENT: EVENT_VERSION,
}


def _content_desc(kind: ManifestKind) -> TableDesc | UnionDesc:
    if kind is ManifestKind.METADATA_BLOCK:
        return schema_of(MetadataBlock)
    if kind is ManifestKind.DATASET_SNAPSHOT:
        return schema_of(DatasetSnapshot)
    return METADATA_EVENT


@dataclass(frozen=True, slots=True)
class ManifestDoc:
    """A parsed manifest.

    Attributes:
        kind: the resource kind.
        version: the manifest version as written (blocks: 2 or 3).
        content: `MetadataBlock`, `DatasetSnapshot` or a `MetadataEvent` variant.
    """

    kind: ManifestKind
    version: int
    content: MetadataBlock | DatasetSnapshot | MetadataEvent


@dataclass(frozen=True, slots=True)
class LoadedBlock:
    """A block read from a ``MetadataBlock`` manifest and the manifest's version."""

    block: MetadataBlock
    version: int


# -- reading ----------------------------------------------------------------------------


def manifest_from_plain(
    obj: object,
    *,
    expect: ManifestKind | None = None,
    limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS,
) -> ManifestDoc:
    """Interpret parsed YAML / JSON data as a manifest.

    Args:
        obj: plain data (mapping with ``kind``, ``version``, ``content``).
        expect: if given, the kind the caller requires.
        limits: depth / node bounds.

    Raises:
        ManifestFieldError: bad envelope (unknown key, unsupported kind or version,
            unexpected kind) or bad content (with its path under ``content``).
        ManifestLimitExceeded: ``obj`` is too deep or too large.
    """
    check_plain(obj, limits)
    if not isinstance(obj, Mapping):
        raise ManifestFieldError("", "a manifest must be a mapping with kind, version, content")
    for key in obj:
        if key not in _ENVELOPE_KEYS:
            raise ManifestFieldError(
                str(key), "unknown manifest key (expected kind, version, content)"
            )
    for key in _ENVELOPE_KEYS:
        if obj.get(key) is None:
            raise ManifestFieldError("", f"manifest is missing {key!r}")
    raw_kind = obj["kind"]
    try:
        kind = ManifestKind(raw_kind) if isinstance(raw_kind, str) else None
    except ValueError:
        kind = None
    if kind is None:
        kinds = ", ".join(k.value for k in ManifestKind)
        raise ManifestFieldError("kind", f"unsupported manifest kind {raw_kind!r} ({kinds})")
    if expect is not None and kind is not expect:
        raise ManifestFieldError("kind", f"expected a {expect.value} manifest, got {kind.value}")
    version = obj["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ManifestFieldError("version", f"expected an integer, got {version!r}")
    supported = _VERSIONS[kind]
    if version not in supported:
        raise ManifestFieldError(
            "version",
            f"unsupported {kind.value} manifest version {version} "
            f"(supported: {', '.join(map(str, supported))})",
        )
    content = from_plain_desc(_content_desc(kind), obj["content"], "content")
    return ManifestDoc(kind, int(version), content)


def load_manifest(
    data: str | bytes,
    *,
    expect: ManifestKind | None = None,
    limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS,
) -> ManifestDoc:
    """Parse a YAML (or JSON) manifest.

    Args:
        data: manifest text; bytes must be UTF-8 (a BOM is allowed).
        expect: if given, the kind the caller requires.
        limits: size / depth / node bounds for untrusted input.

    Raises:
        ManifestError: any problem at all (syntax, envelope, content); subclasses
            `ManifestFieldError` (with a path) and `ManifestLimitExceeded`.
    """
    return manifest_from_plain(parse_text(data, limits), expect=expect, limits=limits)


def load_block_yaml(
    data: str | bytes, *, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS
) -> LoadedBlock:
    """Parse a ``MetadataBlock`` manifest (version 2 or 3).

    Raises:
        ManifestError: see `load_manifest`; also for any other kind.
    """
    doc = load_manifest(data, expect=ManifestKind.METADATA_BLOCK, limits=limits)
    assert isinstance(doc.content, MetadataBlock)
    return LoadedBlock(doc.content, doc.version)


def load_snapshot_yaml(
    data: str | bytes, *, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS
) -> DatasetSnapshot:
    """Parse a ``DatasetSnapshot`` manifest (version 1).

    Raises:
        ManifestError: see `load_manifest`; also for any other kind.
    """
    doc = load_manifest(data, expect=ManifestKind.DATASET_SNAPSHOT, limits=limits)
    assert isinstance(doc.content, DatasetSnapshot)
    return doc.content


def load_event_yaml(
    data: str | bytes, *, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS
) -> MetadataEvent:
    """Parse a ``MetadataEvent`` manifest (version 1).

    Raises:
        ManifestError: see `load_manifest`; also for any other kind.
    """
    doc = load_manifest(data, expect=ManifestKind.METADATA_EVENT, limits=limits)
    return doc.content  # type: ignore[return-value]


# -- writing ----------------------------------------------------------------------------


def _kind_of(value: object) -> ManifestKind:
    if isinstance(value, MetadataBlock):
        return ManifestKind.METADATA_BLOCK
    if isinstance(value, DatasetSnapshot):
        return ManifestKind.DATASET_SNAPSHOT
    if type(value) in METADATA_EVENT.by_cls:
        return ManifestKind.METADATA_EVENT
    raise ManifestError(
        f"cannot write a {type(value).__name__} as a manifest "
        "(expected MetadataBlock, DatasetSnapshot or a MetadataEvent)"
    )


def manifest_to_plain(
    value: MetadataBlock | DatasetSnapshot | MetadataEvent | ManifestDoc,
    *,
    version: int | None = None,
) -> dict[str, Any]:
    """Wrap a value in its manifest envelope as plain data.

    Args:
        value: a block, a snapshot, an event, or a `ManifestDoc` (its version is used
            unless ``version`` is given).
        version: manifest version; defaults to 2 for blocks, 1 otherwise.

    Raises:
        ManifestError: unsupported value type or version.
        InvalidValue: ``value`` is not a valid model value.
    """
    if isinstance(value, ManifestDoc):
        if version is None:
            version = value.version
        content: object = value.content
    else:
        content = value
    kind = _kind_of(content)
    if version is None:
        version = _DEFAULT_VERSION[kind]
    if isinstance(version, bool) or version not in _VERSIONS[kind]:
        raise ManifestError(f"unsupported {kind.value} manifest version {version!r}")
    union = METADATA_EVENT if kind is ManifestKind.METADATA_EVENT else None
    return {"kind": kind.value, "version": version, "content": to_plain(content, union=union)}


def dump_manifest(
    value: MetadataBlock | DatasetSnapshot | MetadataEvent | ManifestDoc,
    *,
    version: int | None = None,
) -> str:
    """Render a manifest as kamu-style YAML.

    Raises:
        ManifestError: unsupported value type or version.
        InvalidValue: ``value`` is not a valid model value.
    """
    return dump_yaml(manifest_to_plain(value, version=version))


def dumps_json(
    value: MetadataBlock | DatasetSnapshot | MetadataEvent | ManifestDoc,
    *,
    version: int | None = None,
    indent: int | None = None,
) -> str:
    """Render a manifest as JSON (keys in schema order; compact unless ``indent``).

    Raises:
        ManifestError: unsupported value type or version.
        InvalidValue: ``value`` is not a valid model value.
    """
    plain = manifest_to_plain(value, version=version)
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(plain, ensure_ascii=False, indent=indent, separators=separators)


def dump_block_yaml(block: MetadataBlock, *, version: int = DEFAULT_BLOCK_YAML_VERSION) -> str:
    """Render a block as a ``MetadataBlock`` manifest (version 2 by default).

    Raises:
        ManifestError: ``version`` is not 2 or 3.
        InvalidValue: ``block`` is not a valid model value.
    """
    if not isinstance(block, MetadataBlock):
        raise ManifestError(f"expected a MetadataBlock, got {type(block).__name__}")
    return dump_manifest(block, version=version)


def dump_snapshot_yaml(snapshot: DatasetSnapshot) -> str:
    """Render a ``DatasetSnapshot`` manifest (version 1).

    Raises:
        InvalidValue: ``snapshot`` is not a valid model value.
    """
    if not isinstance(snapshot, DatasetSnapshot):
        raise ManifestError(f"expected a DatasetSnapshot, got {type(snapshot).__name__}")
    return dump_manifest(snapshot)
