"""The head watcher of the node daemon (`node.daemon.service`): heads to sign and to announce.

Every ``head_poll_interval_s`` the daemon's watcher round calls `HeadWatcher.scan`, which
reads ``refs/head`` of every dataset (one small file each). A new head of a dataset this
node *owns* (its key is in the workspace key store) is signed (`p2p.head_record.sign_head`),
stored as the high-water mark (`p2p.head_store.HeadStore.accept`) and returned for
gossip; a new head of a replica is returned with the owner's record when the node holds
it (a push or a pull brought it), and noted in `HeadWatcher.changed` (a replica moved).
A full scan returns every held head (re-announcements for late joiners). The watcher also
answers the exchange server (`HeadWatcher.record_json`) and the gossip validator
(`HeadWatcher.is_fresh`), and counts what it announced. With content routing on
(``routing``, `node.daemon.routing.ContentRouting`), every announced record is also
published in the DHT: this node provides the dataset and stores the signed record (once
per record; signed here, pulled or pushed, it makes one more provider).
"""

from __future__ import annotations

import contextlib
import logging
import os

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, OdfError
from fbs.multiformats import Multihash
from node.daemon.log import dataset_fields, event
from node.daemon.routing import ContentRouting
from p2p.errors import Equivocation, P2PError, StaleHead
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore
from p2p.libp2p.gossip import HeadGossip
from storage.dataset import Dataset
from storage.errors import StorageError
from storage.layout import DatasetLayout
from storage.workspace import Workspace

__all__ = ["HeadWatcher"]


def _chain_has(ds: Dataset, h: Multihash, seq: int) -> bool:
    """Whether ``ds``'s chain contains block ``h`` of sequence number ``seq`` (walks back)."""
    for bh, _raw, block in ds.iter_blocks():
        if bh == h:
            return True
        if block.sequence_number <= seq:
            return False
    return False


class HeadWatcher:
    """Signs and announces the heads of ``ws`` (see the module docstring).

    Args:
        ws / head_store: the daemon's.

    ``gossip`` (where records are announced) is set by the daemon after construction:
    the gossip needs `is_fresh` first; so is ``routing`` (``None``: no DHT).
    """

    def __init__(self, ws: Workspace, head_store: HeadStore) -> None:
        self.ws = ws
        self.head_store = head_store
        self.gossip: HeadGossip | None = None
        self.routing: ContentRouting | None = None
        #: The last head seen per dataset.
        self.seen: dict[DatasetId, Multihash] = {}
        #: Replicas whose head moved since the last round (push, ``odf pull``).
        self.changed: list[DatasetId] = []
        #: Records gossiped so far.
        self.announced = 0

    def take_changed(self) -> list[DatasetId]:
        """The replicas that moved since the last call."""
        changed, self.changed = self.changed, []
        return changed

    def mark_seen(self, did: DatasetId) -> None:
        """Note ``did``'s current head as seen (after a pull: not a replica move)."""
        with contextlib.suppress(StorageError, OSError):
            layout = DatasetLayout(self.ws.datasets_dir / did.as_multibase())
            head = layout.refs.get_or_none("head")
            if head is not None:
                self.seen[did] = head

    def record_json(self, did: DatasetId) -> bytes | None:
        # Exchange server provider (runs in the trio thread): the held record, if any.
        try:
            rec = self.head_store.get(did)
        except P2PError:
            return None
        return rec.to_json() if rec is not None else None

    def is_fresh(self, record: HeadRecord) -> bool:
        # Gossip validator (trio thread): forward only records above the held one, or
        # conflicting ones (equivocation evidence must travel).
        try:
            held = self.head_store.get(record.dataset_id)
        except P2PError:
            return False
        if held is None:
            return True
        if record.sequence_number > held.sequence_number:
            return True
        return record.sequence_number == held.sequence_number and record.head != held.head

    def record_for_head(self, did: DatasetId, head: Multihash) -> HeadRecord | None:
        """The record to announce for ``did`` at ``head``; signs it if this node owns it."""
        held = self.head_store.get(did)
        if held is not None and held.head == head:
            return held
        if not self.ws.keys.has(did):
            return None
        ds = self.ws.get(did)
        state = ds.state()
        if state is None:
            return None
        key = self.ws.keys.load(did)
        name = _publishable_name(self.ws, did)
        record = sign_head(key, state.head, state.sequence_number, state.system_time, name)

        def is_descendant(old: Multihash, _new: Multihash) -> bool:
            seq = held.sequence_number if held is not None else 0
            return _chain_has(ds, old, seq)

        try:
            self.head_store.accept(record, expected_dataset_id=did, is_descendant=is_descendant)
        except StaleHead:
            # Signed meanwhile by the HTTP API (refs/head.sig) for the same head.
            held = self.head_store.get(did)
            return held if held is not None and held.head == state.head else None
        event(
            logging.INFO,
            "signed head",
            **dataset_fields(self.ws, did),
            head=str(state.head),
            seq=state.sequence_number,
        )
        return record

    def scan(self, everything: bool) -> list[HeadRecord]:
        """Records to announce: new heads (or every held head if ``everything``)."""
        out: list[HeadRecord] = []
        try:
            names = sorted(os.listdir(self.ws.datasets_dir))
        except FileNotFoundError:
            return out
        for name in names:
            try:
                did = DatasetId.from_multibase(name)
                head = DatasetLayout(self.ws.datasets_dir / name).refs.get_or_none("head")
            except (FbsError, StorageError, OSError):
                continue
            if head is None or (not everything and self.seen.get(did) == head):
                continue
            try:
                record = self.record_for_head(did, head)
            except Equivocation as e:
                event(logging.ERROR, "refusing to sign a conflicting head", error=str(e))
                record = None
            except (OdfError, OSError) as e:
                event(
                    logging.WARNING,
                    "cannot sign head",
                    **dataset_fields(self.ws, did),
                    error=str(e),
                )
                continue
            if did in self.seen and not self.ws.keys.has(did):
                self.changed.append(did)  # a replica moved (push, `odf pull`)
            self.seen[did] = head
            if record is not None:
                out.append(record)
        return out

    async def announce(self, record: HeadRecord) -> None:
        """Gossip ``record`` and publish it in the DHT (errors are logged, never raised)."""
        assert self.gossip is not None
        if self.routing is not None:
            self.routing.publish(record)
        try:
            await self.gossip.announce(record)
        except (P2PError, OdfError) as e:
            event(logging.WARNING, "announce failed", error=str(e))
            return
        self.announced += 1
        event(
            logging.DEBUG,
            "announced",
            **dataset_fields(self.ws, record.dataset_id),
            seq=record.sequence_number,
        )


def _publishable_name(ws: Workspace, did: DatasetId) -> str | None:
    """The local alias of ``did`` if it can travel in a head record."""
    try:
        alias = ws.resolve(did).alias
        DatasetAlias.parse(alias)
    except (OdfError, OSError):
        return None  # an alias older rules allowed: the record goes out without a name
    return alias
