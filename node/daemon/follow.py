"""The daemon's follow list (`node.daemon.service`): which announced datasets it replicates.

Entries are dataset DIDs (``did:odf:…``), aliases of held datasets, or ``all``. Those of
the configuration come first; follows added at run time (`FollowList.follow`, HTTP
``POST /api/follow``, inputs of a followed derivative on a validator) persist in
``.odf/p2p/follow.json`` and are read back on start (`FollowList.load`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from node.daemon.log import event
from node.errors import UsageError
from node.runfile import MAX_RUN_FILE_BYTES
from storage.errors import DatasetNotFound, StorageError
from storage.fsutil import atomic_write_bytes, ensure_dir, read_bytes_limited
from storage.workspace import Workspace

__all__ = ["FOLLOW_FILE", "MAX_FOLLOWS", "FollowList"]

#: Follows added at run time, relative to the workspace root.
FOLLOW_FILE: Final = "p2p/follow.json"
#: Most follow entries.
MAX_FOLLOWS: Final = 10_000


class FollowList:
    """Followed datasets of a node serving ``ws``.

    Args:
        ws: the workspace (aliases resolve against it; ``follow.json`` lives in it).
        configured: the entries of the configuration (not written to ``follow.json``).
        on_follow: called after every `follow` and every `unfollow` that removed an
            entry (the daemon wakes its head watcher, which joins and leaves shards).
    """

    def __init__(
        self, ws: Workspace, configured: Sequence[str], on_follow: Callable[[], None]
    ) -> None:
        self.ws = ws
        self._configured = tuple(configured)
        self._entries: list[str] = list(configured)
        self._on_follow = on_follow

    def load(self) -> None:
        """Add the entries of ``follow.json`` (a missing or unreadable file adds none)."""
        try:
            data = read_bytes_limited(self.ws.root / FOLLOW_FILE, MAX_RUN_FILE_BYTES)
        except (FileNotFoundError, StorageError):
            return
        try:
            items = json.loads(data or b"[]")
        except ValueError:
            event(logging.WARNING, "ignoring unreadable follow file")
            return
        if isinstance(items, list):
            for item in items[:MAX_FOLLOWS]:
                if isinstance(item, str) and item and item not in self._entries:
                    self._entries.append(item)

    def _save(self) -> None:
        ensure_dir((self.ws.root / FOLLOW_FILE).parent)
        extra = [f for f in self._entries if f not in self._configured]
        atomic_write_bytes(self.ws.root / FOLLOW_FILE, json.dumps(extra).encode())

    @property
    def entries(self) -> list[str]:
        """Followed datasets (aliases, DIDs, or ``all``), a copy."""
        return list(self._entries)

    @property
    def all(self) -> bool:
        """Whether every announced dataset is replicated."""
        return "all" in self._entries

    def __contains__(self, entry: object) -> bool:
        return entry in self._entries

    def follow(self, ref: str) -> str:
        """Follow a dataset (alias, DID, or ``all``); persists. Returns the entry stored.

        Raises:
            DatasetNotFound: an alias no dataset here has.
            UsageError: not ``all``, a DID, or a valid alias; too many follows.
        """
        entry = ref.strip()
        if entry != "all":
            if entry.startswith("did:"):
                try:
                    entry = DatasetId.from_did(entry).to_did_odf()
                except FbsError as e:
                    raise UsageError(f"invalid dataset id {ref!r}: {e}") from None
            else:
                try:
                    entry = self.ws.resolve(entry).id.to_did_odf()
                except DatasetNotFound:
                    raise DatasetNotFound(
                        f"cannot follow {ref!r}: no such dataset here "
                        "(follow a dataset not held yet by its DID)"
                    ) from None
                except (StorageError, FbsError) as e:
                    raise UsageError(
                        f"cannot follow {ref!r}: {e} (follow a dataset not held yet by its DID)"
                    ) from None
        if entry not in self._entries:
            if len(self._entries) >= MAX_FOLLOWS:
                raise UsageError(f"at most {MAX_FOLLOWS} follows")
            self._entries.append(entry)
            self._save()
            alias = None if entry == "all" or ref.strip().startswith("did:") else ref.strip()
            event(logging.INFO, "following", dataset=entry, alias=alias)
        self._on_follow()
        return entry

    def unfollow(self, ref: str) -> bool:
        """Stop following ``ref`` (as stored by `follow`); whether it was followed."""
        entry = ref.strip()
        if entry.startswith("did:"):
            with contextlib.suppress(FbsError):
                entry = DatasetId.from_did(entry).to_did_odf()
        if entry not in self._entries:
            return False
        self._entries.remove(entry)
        self._save()
        self._on_follow()
        return True

    def ids(self) -> set[DatasetId]:
        """The followed datasets that resolve (``all`` and unknown aliases left out)."""
        out: set[DatasetId] = set()
        for entry in self._entries:
            if entry == "all":
                continue
            try:
                out.add(
                    DatasetId.from_did(entry)
                    if entry.startswith("did:")
                    else self.ws.resolve(entry).id
                )
            except (DatasetNotFound, StorageError, FbsError):
                continue
        return out

    def is_followed(self, did: DatasetId) -> bool:
        """Whether announced heads of ``did`` are replicated."""
        return self.all or did in self.ids()
