"""YAML / JSON manifests (RFC-013) for ODF metadata: blocks, snapshots, events.

Layers:

- `fbs.manifest.plain`: model values <-> plain JSON-compatible data (`to_plain`,
  `from_plain`), generic over the `fbs.model` reflection API;
- `fbs.manifest.yamlio`: safe YAML/JSON parsing (YAML 1.2 core scalars, limits) and
  kamu-style YAML emission;
- `fbs.manifest.envelope`: the ``kind`` / ``version`` / ``content`` envelope
  (`load_manifest`, `dump_manifest`, `dumps_json` and per-kind helpers);
- `fbs.manifest.limits`: named bounds for untrusted manifests;
- `fbs.manifest.legacy`: older ODF snapshot forms and v0.39 Dataset resources rewritten
  to the current form, each rewrite reported;
- `fbs.manifest.refs`: transform input references in kamu's canonical form;
- `fbs.manifest.snapshots`: every snapshot of a (multi-document) text, as ``odf add``
  reads them;
- `fbs.manifest.validate`: complete validation of a snapshot before it is stored.

Every failure on input is a `fbs.errors.ManifestError` (`ManifestFieldError` carries
the path of the bad value, `ManifestLimitExceeded` a hit limit).
"""

from __future__ import annotations

from fbs.manifest.envelope import (
    BLOCK_YAML_VERSIONS,
    DEFAULT_BLOCK_YAML_VERSION,
    EVENT_VERSION,
    SNAPSHOT_VERSION,
    LoadedBlock,
    ManifestDoc,
    ManifestKind,
    dump_block_yaml,
    dump_manifest,
    dump_snapshot_yaml,
    dumps_json,
    load_block_yaml,
    load_event_yaml,
    load_manifest,
    load_snapshot_yaml,
    manifest_from_plain,
    manifest_to_plain,
)
from fbs.manifest.limits import (
    DEFAULT_MANIFEST_LIMITS,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_DEPTH,
    MAX_MANIFEST_NODES,
    ManifestLimits,
)
from fbs.manifest.plain import check_plain, from_plain, to_plain
from fbs.manifest.yamlio import dump_yaml, parse_json, parse_text, parse_yaml

__all__ = [
    "BLOCK_YAML_VERSIONS",
    "DEFAULT_BLOCK_YAML_VERSION",
    "DEFAULT_MANIFEST_LIMITS",
    "EVENT_VERSION",
    "MAX_MANIFEST_BYTES",
    "MAX_MANIFEST_DEPTH",
    "MAX_MANIFEST_NODES",
    "SNAPSHOT_VERSION",
    "LoadedBlock",
    "ManifestDoc",
    "ManifestKind",
    "ManifestLimits",
    "check_plain",
    "dump_block_yaml",
    "dump_manifest",
    "dump_snapshot_yaml",
    "dump_yaml",
    "dumps_json",
    "from_plain",
    "load_block_yaml",
    "load_event_yaml",
    "load_manifest",
    "load_snapshot_yaml",
    "manifest_from_plain",
    "manifest_to_plain",
    "parse_json",
    "parse_text",
    "parse_yaml",
    "to_plain",
]
