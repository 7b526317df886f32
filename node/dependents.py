"""Which datasets of a workspace read which: the input edges of their transforms.

`odf delete` and `odf add --replace` refuse to leave a transform whose input is gone (as
kamu refuses a dangling reference); `odf delete -r` takes the whole downstream with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fbs.did import DatasetId
from fbs.errors import FbsError

if TYPE_CHECKING:
    from storage.catalog import DatasetEntry
    from storage.workspace import Workspace


@dataclass(frozen=True, slots=True)
class Use:
    """``consumer``'s transform in force takes ``used`` as an input."""

    consumer: DatasetEntry
    used: DatasetId


def inputs_of(ws: Workspace, did: DatasetId) -> tuple[DatasetId, ...]:
    """The inputs of ``did``'s transform in force (none for a root or an empty dataset)."""
    state = ws.get(did, require_head=False).state()
    if state is None or state.transform is None:
        return ()
    found: list[DatasetId] = []
    for i in state.transform.inputs:
        # `odf add` writes inputs as DIDs; anything else names nothing that can be deleted.
        with contextlib.suppress(FbsError, ValueError):
            found.append(DatasetId.from_did(i.dataset_ref))
    return tuple(found)


def uses_from_outside(ws: Workspace, ids: Collection[DatasetId]) -> list[Use]:
    """Datasets not in ``ids`` that take one of ``ids`` as an input."""
    gone = set(ids)
    return [
        Use(entry, used)
        for entry in ws.list()
        if entry.id not in gone
        for used in inputs_of(ws, entry.id)
        if used in gone
    ]


def with_downstream(ws: Workspace, ids: Collection[DatasetId]) -> list[DatasetEntry]:
    """``ids`` and every dataset that reads them, directly or through others; consumers
    before the datasets they read (the order to delete them in: a crash part-way never
    leaves a transform whose input is gone)."""
    entries = {entry.id: entry for entry in ws.list()}
    readers: dict[DatasetId, list[DatasetId]] = {}
    for did in entries:
        for used in inputs_of(ws, did):
            readers.setdefault(used, []).append(did)
    order: list[DatasetId] = []
    seen: set[DatasetId] = set()

    def visit(did: DatasetId) -> None:  # depth-first: readers are placed before `did`
        if did in seen:
            return
        seen.add(did)
        for reader in readers.get(did, ()):
            visit(reader)
        order.append(did)

    for did in ids:
        visit(did)
    return [entries[did] for did in order if did in entries]
