"""Private keys of owned datasets: one ed25519 key file per dataset DID.

Layout (in a workspace: ``.odf/keys/``)::

    keys/                       mode 0700
      <did multibase>.key       mode 0600: magic line + hex private seed
      deleted/                  mode 0700: keys of deleted datasets, kept (see `retire`)

Files are written durably (temp + fsync + rename + fsync dir). Loading refuses a key
whose file or directory is accessible by group/others, is a symlink, belongs to
another user, or whose public key does not match the DID it is filed under: a key
that others could read (or swap) is not a secret we can vouch for.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from storage.errors import KeyStoreError, StorageError
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import PendingFile, ensure_dir, read_bytes_limited

if TYPE_CHECKING:
    from fbs.keys import KeyPair  # loads ed25519 (nacl): only where a key is used

__all__ = [
    "DELETED_DIR",
    "KEY_DIR_MODE",
    "KEY_FILE_MODE",
    "KeyStore",
]

#: Mode of the key directories.
KEY_DIR_MODE: Final = 0o700
#: Mode of key files.
KEY_FILE_MODE: Final = 0o600
#: First line of every key file (format marker).
KEY_FILE_MAGIC: Final = b"odf-node-ed25519-seed-v1\n"
#: Largest key file a reader accepts.
MAX_KEY_FILE_SIZE: Final = 256
#: Sub-directory holding retired keys.
DELETED_DIR: Final = "deleted"
KEY_SUFFIX: Final = ".key"


def _encode(key: KeyPair) -> bytes:
    return KEY_FILE_MAGIC + key.private_bytes().hex().encode("ascii") + b"\n"


class KeyStore:
    """Directory of dataset private keys (see the module docstring).

    Args:
        root: the key directory (created with mode 0700 on the first save).
        ops: the file-operations seam.
    """

    def __init__(self, root: Path, *, ops: FsOps = DEFAULT_OPS) -> None:
        self.root = Path(root)
        self._ops = ops

    def __repr__(self) -> str:
        return f"KeyStore({str(self.root)!r})"

    def path_of(self, dataset_id: DatasetId) -> Path:
        """The key file of ``dataset_id`` (whether or not it exists).

        Raises:
            KeyStoreError: if ``dataset_id`` is not a `DatasetId`.
        """
        if not isinstance(dataset_id, DatasetId):
            raise KeyStoreError(f"expected a DatasetId, got {type(dataset_id).__name__}")
        # Canonical lowercase hex: never a separator or "..".
        return self.root / (dataset_id.as_multibase() + KEY_SUFFIX)

    def _ensure_private_dir(self, path: Path) -> None:
        if not path.exists():
            ensure_dir(path.parent, ops=self._ops)
            with contextlib.suppress(FileExistsError):
                self._ops.mkdir(path, KEY_DIR_MODE)
            self._ops.fsync_dir(path.parent)
        self._check_dir(path)

    @staticmethod
    def _check_dir(path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise KeyStoreError(f"key directory {path} does not exist") from None
        if not stat.S_ISDIR(st.st_mode):
            raise KeyStoreError(f"key directory {path} is not a directory")
        if st.st_uid != os.getuid():
            raise KeyStoreError(f"key directory {path} belongs to another user")
        if st.st_mode & 0o077:
            raise KeyStoreError(
                f"key directory {path} has mode {stat.S_IMODE(st.st_mode):o}; expected 700"
            )

    def save(self, key: KeyPair) -> Path:
        """Durably store ``key`` under its DID (idempotent for the same key).

        Raises:
            KeyStoreError: the directory is unsafe or a different file is in the way.
        """
        from fbs.keys import KeyPair

        if not isinstance(key, KeyPair):
            raise KeyStoreError(f"expected a KeyPair, got {type(key).__name__}")
        self._ensure_private_dir(self.root)
        path = self.path_of(key.dataset_id)
        if path.exists() or path.is_symlink():
            if self.load(key.dataset_id).private_bytes() != key.private_bytes():
                raise KeyStoreError(f"{path} holds a different key")  # pragma: no cover
            return path
        with PendingFile(self.root, mode=KEY_FILE_MODE, ops=self._ops) as pending:
            pending.write(_encode(key))
            pending.commit(path)
        return path

    def has(self, dataset_id: DatasetId) -> bool:
        """Whether a key file exists for ``dataset_id`` (not checked; see `load`)."""
        return self.path_of(dataset_id).is_file()

    def load(self, dataset_id: DatasetId) -> KeyPair:
        """The key pair of ``dataset_id``.

        Raises:
            KeyStoreError: missing key, unsafe permissions/ownership, symlink, bad
                format, or a key that does not match the DID.
        """
        return self._load_from(self.root, self.path_of(dataset_id), dataset_id)

    def _load_from(self, directory: Path, path: Path, dataset_id: DatasetId) -> KeyPair:
        self._check_dir(directory)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise KeyStoreError(f"no key for {dataset_id}") from None
        if not stat.S_ISREG(st.st_mode):
            raise KeyStoreError(f"key file {path} is not a regular file")
        if st.st_uid != os.getuid():
            raise KeyStoreError(f"key file {path} belongs to another user")
        if st.st_mode & 0o077:
            raise KeyStoreError(
                f"key file {path} has mode {stat.S_IMODE(st.st_mode):o}; expected 600"
            )
        try:
            data = read_bytes_limited(path, MAX_KEY_FILE_SIZE)
        except (OSError, StorageError) as e:
            raise KeyStoreError(f"cannot read key file {path}: {e}") from None
        if data is None or not data.startswith(KEY_FILE_MAGIC):
            raise KeyStoreError(f"key file {path} is not an odf-node key")
        from fbs.keys import KeyPair

        try:
            key = KeyPair(bytes.fromhex(data[len(KEY_FILE_MAGIC) :].decode("ascii").strip()))
        except (ValueError, FbsError):
            raise KeyStoreError(f"key file {path} is damaged") from None
        if key.dataset_id != dataset_id:
            raise KeyStoreError(f"key file {path} does not hold the key of {dataset_id}")
        return key

    def list(self) -> list[DatasetId]:
        """DIDs with a key file (sorted; foreign file names are skipped)."""
        out: list[DatasetId] = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for entry in entries:
            if not entry.name.endswith(KEY_SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                did = DatasetId.from_multibase(entry.name[: -len(KEY_SUFFIX)])
            except FbsError:
                continue
            if did.as_multibase() + KEY_SUFFIX == entry.name:
                out.append(did)
        return sorted(out)

    def retire(self, dataset_id: DatasetId) -> Path | None:
        """Move the key of a deleted dataset to ``deleted/`` (kept, never destroyed).

        Keys are retired rather than erased: the DID may live on at peers, and the key
        is the only proof of ownership should the dataset be restored from them.
        Returns the new path, or ``None`` if there was no key.

        Raises:
            KeyStoreError: if the ``deleted/`` directory is unsafe.
        """
        src = self.path_of(dataset_id)
        if not src.is_file():
            return None
        deleted = self.root / DELETED_DIR
        self._ensure_private_dir(deleted)
        dst = deleted / f"{dataset_id.as_multibase()}.{time.time_ns()}{KEY_SUFFIX}"
        self._ops.replace(src, dst)  # same filesystem: an atomic move
        self._ops.fsync_dir(deleted)
        self._ops.fsync_dir(self.root)
        return dst

    def load_retired(self, dataset_id: DatasetId) -> builtins.list[KeyPair]:
        """Retired keys of ``dataset_id`` (newest first), checked like `load`.

        Raises:
            KeyStoreError: for an unsafe or damaged retired key.
        """
        deleted = self.root / DELETED_DIR
        prefix = dataset_id.as_multibase() + "."
        try:
            names = sorted(
                (e.name for e in os.scandir(deleted) if e.name.startswith(prefix)), reverse=True
            )
        except FileNotFoundError:
            return []
        return [self._load_from(deleted, deleted / n, dataset_id) for n in names]
