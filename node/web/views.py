"""What the dataset page shows, read from the workspace (blocking: handlers run these in
a thread); the list's rows are `node.web.rows`'.

Each function returns plain frozen values; the rendering lives in `node.web.render`.
A dataset whose chain cannot be read is shown with the error instead of its facts: one
damaged dataset must not take the list page down.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from fbs.did import DatasetId
from fbs.errors import FbsError
from node.render.events import event_summary
from node.web.rows import DatasetRow, RowCache, chain_state, row_of
from p2p.attestation_store import AttestationStatus, AttestationStore
from p2p.errors import P2PError
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from storage.catalog import DatasetEntry
from storage.chain import ChainState
from storage.errors import StorageError
from storage.workspace import Workspace

__all__ = [
    "MAX_EVENTS",
    "PAGE_ROWS",
    "ChainEvent",
    "DatasetDetail",
    "dataset_detail",
    "preview",
]

#: Records per page of the data preview.
PAGE_ROWS: Final = 50
#: Newest metadata events shown on a dataset page.
MAX_EVENTS: Final = 200
_READ_ERRORS: Final = (StorageError, FbsError, OSError)


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
    state = chain_state(ws, entry)
    signed, status = _trust(ws, entry.id)
    return DatasetDetail(
        row=row_of(ws, entry, state),
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
