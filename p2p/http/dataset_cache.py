"""The HTTP server's cache of dataset references: path text -> dataset directory.

Every transfer request names its dataset in the path (an alias or a DID), and resolving
one reads the workspace's alias index and the dataset's ``info/alias``: about a
millisecond a request on a busy disk, paid again by every object download of a pull.
A resolved reference is kept here and each later use is confirmed by one ``lstat`` of
the dataset's ``info/alias`` (or, for a dataset without one, of its directory): a
rename, a ``--replace``, a delete or a re-install writes a new file or directory (a new
inode) or removes it, so a stale entry is never used, it is resolved again.

Only references that resolved are kept (a miss is not), the cache is bounded
(`MAX_RESOLVE_CACHE_ENTRIES`, least recently used first out) and a server keeps one
(`p2p.http.server.TransferServer.datasets`), touched from the event loop only.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from fbs.did import DatasetId
from storage.catalog import DatasetEntry
from storage.layout import DatasetLayout
from storage.workspace import Workspace

__all__ = ["MAX_RESOLVE_CACHE_ENTRIES", "ResolveCache", "Resolved"]

#: Most references a server keeps resolved (each a few hundred bytes).
MAX_RESOLVE_CACHE_ENTRIES: Final = 1024

_Stamp = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns


@dataclass(frozen=True, slots=True)
class Resolved:
    """A resolved reference: the dataset and its directory layout."""

    entry: DatasetEntry
    layout: DatasetLayout


@dataclass(frozen=True, slots=True)
class _Kept:
    resolved: Resolved
    witness: str
    stamp: _Stamp


def _stamp_of(path: str) -> _Stamp | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _witness(layout: DatasetLayout) -> str:
    """The file whose stamp confirms a resolution: ``info/alias``, else the directory."""
    alias = os.fspath(layout.alias_path)
    return alias if os.path.lexists(alias) else os.fspath(layout.root)


class ResolveCache:
    """Bounded map from a request's dataset reference to its resolution (module docstring)."""

    def __init__(self, max_entries: int = MAX_RESOLVE_CACHE_ENTRIES) -> None:
        self.max_entries = max_entries
        self._kept: OrderedDict[tuple[str, str | DatasetId], _Kept] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def resolve(self, ws: Workspace, ref: str | DatasetId) -> Resolved:
        """The dataset ``ref`` names in ``ws``.

        Raises:
            DatasetNotFound / InvalidAlias / InvalidDid: see `Workspace.resolve`.
        """
        key = (os.fspath(ws.root), ref)
        kept = self._kept.get(key)
        if kept is not None and _stamp_of(kept.witness) == kept.stamp:
            self._kept.move_to_end(key)
            return kept.resolved
        self._kept.pop(key, None)
        entry = ws.resolve(ref)
        layout = DatasetLayout(entry.path, ops=ws.ops)
        resolved = Resolved(entry, layout)
        witness = _witness(layout)
        stamp = _stamp_of(witness)
        # Kept only if the reference still resolves the same after the stamp was taken:
        # a change before the stamp shows here, one after it changes the stamp.
        if stamp is not None and ws.resolve(ref) == entry:
            self._kept[key] = _Kept(resolved, witness, stamp)
            while len(self._kept) > self.max_entries:
                self._kept.popitem(last=False)
        return resolved
