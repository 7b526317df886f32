"""One row per dataset, kept while its head stays the same: the list page, the live
updates, the lineage graph and the API's ``/api/datasets`` all read them from one
`RowCache` (blocking: handlers run these in a thread).

A row costs a chain-state read (a walk of the chain when the workspace's state cache is
behind), its head one small file read (``refs/head``). Every read of the cache reads the
heads of the datasets it returns and re-reads only the rows whose head moved (or whose
alias changed), so a head committed by any process invalidates its row at the next read;
a dataset that left the catalog leaves the cache. The signed head a row shows
(`SignedHeads`) moves on its own (a record can arrive before the blocks it names): it is
kept per dataset while its held-record file holds the same bytes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from p2p.errors import P2PError
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord
from p2p.head_store import HeadStore
from storage.catalog import DatasetEntry
from storage.chain import ChainState
from storage.errors import StorageError
from storage.fsutil import read_bytes_limited
from storage.layout import DatasetLayout
from storage.refs import HEAD
from storage.workspace import Workspace

__all__ = [
    "DatasetRow",
    "RowCache",
    "SignedHeads",
    "api_rows",
    "chain_state",
    "dataset_row",
    "heads",
    "input_dids",
]

READ_ERRORS: Final = (StorageError, FbsError, OSError)


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """One line of the dataset list (``error`` set when the chain could not be read)."""

    alias: str
    did: str
    kind: str = ""
    head: str = ""
    blocks: int = 0
    records: int = 0
    size: int = 0
    watermark: _dt.datetime | None = None
    updated: _dt.datetime | None = None
    owned: bool = False
    error: str = ""
    inputs: tuple[str, ...] = ()
    sequence_number: int | None = None


def chain_state(ws: Workspace, entry: DatasetEntry) -> ChainState | None:
    """``entry``'s chain state (``None`` before its Seed)."""
    return ws.get(entry.id, require_head=False).state()


def _input_did(ws: Workspace, ref: str) -> str:
    """A transform input reference as a canonical ``did:odf:`` (as written if unknown)."""
    try:
        if ref.startswith("did:"):
            return DatasetId.from_did(ref).to_did_odf()
        return ws.resolve(ref).id.to_did_odf()
    except (*READ_ERRORS, ValueError):
        return ref


def input_dids(ws: Workspace, state: ChainState) -> tuple[str, ...]:
    """The DIDs of the transform inputs of ``state`` (none for a root)."""
    if state.transform is None:
        return ()
    return tuple(_input_did(ws, i.dataset_ref) for i in state.transform.inputs)


def row_of(ws: Workspace, entry: DatasetEntry, state: ChainState | None) -> DatasetRow:
    """The row of ``entry`` whose chain state is ``state``."""
    did = entry.id.to_did_odf()
    if state is None:
        return DatasetRow(entry.alias, did, owned=ws.keys.has(entry.id))
    watermark = state.last_watermark
    return DatasetRow(
        entry.alias,
        did,
        kind=state.kind.name,
        head=state.head.to_multibase(),
        blocks=state.num_blocks,
        records=state.num_records,
        size=state.data_size,
        watermark=None if watermark is None else watermark.to_datetime(),
        updated=state.system_time.to_datetime(),
        owned=ws.keys.has(entry.id),
        inputs=input_dids(ws, state),
        sequence_number=state.sequence_number,
    )


def dataset_row(ws: Workspace, entry: DatasetEntry) -> DatasetRow:
    """The list line of one dataset, read now."""
    try:
        return row_of(ws, entry, chain_state(ws, entry))
    except READ_ERRORS as e:
        return DatasetRow(entry.alias, entry.id.to_did_odf(), error=str(e).splitlines()[0])


def _head_text(entry: DatasetEntry) -> str | None:
    """``entry``'s head (multibase; ``""`` before its Seed), ``None`` if unreadable.

    Read from the dataset's folder as the catalog found it (one small file), without
    resolving the alias again.
    """
    try:
        head = DatasetLayout(entry.path).refs.get_or_none(HEAD)
    except READ_ERRORS:
        return None
    return "" if head is None else head.to_multibase()


