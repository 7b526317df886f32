"""Delete: remove datasets, refusing to leave a transform without its input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from node.errors import DatasetInUse

if TYPE_CHECKING:
    from storage.catalog import DatasetEntry
    from storage.workspace import Workspace

__all__ = ["delete_datasets", "doomed_datasets"]


def doomed_datasets(ws: Workspace, refs: tuple[str, ...], recursive: bool) -> list[DatasetEntry]:
    """What deleting ``refs`` removes, readers first: with ``recursive`` every dataset
    downstream of them too.

    Raises:
        DatasetNotFound: a reference names no dataset.
        DatasetInUse: without ``recursive``, a dataset outside ``refs`` reads one of them.
    """
    from node.dependents import uses_from_outside, with_downstream

    named = [ws.resolve(ref) for ref in refs]
    ids = [entry.id for entry in named]
    if recursive:
        return with_downstream(ws, ids)
    uses = uses_from_outside(ws, ids)
    if uses:
        use = uses[0]
        used = next(e.alias for e in named if e.id == use.used)
        raise DatasetInUse(
            f"cannot delete {used}: {use.consumer.alias} takes it as an input "
            "(delete both, or use -r to delete every dataset that reads it)"
        )
    return list(dict.fromkeys(named))


def delete_datasets(ws: Workspace, doomed: list[DatasetEntry]) -> Iterator[DatasetEntry]:
    """Delete ``doomed`` in order (`doomed_datasets`: readers first, so that no moment
    holds a transform without its input), yielding each once it is gone."""
    for entry in doomed:
        ws.delete(entry.id)
        yield entry
