"""kamu's dataset layout on S3: the stores of one dataset under a key prefix.

::

    <prefix>/refs/head           canonical multibase block hash, no newline
    <prefix>/blocks/<hash>       raw metadata blocks
    <prefix>/data/<hash>         data slices
    <prefix>/checkpoints/<hash>  checkpoints
    <prefix>/info/alias          the dataset's alias
    <prefix>/quarantine/<id>     uploads through presigned URLs, not yet verified (odf only)

The same names as `storage.layout.DatasetLayout` on disk, so a bucket a push
wrote is a repository kamu reads, and a prefix kamu pushed is one odf pulls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from storage.faults import DEFAULT_OPS, FsOps
from storage.layout import ALIAS_FILE, BLOCKS_DIR, CHECKPOINTS_DIR, DATA_DIR, INFO_DIR, REFS_DIR
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE, MAX_BLOCK_SIZE
from storage.s3.client import S3Client
from storage.s3.objects import S3ObjectStore
from storage.s3.refs import S3RefStore
from storage.s3.url import S3Location

#: Prefix of uploads not yet verified (`storage.s3.quarantine`); kamu never reads it.
QUARANTINE_DIR: Final = "quarantine"
#: Largest ``info/alias`` accepted.
MAX_ALIAS_SIZE: Final = 1024


@dataclass(frozen=True, slots=True)
class S3DatasetLayout:
    """The stores of the dataset at ``location`` (a dataset's prefix)."""

    client: S3Client
    location: S3Location
    max_data_object_size: int = DEFAULT_MAX_OBJECT_SIZE

    @property
    def blocks(self) -> S3ObjectStore:
        """``blocks/`` (capped at `MAX_BLOCK_SIZE`)."""
        return S3ObjectStore(
            self.client, self.location.key(BLOCKS_DIR), max_object_size=MAX_BLOCK_SIZE
        )

    @property
    def data(self) -> S3ObjectStore:
        """``data/``."""
        return S3ObjectStore(
            self.client, self.location.key(DATA_DIR), max_object_size=self.max_data_object_size
        )

    @property
    def checkpoints(self) -> S3ObjectStore:
        """``checkpoints/``."""
        return S3ObjectStore(
            self.client,
            self.location.key(CHECKPOINTS_DIR),
            max_object_size=self.max_data_object_size,
        )

    @property
    def refs(self) -> S3RefStore:
        """``refs/``."""
        return S3RefStore(self.client, self.location.key(REFS_DIR))

    @property
    def ops(self) -> FsOps:
        """The file operations of the dataset's local side files (a chain-state cache)."""
        return DEFAULT_OPS

    def where(self) -> str:
        """The dataset's URL, for messages."""
        return self.location.to_url()

    def create(self) -> None:
        """Nothing to make: a prefix exists once a key is written under it."""

    def exists(self) -> bool:
        """Whether ``refs/head`` or any block is stored under the prefix."""
        if self.client.stat(self.location.key(f"{REFS_DIR}/head")) is not None:
            return True
        listed = self.client.list_keys(self.blocks.prefix + "/", page_size=1)
        return next(iter(listed), None) is not None

    def read_alias(self) -> str | None:
        """``info/alias``, trimmed (``None`` when absent or not UTF-8)."""
        from storage.errors import ObjectTooLarge

        try:
            got = self.client.get(self.location.key(f"{INFO_DIR}/{ALIAS_FILE}"), MAX_ALIAS_SIZE)
        except ObjectTooLarge:
            return None
        if got is None:
            return None
        try:
            return got[0].decode("utf-8").strip() or None
        except UnicodeDecodeError:
            return None

    def write_alias(self, alias: str) -> None:
        """Write ``info/alias`` if absent (an existing alias is the repository's choice)."""
        self.client.put_if_absent(
            self.location.key(f"{INFO_DIR}/{ALIAS_FILE}"), alias.encode("utf-8")
        )
