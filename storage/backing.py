"""`DatasetBacking`: where the stores of one dataset live, as `storage.dataset` sees them.

Two backings have kamu's layout (``refs/head``, ``blocks/``, ``data/``, ``checkpoints/``):
a directory on local disk (`storage.layout.DatasetLayout`, the default) and a key prefix
on S3-compatible storage (`storage.s3.layout.S3DatasetLayout`). A dataset needs only
what this protocol names: its object stores (create-only, hashed on read), its ref store
(compare-and-swap), a name for messages, and the file-operations seam of the local side
files it keeps (the chain-state cache, always on local disk).
"""

from __future__ import annotations

from typing import Protocol

from storage.faults import FsOps
from storage.object_store import ObjectStore
from storage.refs import RefStore


class DatasetBacking(Protocol):
    """The stores of one dataset (see the module docstring)."""

    @property
    def blocks(self) -> ObjectStore:
        """Metadata blocks, capped at `storage.object_store.MAX_BLOCK_SIZE`."""
        ...

    @property
    def data(self) -> ObjectStore:
        """Data slices."""
        ...

    @property
    def checkpoints(self) -> ObjectStore:
        """Checkpoints."""
        ...

    @property
    def refs(self) -> RefStore:
        """``refs/`` (``head``)."""
        ...

    @property
    def ops(self) -> FsOps:
        """File operations for the dataset's local side files."""
        ...

    def where(self) -> str:
        """The dataset's directory or URL, for messages."""
        ...

    def create(self) -> None:
        """Make the empty layout (idempotent)."""
        ...

    def exists(self) -> bool:
        """Whether a dataset layout is there."""
        ...
