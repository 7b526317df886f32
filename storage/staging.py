"""Datasets received whole from outside: assembled in ``staging/``, then installed.

A dataset this workspace does not have yet (a clone by pull, a first push) is built in
``.odf/staging/<name>/``: objects first, then blocks and head, then its alias. Only
then is the directory renamed into ``datasets/<did>``, so a reader never sees a
dataset without its history. A crash leaves an invisible staging directory; the next
attempt (`open_staging`) keeps its verified objects (resume) and drops its blocks,
and `Workspace.gc` removes it once it is stale.

Every mutation goes through the workspace's `FsOps`, so the crash-point tests reach
the install too. `staging_lock` serialises two receivers of the same new dataset
(daemon and CLI), which would otherwise reset each other's staging directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError
from fbs.model import MetadataBlock
from storage.dataset import Dataset
from storage.errors import DatasetExists, InvalidAlias
from storage.fsutil import ensure_dir
from storage.layout import DatasetLayout
from storage.lockfile import FileLock
from storage.workspace import STAGING_DIR, Workspace

__all__ = ["STAGING_LOCK_SUFFIX", "install_staged", "open_staging", "staging_lock", "staging_path"]

#: Suffix of a staging directory's lock file (``staging/<name>.lock``).
STAGING_LOCK_SUFFIX: Final = ".lock"


def staging_path(ws: Workspace, name: str) -> Path:
    """The staging directory ``name`` of ``ws`` (a fixed name per dataset lets a retry resume)."""
    return ws.root / STAGING_DIR / name


def staging_lock(ws: Workspace, name: str) -> FileLock:
    """The (not yet acquired) lock of staging directory ``name``; its parent is created."""
    ensure_dir(ws.root / STAGING_DIR, ops=ws.ops)
    return FileLock(ws.root / STAGING_DIR / f"{name}{STAGING_LOCK_SUFFIX}")


def open_staging(ws: Workspace, name: str) -> Dataset:
    """The staging dataset ``name``, reset if an earlier attempt left blocks in it.

    Objects already staged are kept: they were verified before they got their names.
    Hold `staging_lock` while using it.
    """
    layout = DatasetLayout(staging_path(ws, name), ops=ws.ops)
    if layout.exists() and layout.refs.get_or_none("head") is not None:
        # A crash after the append but before the rename: objects stay, blocks go.
        shutil.rmtree(layout.refs_dir, ignore_errors=True)
        shutil.rmtree(layout.blocks_dir, ignore_errors=True)
    ensure_dir(layout.root.parent, ops=ws.ops)
    return Dataset.create(layout)


def install_staged(
    ws: Workspace,
    ds: Dataset,
    raws: list[bytes],
    alias: str,
    did: DatasetId,
    *,
    decoded: Sequence[MetadataBlock] | None = None,
) -> None:
    """Append verified blocks to the staging dataset ``ds`` and rename it into ``datasets/``.

    The blocks' objects must already be stored in ``ds``. The rename is the commit
    point: before it the workspace has no such dataset, after it the whole chain.

    Raises:
        InvalidAlias: unusable ``alias``.
        DatasetExists: the dataset appeared meanwhile.
        InvalidAppend / ObjectNotFound: blocks that do not apply (see
            `Dataset.append_blocks_bytes`).
    """
    try:
        DatasetAlias.parse(alias)
    except FbsError as e:
        raise InvalidAlias(f"unusable alias {alias!r}: {e}") from None
    ds.append_blocks_bytes(raws, decoded=decoded)
    ds.layout.write_alias(alias)
    final = ws.datasets_dir / did.as_multibase()
    if final.exists():
        raise DatasetExists(f"dataset {did} appeared locally meanwhile")
    ensure_dir(ws.datasets_dir, ops=ws.ops)
    ws.ops.replace(ds.layout.root, final)
    ws.ops.fsync_dir(ws.datasets_dir)
    ws.ops.fsync_dir(ds.layout.root.parent)
    ws.rebuild_index()
