"""A dataset's remote aliases: kamu's ``info/config`` (``kind: DatasetConfig``, version 1).

kamu remembers where a dataset was pulled from (*pull aliases*) and pushed to (*push
aliases*) in this manifest, next to ``info/alias``::

    kind: DatasetConfig
    version: 1
    content:
      pullAliases:
      - odf+http://node.example:8080/prices
      pushAliases: []

An alias is kamu's remote dataset reference: a URL, a ``did:odf:...`` or
``repo/[account/]name``. kamu refuses unknown keys here (its serde struct has
``deny_unknown_fields``), so this module reads and writes exactly these two lists: a
file written here stays readable by kamu, and a kamu workspace's file is read as kamu
wrote it. Pure: bytes in, text out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from fbs.errors import ManifestError, ManifestFieldError
from fbs.manifest.yamlio import dump_yaml, parse_text

__all__ = [
    "DATASET_CONFIG_KIND",
    "DATASET_CONFIG_VERSION",
    "MAX_REMOTE_ALIASES",
    "DatasetConfig",
    "dump_dataset_config",
    "parse_dataset_config",
]

#: The manifest ``kind`` of the file.
DATASET_CONFIG_KIND: Final = "DatasetConfig"
#: The only version kamu writes and reads.
DATASET_CONFIG_VERSION: Final = 1
#: Most aliases of one kind a config may hold (a real one holds one or two).
MAX_REMOTE_ALIASES: Final = 64
#: Longest alias accepted (URLs of a dataset are short; this bounds a hostile file).
MAX_REMOTE_ALIAS_LEN: Final = 2048

_CONTENT_KEYS: Final = ("pullAliases", "pushAliases")


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    """The remote aliases of one dataset, in the order they were added."""

    pull_aliases: tuple[str, ...] = ()
    push_aliases: tuple[str, ...] = ()

    def with_pull_alias(self, remote: str) -> DatasetConfig:
        """This config with ``remote`` as a pull alias (unchanged if it is one already)."""
        if remote in self.pull_aliases:
            return self
        return DatasetConfig((*self.pull_aliases, remote), self.push_aliases)

    def with_push_alias(self, remote: str) -> DatasetConfig:
        """This config with ``remote`` as a push alias (unchanged if it is one already)."""
        if remote in self.push_aliases:
            return self
        return DatasetConfig(self.pull_aliases, (*self.push_aliases, remote))


def parse_dataset_config(data: bytes | str) -> DatasetConfig:
    """Read an ``info/config`` manifest.

    Raises:
        ManifestError: not YAML, not a version-1 ``DatasetConfig``, an unknown key, or
            an alias that is not a non-empty single-line string within the limits.
    """
    doc = parse_text(data)
    if not isinstance(doc, dict) or set(doc) != {"kind", "version", "content"}:
        raise ManifestFieldError("", "a DatasetConfig must be a mapping of kind, version, content")
    if doc["kind"] != DATASET_CONFIG_KIND:
        raise ManifestFieldError("kind", f"expected {DATASET_CONFIG_KIND}, got {doc['kind']!r}")
    if doc["version"] != DATASET_CONFIG_VERSION or isinstance(doc["version"], bool):
        raise ManifestFieldError("version", f"unsupported version {doc['version']!r}")
    content = doc["content"]
    if not isinstance(content, dict):
        raise ManifestFieldError("content", "expected a mapping")
    for key in content:
        if key not in _CONTENT_KEYS:
            raise ManifestFieldError(f"content.{key}", "unknown key")
    missing = [key for key in _CONTENT_KEYS if key not in content]
    if missing:
        raise ManifestFieldError(f"content.{missing[0]}", "missing")
    return DatasetConfig(
        _aliases(content["pullAliases"], "content.pullAliases"),
        _aliases(content["pushAliases"], "content.pushAliases"),
    )


def _aliases(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ManifestFieldError(path, "expected a list")
    if len(value) > MAX_REMOTE_ALIASES:
        raise ManifestFieldError(path, f"more than {MAX_REMOTE_ALIASES} aliases")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _usable(item):
            raise ManifestFieldError(f"{path}[{i}]", f"not a remote reference: {item!r}")
    return tuple(value)


def _usable(alias: str) -> bool:
    return 0 < len(alias) <= MAX_REMOTE_ALIAS_LEN and alias == alias.strip() and alias.isprintable()


def dump_dataset_config(config: DatasetConfig) -> str:
    """Render ``config`` as kamu writes it (both lists always present).

    Raises:
        ManifestError: an alias that `parse_dataset_config` would refuse.
    """
    for alias in (*config.pull_aliases, *config.push_aliases):
        if not _usable(alias):
            raise ManifestError(f"not a remote reference: {alias!r}")
    return dump_yaml(
        {
            "kind": DATASET_CONFIG_KIND,
            "version": DATASET_CONFIG_VERSION,
            "content": {
                "pullAliases": list(config.pull_aliases),
                "pushAliases": list(config.push_aliases),
            },
        }
    )
