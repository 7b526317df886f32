"""What the pages show, read from the workspace (blocking: handlers run these in a thread).

Each function returns plain frozen values; the rendering lives in `node.web.pages`.
A dataset whose chain cannot be read is shown with the error instead of its facts: one
damaged dataset must not take the list page down.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import threading
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from fbs.did import DatasetId
from fbs.errors import FbsError
from node.render.events import event_summary
from p2p.attestation_store import AttestationStatus, AttestationStore
from p2p.errors import P2PError
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from storage.catalog import DatasetEntry
from storage.chain import ChainState
from storage.errors import StorageError
from storage.layout import DatasetLayout
from storage.refs import HEAD
from storage.workspace import Workspace

__all__ = [
    "MAX_EVENTS",
    "PAGE_ROWS",
    "ChainEvent",
    "DatasetDetail",
    "DatasetRow",
    "RowCache",
    "dataset_detail",
    "heads",
    "preview",
]

#: Records per page of the data preview.
PAGE_ROWS: Final = 50
#: Newest metadata events shown on a dataset page.
MAX_EVENTS: Final = 200
_READ_ERRORS: Final = (StorageError, FbsError, OSError)


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


@dataclass(frozen=True, slots=True)
class ChainEvent:
    """A metadata block as a person reads it."""

    sequence_number: int
    block_hash: str
    system_time: _dt.datetime
    kind: str
    summary: str


@dataclass(frozen=True, slots=True)
class DatasetDetail:
    """Everything the dataset page shows."""

    row: DatasetRow
    schema: tuple[tuple[str, str], ...]
    events: tuple[ChainEvent, ...]
    others: tuple[DatasetRow, ...]
    signed_head: HeadRecord | None
    attestations: AttestationStatus | None


def _row(ws: Workspace, entry: DatasetEntry, state: ChainState | None) -> DatasetRow:
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
        inputs=_input_dids(ws, state),
    )


def _input_did(ws: Workspace, ref: str) -> str:
    """A transform input reference as a canonical ``did:odf:`` (as written if unknown)."""
    with contextlib.suppress(*_READ_ERRORS, ValueError):
        if ref.startswith("did:"):
            return DatasetId.from_did(ref).to_did_odf()
        return ws.resolve(ref).id.to_did_odf()
    return ref


def _input_dids(ws: Workspace, state: ChainState) -> tuple[str, ...]:
    if state.transform is None:
        return ()
    return tuple(_input_did(ws, i.dataset_ref) for i in state.transform.inputs)


def _state(ws: Workspace, entry: DatasetEntry) -> ChainState | None:
    return ws.get(entry.id, require_head=False).state()


def dataset_row(ws: Workspace, entry: DatasetEntry) -> DatasetRow:
    """The list line of one dataset."""
    try:
        return _row(ws, entry, _state(ws, entry))
    except _READ_ERRORS as e:
        return DatasetRow(entry.alias, entry.id.to_did_odf(), error=str(e).splitlines()[0])


def _head_text(entry: DatasetEntry) -> str | None:
    """``entry``'s head (multibase; ``""`` before its Seed), ``None`` if unreadable.

    Read from the dataset's folder as the catalog found it (one small file), without
    resolving the alias again: the list and the watcher read every dataset's head.
    """
    try:
        head = DatasetLayout(entry.path).refs.get_or_none(HEAD)
    except _READ_ERRORS:
        return None
    return "" if head is None else head.to_multibase()


class RowCache:
    """List rows kept per dataset while its head stays the same.

    A row costs a chain-state read (a walk of the chain when the workspace's state cache
    is behind), its head one small file read: the list page of a node with many datasets
    re-reads only the datasets whose head moved since the last view.
    """

    def __init__(self) -> None:
        self._rows: dict[DatasetId, tuple[str, DatasetRow]] = {}
        self._lock = threading.RLock()  # `rows` holds it around `row`

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
        with self._lock:
            live = {e.id for e in entries}
            for gone in [d for d in self._rows if d not in live]:
                del self._rows[gone]
            return [self.row(ws, e) for e in shown], len(matching)

    def row(self, ws: Workspace, entry: DatasetEntry) -> DatasetRow:
        """The row of ``entry``, from the cache when its head has not moved."""
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


def heads(ws: Workspace) -> dict[DatasetId, str]:
    """The current head of every dataset (multibase; ``""`` before its Seed)."""
    out: dict[DatasetId, str] = {}
    for entry in ws.list():
        head = _head_text(entry)
        if head is not None:
            out[entry.id] = head
    return out


def _events(ws: Workspace, entry: DatasetEntry) -> tuple[ChainEvent, ...]:
    events = []
    ds = ws.get(entry.id, require_head=False)
    for h, _raw, block in ds.iter_blocks():
        events.append(
            ChainEvent(
                block.sequence_number,
                h.to_multibase(),
                block.system_time.to_datetime(),
                type(block.event).__name__,
                event_summary(block.event),
            )
        )
        if len(events) >= MAX_EVENTS:
            break
    return tuple(events)


def _schema(state: ChainState | None) -> tuple[tuple[str, str], ...]:
    from fbs.arrow_schema import arrow_schema_from_data

    if state is None or state.data_schema is None or state.data_schema.schema is None:
        return ()
    with contextlib.suppress(*_READ_ERRORS, ValueError):
        schema = arrow_schema_from_data(state.data_schema.schema)
        return tuple((f.name, str(f.type)) for f in schema)
    return ()


def _trust(ws: Workspace, did: DatasetId) -> tuple[HeadRecord | None, AttestationStatus | None]:
    signed = status = None
    with contextlib.suppress(P2PError, *_READ_ERRORS):
        signed = HeadStore.for_workspace(ws.root).get(did)
    with contextlib.suppress(P2PError, *_READ_ERRORS):
        status = AttestationStore.for_workspace(ws).status(did)
    return signed, status


def dataset_detail(ws: Workspace, ref: str, cache: RowCache) -> DatasetDetail:
    """The dataset page of ``ref`` (alias or DID); ``cache`` gives every dataset's row
    (their inputs make the lineage graph: only datasets whose head moved are read).

    Raises:
        DatasetNotFound: no such dataset.
        StorageError / FbsError: its chain cannot be read.
    """
    entry = ws.resolve(DatasetId.from_did(ref) if ref.startswith("did:") else ref)
    state = _state(ws, entry)
    signed, status = _trust(ws, entry.id)
    return DatasetDetail(
        row=_row(ws, entry, state),
        schema=_schema(state),
        events=_events(ws, entry),
        others=tuple(cache.rows(ws)[0]),
        signed_head=signed,
        attestations=status,
    )


def preview(ws: Workspace, ref: str, page: int) -> tuple[pa.Table, bool]:
    """Records of page ``page`` (0: the newest `PAGE_ROWS`), newest first, and whether
    an older page exists. Only the newest slices that hold them are read."""
    from storage.reads import read_tail

    entry = ws.resolve(DatasetId.from_did(ref) if ref.startswith("did:") else ref)
    ds = ws.get(entry.id, require_head=False)
    head = ds.head()
    want = (page + 1) * PAGE_ROWS
    table = None if head is None else read_tail(ds, want, head)
    if table is None:
        return pa.table({}), False
    state = ds.state()
    total = 0 if state is None else state.num_records
    chunk = table.slice(0, max(0, table.num_rows - page * PAGE_ROWS))
    chunk = chunk.slice(max(0, chunk.num_rows - PAGE_ROWS))
    rows = chunk.take(list(range(chunk.num_rows - 1, -1, -1)))
    return rows, total > want
