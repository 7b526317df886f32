"""Errors raised by the `storage` package.

Tree::

    OdfError (fbs.errors)
    └── StorageError
        ├── ObjectNotFound          no object under that hash
        │   └── MissingObject       an object the chain references is gone (damage)
        ├── HashMismatch            bytes do not hash to the expected multihash
        │   └── CorruptObject       a stored object whose bytes no longer match its name
        │       └── DamagedObject   a slice/checkpoint that differs from its metadata, found on read
        ├── InvalidDataFile         a data file that is not readable Parquet
        ├── ObjectTooLarge          an object exceeds a named size limit
        ├── UnsafePath              a store entry that is a symlink / not a regular file
        ├── RefError
        │   ├── RefNotFound         the ref does not exist
        │   ├── RefCASFailed        compare-and-swap lost: the ref was not the expected value
        │   ├── InvalidRef          ref file content is not a valid hash
        │   ├── InvalidRefName      a ref name outside the allowed pattern
        │   └── RefLockTimeout      the ref lock could not be taken in time
        ├── ChainError              a chain that breaks a metadata-chain rule
        │   ├── InvalidAppend       an appended block is refused (names the rule)
        │   │   └── ChainRuleViolation  ... with the rule number/topic as attributes
        │   └── CorruptChain        stored chain is inconsistent (verify/fsck)
        ├── DatasetError
        │   ├── DatasetNotFound     no dataset with that id/alias
        │   ├── DatasetExists       alias or id already taken
        │   ├── InvalidAlias        not a valid dataset alias
        │   └── InvalidCommit       commit arguments inconsistent with the event
        ├── WorkspaceError
        │   └── WorkspaceNotFound   no `.odf/` workspace here
        └── KeyStoreError           missing/unsafe private key
"""

from __future__ import annotations

from fbs.errors import ExitCategory, OdfError


class StorageError(OdfError):
    """Base class of storage errors."""

    exit_category = ExitCategory.INVALID


class ObjectNotFound(StorageError, KeyError):
    """No object stored under the given hash."""

    exit_category = ExitCategory.NOT_FOUND

    def __str__(self) -> str:  # KeyError quotes its message; we do not want that
        return str(self.args[0]) if self.args else "object not found"


class MissingObject(ObjectNotFound):
    """An object a dataset's chain references (a block reached from the head, a data
    slice or a checkpoint) that is gone from its store: the workspace is damaged, unlike
    a hash the caller asked for that was never stored (plain `ObjectNotFound`)."""

    exit_category = ExitCategory.DAMAGED


class HashMismatch(StorageError, ValueError):
    """Bytes whose hash differs from the expected one."""


class InvalidDataFile(StorageError, ValueError):
    """A data file that cannot be read as Parquet (needed for its logical hash)."""

    exit_category = ExitCategory.DAMAGED


class ObjectTooLarge(StorageError, ValueError):
    """An object larger than the configured limit."""


class RefError(StorageError):
    """Base class of ref errors."""


class RefNotFound(RefError, KeyError):
    """The ref does not exist."""

    exit_category = ExitCategory.NOT_FOUND

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "ref not found"


class RefCASFailed(RefError):
    """Compare-and-swap failed: the ref did not hold the expected value."""

    exit_category = ExitCategory.CONFLICT


class InvalidRef(RefError, ValueError):
    """A ref file whose content is not a valid hash."""

    exit_category = ExitCategory.DAMAGED


class ChainError(StorageError):
    """A metadata chain that breaks a rule."""


class InvalidAppend(ChainError, ValueError):
    """A block refused by append validation; the message names the rule."""


class CorruptChain(ChainError):
    """A stored chain that is inconsistent (found by verify/fsck)."""

    exit_category = ExitCategory.DAMAGED


class DatasetError(StorageError):
    """Base class of dataset-level errors."""


class DatasetNotFound(DatasetError, KeyError):
    """No dataset with that id or alias."""

    exit_category = ExitCategory.NOT_FOUND

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "dataset not found"


class DatasetExists(DatasetError):
    """A dataset with that id or alias already exists."""

    exit_category = ExitCategory.CONFLICT


class InvalidAlias(DatasetError, ValueError):
    """Not a valid dataset alias (hostname-like segments)."""

    exit_category = ExitCategory.USAGE


class InvalidDatasetConfig(DatasetError, ValueError):
    """An ``info/config`` file (the remote aliases) that cannot be read."""


class WorkspaceError(StorageError):
    """Base class of workspace errors."""


class WorkspaceNotFound(WorkspaceError):
    """No `.odf/` workspace found."""

    exit_category = ExitCategory.NOT_FOUND


class KeyStoreError(StorageError):
    """A missing or unsafe private key."""


class CorruptObject(HashMismatch):
    """A stored object whose bytes do not hash to the name it is stored under."""

    exit_category = ExitCategory.DAMAGED


class UnsafePath(StorageError):
    """A store entry that is a symlink or not a regular file; it is never followed."""

    exit_category = ExitCategory.DAMAGED


class InvalidRefName(RefError, ValueError):
    """A ref name outside the allowed pattern (``head`` or ``[a-z0-9-]+``)."""


class RefLockTimeout(RefError):
    """The lock guarding a ref could not be acquired within the timeout."""

    exit_category = ExitCategory.CONFLICT


class ChainRuleViolation(InvalidAppend):
    """An append refused by a numbered validation rule (``rule N: topic: detail``).

    Attributes:
        rule: the rule number (odf-format.md section 6.3; 13 = disable events).
        topic: short name of the rule (``"offsets"``, ``"watermark"`` ...).
    """

    def __init__(self, rule: int, topic: str, detail: str) -> None:
        super().__init__(f"rule {rule}: {topic}: {detail}")
        self.rule = rule
        self.topic = topic


class InvalidCommit(DatasetError, ValueError):
    """Commit arguments that do not match the event (stray data file, wrong size ...)."""


class DamagedObject(CorruptObject):
    """A data slice or checkpoint whose bytes differ from what the metadata declares
    (size or physical hash), found while reading it (`storage.verified`).

    The message names the object and ``odf verify`` as the next step.

    Attributes:
        kind: ``"data"`` or ``"checkpoint"``.
        hash: the physical hash the metadata declares.
        path: the file that was read.
    """

    def __init__(self, kind: str, h: object, path: object, detail: str) -> None:
        super().__init__(
            f"{kind} object {h} is damaged ({detail}; file {path}); nothing was read from it. "
            "Run `odf verify --integrity` to check the dataset"
        )
        self.kind = kind
        self.hash = h
        self.path = path
