"""A replica is read-only: only the node that holds a dataset's key appends blocks to it.

A dataset of the workspace whose private key is not in the workspace keystore
(``.odf/keys/``) is a *replica*: its history is its publisher's, signed with that key.
A block made here (an ingest, a transform run, a watermark) would be a block the
publisher never made: the replica's chain would fork from the publisher's for good
(the publisher's next head no longer descends from it, and nobody could sign it).

`require_owned` is the one rule, called where every local append begins: the ingest
use-cases (`node.usecases.ingest`: ``odf ingest``, root pulls and ``--set-watermark``,
the HTTP API's push ingest), the Python API's writes (`node.api`) and derivative pulls
(`node.transform.pull_derivative`). It sits here and not at the storage commit because
storage knows neither which node owns a dataset nor the publisher's signed name, and
`storage.workspace.Workspace.add_snapshots` commits a new dataset before its key is
filed. Blocks received from the publisher's history (`p2p.receive`) are not local
appends and are not affected.

To make an independent copy, add the dataset's manifest under a new name (``odf add``):
a new dataset with its own DID and key, whose history is this node's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.errors import ReplicaReadOnly

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from storage.dataset import Dataset
    from storage.workspace import Workspace

__all__ = ["COPY_HINT", "is_owned", "publisher_name", "require_owned", "require_owned_dataset"]

#: How to get a dataset of one's own with a replica's definition.
COPY_HINT = "to change it here, `odf add` its manifest under a new name (a new dataset, own DID)"


def is_owned(ws: Workspace, did: DatasetId) -> bool:
    """Whether this workspace holds the key of dataset ``did`` (it is not a replica)."""
    return ws.keys.has(did)


def publisher_name(ws: Workspace, did: DatasetId) -> str | None:
    """The publisher's signed alias of ``did`` from the held head record, if any."""
    from p2p.errors import P2PError
    from p2p.head_store import HeadStore

    try:
        record = HeadStore.for_workspace(ws.root).get(did)
    except P2PError:
        return None  # a damaged record names nobody; `odf verify` reports it
    return None if record is None else record.name


def require_owned(ws: Workspace, *refs: str | DatasetId, action: str = "append to it") -> None:
    """Refuse ``action`` on any of ``refs`` that is a replica (checked before anything runs).

    Raises:
        ReplicaReadOnly: a dataset whose key this workspace does not hold.
        DatasetNotFound: no such dataset.
    """
    for ref in refs:
        entry = ws.resolve(ref)
        if is_owned(ws, entry.id):
            continue
        did = entry.id.to_did_odf()
        name = publisher_name(ws, entry.id)
        signed = f" (published as {name!r})" if name else ""
        raise ReplicaReadOnly(
            f"{entry.alias} is a replica of {did}{signed}: only its publisher can {action}; "
            f"`odf pull {entry.alias}` brings the publisher's new blocks, and {COPY_HINT}"
        )


def require_owned_dataset(ds: Dataset, *, action: str = "append to it") -> None:
    """`require_owned` for an open dataset (the HTTP and Python APIs hold those).

    A dataset directory outside any workspace has no keystore and no publisher to
    defer to: it is never a replica.
    """
    ws = _workspace_of(ds)
    state = ds.state()
    if ws is None or state is None:
        return
    require_owned(ws, state.dataset_id, action=action)


def _workspace_of(ds: Dataset) -> Workspace | None:
    """The workspace holding ``ds`` (``<root>/datasets/<id>``), or ``None``."""
    from storage.catalog import DATASETS_DIR, WORKSPACE_DIR, check_root
    from storage.errors import WorkspaceError
    from storage.workspace import Workspace

    parent = ds.layout.root.parent
    root = parent.parent
    if parent.name != DATASETS_DIR or root.name != WORKSPACE_DIR:
        return None
    try:
        check_root(root)
    except WorkspaceError:
        return None
    return Workspace(root)
