"""The error contract of the ``odf`` command: a typed error becomes one ``odf: error: ...``
line on stderr and a documented exit code; 1 is only for bugs (README, `node.errors`).

Apart from `node.cli` so that a command that reports errors itself and goes on (the
``odf sql`` shell) uses the same words and codes without importing the CLI module.
"""

from __future__ import annotations

from fbs.errors import MalformedBlock, ManifestError
from node.cli_util import (
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    EXIT_VERIFY_FAILED,
    err,
)
from node.errors import (
    DependencyCycle,
    IncompatibleSchema,
    InputHistoryDiverged,
    InputNotReady,
    NotDerivative,
    UsageError,
    VerificationFailed,
)

__all__ = ["VERIFY_HINT", "exit_code_for", "is_stored_damage", "report_error"]


def exit_code_for(error: BaseException) -> int:
    """The process exit code for an error raised by a command."""
    # Imported here, not at module level: only a failing command needs them, and
    # p2p.errors pulls in fbs.did (hashing, multiformats) at every start otherwise.
    from engine.errors import EngineConfigError, EngineUnavailable, InvalidQuery
    from fbs.errors import FbsError, InvalidDid, InvalidMultiformat
    from node.cli_util import EXIT_CONFLICT, EXIT_UNAVAILABLE
    from node.errors import DatasetInUse, EngineManagerError, EngineSettingsError
    from node.ingest.errors import IngestError, SourceNotFound, SourceUnreachable
    from node.runfile import NodeAlreadyRunning, NodeNotRunning
    from p2p.errors import (
        AttestationRejected,
        DuplicateAttestation,
        Equivocation,
        InvalidAttestation,
        InvalidHeadRecord,
        NotDescendant,
        P2PError,
        PeerUnavailable,
        StaleHead,
        TransferError,
    )
    from storage.errors import (
        ChainError,
        DatasetExists,
        DatasetNotFound,
        HashMismatch,
        InvalidAlias,
        ObjectNotFound,
        RefCASFailed,
        RefLockTimeout,
        RefNotFound,
        StorageError,
        WorkspaceNotFound,
    )

    if isinstance(error, VerificationFailed) or is_stored_damage(error):
        return EXIT_VERIFY_FAILED
    if isinstance(error, UsageError | InvalidAlias | EngineConfigError | EngineSettingsError):
        return EXIT_USAGE
    if isinstance(error, EngineUnavailable | EngineManagerError | NodeNotRunning):
        # The engine (or the running node) cannot be started or reached: not a bug, and
        # not the input's fault.
        return EXIT_UNAVAILABLE
    if isinstance(
        error,
        DatasetNotFound
        | ObjectNotFound
        | RefNotFound
        | WorkspaceNotFound
        | FileNotFoundError
        | SourceNotFound
        | SourceUnreachable,
    ):
        return EXIT_NOT_FOUND
    if isinstance(
        error,
        RefCASFailed
        | DatasetExists
        | NotDescendant
        | Equivocation
        | StaleHead
        | DuplicateAttestation
        | RefLockTimeout
        | InputHistoryDiverged
        | DatasetInUse
        | NodeAlreadyRunning,
    ):
        return EXIT_CONFLICT
    if isinstance(error, InputNotReady):
        return EXIT_NOT_FOUND
    if isinstance(error, PeerUnavailable | TransferError):
        return EXIT_NOT_FOUND
    if isinstance(error, InvalidHeadRecord | InvalidAttestation | AttestationRejected | P2PError):
        return EXIT_INVALID
    if isinstance(
        error,
        MalformedBlock
        | ManifestError
        | InvalidMultiformat
        | InvalidDid
        | ChainError
        | HashMismatch
        | FbsError
        | InvalidQuery
        | IngestError
        | NotDerivative
        | IncompatibleSchema
        | DependencyCycle,
    ):
        return EXIT_INVALID
    if isinstance(error, StorageError | OSError):
        # Any other storage refusal (bad commit arguments, oversized object, unusable
        # key or workspace) and environment failures (permission denied, disk full,
        # I/O error): the command cannot act on what it was given. Not a bug.
        return EXIT_INVALID
    return EXIT_INTERNAL


def is_stored_damage(error: BaseException) -> bool:
    """Whether ``error`` reports a damaged workspace (exit 5, with an ``odf verify`` hint).

    A stored object whose bytes no longer match its name or its block, an object the chain
    references that is gone (a block, slice or checkpoint), a data file that is no longer
    Parquet, a chain that does not decode or link, a missing or garbled ``refs/head``, a
    symlink planted in a store. Errors about files the user passes on
    the command line (``odf hash``, ``odf block``) are the user's input instead (4):
    `main` re-classifies those.
    """
    from storage.errors import (
        CorruptChain,
        CorruptObject,
        InvalidDataFile,
        InvalidRef,
        MissingObject,
        UnsafePath,
    )

    return isinstance(
        error,
        CorruptObject | CorruptChain | MissingObject | InvalidRef | InvalidDataFile | UnsafePath,
    )


#: Commands whose file arguments are user files, not workspace objects.
_USER_FILE_COMMANDS = frozenset({"hash", "block"})

#: Appended to a damage error that does not already point at ``odf verify``.
VERIFY_HINT = "run `odf verify --integrity` to see what is damaged"


def report_error(error: BaseException, command: str | None) -> int:
    """Print the one ``odf: error: ...`` line for ``error`` and return its exit code.

    The contract (README, `node.errors`): 1 only for bugs (an exception no command
    should raise); every typed failure is one line on stderr and a documented code.
    """
    if isinstance(error, OSError) and not isinstance(error, BrokenPipeError):
        return _report_os_error(error)
    message = str(error) or type(error).__name__
    if is_stored_damage(error):
        if command in _USER_FILE_COMMANDS:
            err(message)
            return EXIT_INVALID
        if "odf verify" not in message:
            message = f"{message} ({VERIFY_HINT})"
        err(message)
        return EXIT_VERIFY_FAILED
    err(message)
    return exit_code_for(error)


def _report_os_error(error: OSError) -> int:
    """One line for an OS error that escaped a command (never a traceback)."""
    import errno as errno_mod

    what = f"{error.filename}: " if error.filename is not None else ""
    reason = error.strerror or str(error) or type(error).__name__
    if isinstance(error, FileNotFoundError):
        err(f"{what}no such file")
        return EXIT_NOT_FOUND
    if isinstance(error, IsADirectoryError):
        err(f"{what}is a directory")
        return EXIT_USAGE
    if isinstance(error, PermissionError):
        err(f"{what}permission denied")
        return EXIT_INVALID
    if error.errno in (errno_mod.ENOSPC, errno_mod.EDQUOT):
        err(f"{what}no space left on device")
        return EXIT_INVALID
    err(f"{what}{reason}")
    return EXIT_INVALID


# -- commands ---------------------------------------------------------------------------
