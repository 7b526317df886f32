"""On-disk layout of one dataset, identical to kamu's local layout.

::

    <root>/
      refs/head          canonical multibase block hash, no trailing newline
      blocks/<hash>      raw metadata block bytes (name = SHA3-256 of the bytes)
      data/<hash>        data part files (name = physical hash)
      checkpoints/<hash> engine checkpoints (name = physical hash)
      info/alias         dataset alias text, trimmed on read
      info/config        remote (pull / push) aliases, kamu's ``DatasetConfig`` manifest

Unknown files anywhere are tolerated (older kamu versions wrote more of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from storage.errors import InvalidAlias, InvalidDatasetConfig, UnsafePath
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import FILE_MODE, atomic_write_bytes, ensure_dir, read_bytes_limited
from storage.object_store import DEFAULT_MAX_OBJECT_SIZE, MAX_BLOCK_SIZE, DiskObjectStore
from storage.refs import HEAD, DiskRefStore

if TYPE_CHECKING:
    from fbs.manifest.dataset_config import DatasetConfig

REFS_DIR: Final = "refs"
BLOCKS_DIR: Final = "blocks"
DATA_DIR: Final = "data"
CHECKPOINTS_DIR: Final = "checkpoints"
INFO_DIR: Final = "info"
ALIAS_FILE: Final = "alias"
#: Largest ``info/alias`` file a reader accepts.
MAX_ALIAS_FILE_SIZE: Final = 1024
CONFIG_FILE: Final = "config"
#: Largest ``info/config`` file a reader accepts (a real one is ~100 bytes).
MAX_CONFIG_FILE_SIZE: Final = 256 * 1024


@dataclass(frozen=True, slots=True)
class DatasetLayout:
    """Paths and stores of one dataset directory.

    Args:
        root: the dataset directory (``datasets/<did multibase>/`` in a workspace).
        ops: the file-operations seam shared by all stores built from this layout.
        max_data_object_size: size cap for ``data/`` and ``checkpoints/`` objects.
    """

    root: Path
    ops: FsOps = field(default=DEFAULT_OPS, compare=False, repr=False)
    max_data_object_size: int = DEFAULT_MAX_OBJECT_SIZE

    @property
    def refs_dir(self) -> Path:
        """``refs/``."""
        return self.root / REFS_DIR

    @property
    def head_path(self) -> Path:
        """``refs/head``."""
        return self.refs_dir / HEAD

    @property
    def blocks_dir(self) -> Path:
        """``blocks/``."""
        return self.root / BLOCKS_DIR

    @property
    def data_dir(self) -> Path:
        """``data/``."""
        return self.root / DATA_DIR

    @property
    def checkpoints_dir(self) -> Path:
        """``checkpoints/``."""
        return self.root / CHECKPOINTS_DIR

    @property
    def info_dir(self) -> Path:
        """``info/``."""
        return self.root / INFO_DIR

    @property
    def alias_path(self) -> Path:
        """``info/alias``."""
        return self.info_dir / ALIAS_FILE

    def create(self) -> None:
        """Create the dataset directories durably (idempotent).

        Raises:
            UnsafePath: if one of the paths exists and is not a directory.
        """
        for directory in (
            self.refs_dir,
            self.blocks_dir,
            self.data_dir,
            self.checkpoints_dir,
            self.info_dir,
        ):
            ensure_dir(directory, ops=self.ops)

    def exists(self) -> bool:
        """Whether the dataset directory has the kamu layout (``refs/`` and ``blocks/``)."""
        return self.refs_dir.is_dir() and self.blocks_dir.is_dir()

    def where(self) -> str:
        """The dataset directory, for messages (`storage.backing.DatasetBacking`)."""
        return str(self.root)

    @property
    def blocks(self) -> DiskObjectStore:
        """The metadata block store (capped at `MAX_BLOCK_SIZE`)."""
        return DiskObjectStore(self.blocks_dir, max_object_size=MAX_BLOCK_SIZE, ops=self.ops)

    @property
    def data(self) -> DiskObjectStore:
        """The data part file store."""
        return DiskObjectStore(
            self.data_dir, max_object_size=self.max_data_object_size, ops=self.ops
        )

    @property
    def checkpoints(self) -> DiskObjectStore:
        """The checkpoint store."""
        return DiskObjectStore(
            self.checkpoints_dir, max_object_size=self.max_data_object_size, ops=self.ops
        )

    @property
    def refs(self) -> DiskRefStore:
        """The ref store (``refs/``)."""
        return DiskRefStore(self.refs_dir, ops=self.ops)

    @property
    def config_path(self) -> Path:
        """``info/config``: the dataset's remote aliases."""
        return self.info_dir / CONFIG_FILE

    def read_config(self) -> DatasetConfig:
        """The remote aliases from ``info/config`` (none when the file does not exist).

        Raises:
            InvalidDatasetConfig: the file is too large, not a regular file, or not a
                version-1 ``DatasetConfig`` manifest.
        """
        # Imported here: the manifest package pulls in the whole metadata model, which
        # the commands that never read remote aliases (list, log) should not load.
        from fbs.errors import ManifestError
        from fbs.manifest.dataset_config import DatasetConfig, parse_dataset_config

        try:
            data = read_bytes_limited(self.config_path, MAX_CONFIG_FILE_SIZE)
        except FileNotFoundError:
            return DatasetConfig()
        except UnsafePath as e:
            raise InvalidDatasetConfig(str(e)) from None
        if data is None:
            raise InvalidDatasetConfig(
                f"{self.config_path} is larger than {MAX_CONFIG_FILE_SIZE} bytes"
            )
        try:
            return parse_dataset_config(data)
        except ManifestError as e:
            raise InvalidDatasetConfig(f"{self.config_path}: {e}") from None

    def write_config(self, config: DatasetConfig) -> None:
        """Durably replace ``info/config`` (creating ``info/`` if needed).

        Raises:
            InvalidDatasetConfig: an alias the file format cannot hold.
        """
        from fbs.errors import ManifestError
        from fbs.manifest.dataset_config import dump_dataset_config

        try:
            text = dump_dataset_config(config)
        except ManifestError as e:
            raise InvalidDatasetConfig(str(e)) from None
        ensure_dir(self.info_dir, ops=self.ops)
        atomic_write_bytes(self.config_path, text.encode("utf-8"), mode=FILE_MODE, ops=self.ops)

    def read_alias(self) -> str | None:
        """The alias text from ``info/alias`` with surrounding whitespace trimmed.

        Returns ``None`` if the file does not exist. The alias syntax is checked by
        the dataset layer, not here.

        Raises:
            InvalidAlias: if the file is too large, not UTF-8, or not a regular file.
        """
        try:
            data = read_bytes_limited(self.alias_path, MAX_ALIAS_FILE_SIZE)
        except FileNotFoundError:
            return None
        except UnsafePath as e:
            raise InvalidAlias(str(e)) from None
        if data is None:
            raise InvalidAlias(f"{self.alias_path} is larger than {MAX_ALIAS_FILE_SIZE} bytes")
        try:
            return data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InvalidAlias(f"{self.alias_path} is not UTF-8") from None

    def write_alias(self, alias: str) -> None:
        """Durably write ``info/alias`` (creating ``info/`` if needed).

        Raises:
            InvalidAlias: if the text is empty, multi-line or too large.
        """
        data = alias.encode("utf-8")
        if not alias.strip() or "\n" in alias.strip() or len(data) > MAX_ALIAS_FILE_SIZE:
            raise InvalidAlias(f"unusable alias text {alias!r}")
        ensure_dir(self.info_dir, ops=self.ops)
        atomic_write_bytes(self.alias_path, data, mode=FILE_MODE, ops=self.ops)
