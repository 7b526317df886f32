"""Bounds applied to untrusted YAML / JSON manifests.

A manifest is small (a snapshot or a block, typically a few KiB). The limits are
generous for real documents but stop hostile ones early: huge inputs, deep nesting
(Python parsers recurse), and YAML alias "bombs" whose expanded tree is exponential
in the document size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_MANIFEST_LIMITS",
    "MAX_INT_DIGITS",
    "MAX_MANIFEST_BYTES",
    "MAX_MANIFEST_DEPTH",
    "MAX_MANIFEST_NODES",
    "ManifestLimits",
]

#: Largest manifest text accepted (bytes after UTF-8 encoding).
MAX_MANIFEST_BYTES: Final = 16 * 1024 * 1024
#: Deepest nesting of mappings/sequences (root = 1). Nested DataTypes are the deepest
#: legitimate case; 64 matches the flatbuffers decode limit.
MAX_MANIFEST_DEPTH: Final = 64
#: Most mapping/sequence/scalar nodes in the *expanded* document (aliases counted at
#: every use), which bounds the work of converting it.
MAX_MANIFEST_NODES: Final = 1_000_000
#: Longest integer literal (digits) the YAML loader converts; u64 needs 20.
MAX_INT_DIGITS: Final = 64


@dataclass(frozen=True, slots=True)
class ManifestLimits:
    """Bounds for reading one manifest.

    Exceeding any of them raises `fbs.errors.ManifestLimitExceeded`.
    """

    max_bytes: int = MAX_MANIFEST_BYTES
    max_depth: int = MAX_MANIFEST_DEPTH
    max_nodes: int = MAX_MANIFEST_NODES


DEFAULT_MANIFEST_LIMITS: Final = ManifestLimits()