class RowCache:
    """Rows kept per dataset while its head and alias stay the same (module docstring)."""

    def __init__(self) -> None:
        self._rows: dict[DatasetId, tuple[str, DatasetRow]] = {}
        self._lock = threading.Lock()

    def rows(
        self, ws: Workspace, query: str = "", limit: int | None = None
    ) -> tuple[list[DatasetRow], int]:
        """The first ``limit`` datasets (all: ``None``) whose alias contains ``query``
        (case-insensitive), by alias, and how many match in all. Only the rows shown
        are read."""
        needle = query.strip().lower()
        entries = sorted(ws.list(), key=lambda e: e.alias)
        matching = [e for e in entries if needle in e.alias.lower()]
        shown = matching if limit is None else matching[:limit]
        live = {e.id for e in entries}
        with self._lock:
            for gone in [d for d in self._rows if d not in live]:
                del self._rows[gone]
        return [self.row(ws, e) for e in shown], len(matching)

    def row(self, ws: Workspace, entry: DatasetEntry) -> DatasetRow:
        """The row of ``entry``, from the cache when its head has not moved.

        One row is read at a time (the lock is held per row, never across a list): a
        view that comes while the start-up fill runs takes the rows it already read and
        reads the others itself, each row once.
        """
        head = _head_text(entry)
        with self._lock:
            cached = self._rows.get(entry.id)
            fresh = cached is not None and cached[0] == head and cached[1].alias == entry.alias
            if head is not None and cached is not None and fresh:
                return cached[1]
            row = dataset_row(ws, entry)
            if head is not None and not row.error:
                self._rows[entry.id] = (head, row)
            return row


class SignedHeads:
    """The held signed-head record of each dataset as JSON (``HeadRecord.to_dict``),
    parsed and verified once per content of its file in ``store``."""

    def __init__(self, store: HeadStore) -> None:
        self.store = store
        self._held: dict[str, tuple[bytes, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def keep_only(self, dids: set[str]) -> None:
        """Forget the records of datasets not in ``dids`` (gone from the workspace)."""
        with self._lock:
            for gone in [d for d in self._held if d not in dids]:
                del self._held[gone]

    def get(self, did: str) -> dict[str, Any] | None:
        """The record held for ``did`` (``None``: none, or a file that does not verify)."""
        try:
            key = DatasetId.from_did(did).as_multibase()
            data = read_bytes_limited(self.store.heads_dir / f"{key}.json", MAX_HEAD_RECORD_BYTES)
        except FileNotFoundError:
            return None
        except READ_ERRORS:
            data = None
        if data is None:
            return None
        with self._lock:  # one parse per record, whoever asks first
            cached = self._held.get(did)
            if cached is not None and cached[0] == data:
                return cached[1]
            record: dict[str, Any] | None = None
            with contextlib.suppress(P2PError, FbsError):
                HeadRecord.from_json(data)  # canonical, and its signature verifies
                record = json.loads(data)  # its canonical JSON is `HeadRecord.to_dict`'s
            self._held[did] = (data, record)
            return record


def _api_row(row: DatasetRow, signed: Mapping[str, Any] | None) -> dict[str, Any]:
    has_state = bool(row.head)
    return {
        "alias": row.alias,
        "id": row.did,
        "head": row.head if has_state else None,
        "sequenceNumber": row.sequence_number if has_state else None,
        "kind": row.kind if has_state else None,
        "records": row.records,
        "dataSize": row.size,
        "signedHead": signed,
        "owned": row.owned,
    }


def api_rows(ws: Workspace, cache: RowCache, signed: SignedHeads) -> list[dict[str, Any]]:
    """``GET /api/datasets``: every dataset by alias, its head, size, signed head."""
    rows, _total = cache.rows(ws)
    signed.keep_only({r.did for r in rows})
    return [_api_row(r, signed.get(r.did)) for r in rows]


def heads(ws: Workspace) -> dict[DatasetId, str]:
    """The current head of every dataset (multibase; ``""`` before its Seed)."""
    out: dict[DatasetId, str] = {}
    for entry in ws.list():
        head = _head_text(entry)
        if head is not None:
            out[entry.id] = head
    return out
