"""Read DatasetSnapshot manifests as ``odf add`` takes them.

A text holds one or more YAML documents (``---``-separated) or one JSON object; each
document is a DatasetSnapshot in the current form, an older ODF form or an ODF v0.39
Dataset resource (`fbs.manifest.legacy` rewrites those, reporting each rewrite), and its
transform inputs are put in canonical form (`fbs.manifest.refs`). So every spelling of
the same dataset gives the same `DatasetSnapshot`, hence the same blocks.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from fbs.errors import ManifestError, ManifestFieldError
from fbs.manifest.envelope import ManifestKind, manifest_from_plain
from fbs.manifest.legacy import Deprecation, upgrade_snapshot_manifest
from fbs.manifest.limits import DEFAULT_MANIFEST_LIMITS, ManifestLimits
from fbs.manifest.refs import canonicalize_snapshot
from fbs.manifest.yamlio import _to_text, parse_json, parse_yaml_all
from fbs.model import DatasetSnapshot

__all__ = ["LoadedSnapshot", "load_snapshot_documents", "snapshot_from_plain"]


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """One snapshot read from a manifest document.

    Attributes:
        snapshot: the snapshot in the current form, inputs canonical.
        deprecations: the older (or resource) forms rewritten to get it.
        document: the document's index in its stream (0 for the first).
    """

    snapshot: DatasetSnapshot
    deprecations: tuple[Deprecation, ...]
    document: int


def snapshot_from_plain(
    obj: object, *, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS
) -> tuple[DatasetSnapshot, tuple[Deprecation, ...]]:
    """Interpret one parsed document as a snapshot (any known form, see the module).

    Raises:
        ManifestFieldError: not a snapshot, or a bad value (with its path).
        ManifestLimitExceeded: ``obj`` is too deep or too large.
    """
    upgraded, notes = upgrade_snapshot_manifest(obj)
    doc = manifest_from_plain(upgraded, expect=ManifestKind.DATASET_SNAPSHOT, limits=limits)
    assert isinstance(doc.content, DatasetSnapshot)
    return canonicalize_snapshot(doc.content), notes


def load_snapshot_documents(
    data: str | bytes, *, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS
) -> tuple[LoadedSnapshot, ...]:
    """Read every snapshot of a manifest text (YAML stream or one JSON object).

    Raises:
        ManifestError: bad syntax, or a document that is not a valid snapshot; the
            message names the document (``document 2: content.name: …``) when the text
            holds several, and the field.
        ManifestLimitExceeded: a limit was exceeded.
    """
    text = _to_text(data, limits)
    docs: list[object] | None = None
    if text.lstrip(" \t\r\n\ufeff").startswith("{"):
        try:  # PyYAML is not a full JSON parser; see `parse_text`
            docs = [parse_json(text, limits)]
        except ManifestError:
            docs = None
    if docs is None:
        docs = parse_yaml_all(text, limits)
    if not docs:
        raise ManifestError("no manifest in the text (it is empty)")
    loaded = []
    for i, obj in enumerate(docs):
        try:
            snapshot, notes = snapshot_from_plain(obj, limits=limits)
        except ManifestFieldError as e:
            if len(docs) == 1:
                raise
            where = f"document {i + 1}" + (f": {e.path}" if e.path else "")
            raise ManifestFieldError(where, e.reason) from None
        loaded.append(LoadedSnapshot(snapshot, notes, i))
    return tuple(loaded)
