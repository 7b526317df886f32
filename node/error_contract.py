"""The one error contract of odf-node: every error maps to one exit category
(`fbs.errors.ExitCategory`, carried by its class as ``exit_category``), and each category
to one ``odf`` exit code and one HTTP status (`OUTCOMES`). The CLI prints a typed error
as one ``odf: error: ...`` line and exits with its code; the HTTP API answers with its
status. Exit 1 (HTTP 500) is only for bugs (README, `node.errors`).

Apart from `node.cli` so that a command that reports errors itself and goes on (the
``odf sql`` shell) and the HTTP API use the same words and codes without importing the CLI.
"""

from __future__ import annotations

import errno as errno_mod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from fbs.errors import ExitCategory, OdfError
from node.cli_util import (
    EXIT_CONFLICT,
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    EXIT_VERIFY_FAILED,
    err,
)

__all__ = [
    "OUTCOMES",
    "VERIFY_HINT",
    "Outcome",
    "category_of",
    "exit_code_for",
    "http_status_for",
    "is_stored_damage",
    "report_error",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a category of failure becomes: the process exit code and the HTTP status."""

    exit_code: int
    http_status: int


#: The one table from failure category to exit code and HTTP status. A damaged store is
#: 5 like a failed verification (the user runs ``odf verify``); over HTTP it is the
#: server's fault (500), not the client's.
OUTCOMES: Final[Mapping[ExitCategory, Outcome]] = MappingProxyType(
    {
        ExitCategory.INTERNAL: Outcome(EXIT_INTERNAL, 500),
        ExitCategory.USAGE: Outcome(EXIT_USAGE, 400),
        ExitCategory.NOT_FOUND: Outcome(EXIT_NOT_FOUND, 404),
        ExitCategory.INVALID: Outcome(EXIT_INVALID, 400),
        ExitCategory.REFUSED: Outcome(EXIT_INVALID, 422),
        ExitCategory.VERIFICATION_FAILED: Outcome(EXIT_VERIFY_FAILED, 422),
        ExitCategory.DAMAGED: Outcome(EXIT_VERIFY_FAILED, 500),
        ExitCategory.CONFLICT: Outcome(EXIT_CONFLICT, 409),
        ExitCategory.UNAVAILABLE: Outcome(EXIT_UNAVAILABLE, 503),
    }
)


def category_of(error: BaseException) -> ExitCategory:
    """The failure category of ``error``: its class's ``exit_category`` for odf-node errors;
    for OS errors (permission denied, disk full, I/O error) the command cannot act on what
    it was given (a missing file is not found, a directory where a file was wanted is a
    usage error); anything else is a bug."""
    if isinstance(error, OdfError):
        return error.exit_category
    if isinstance(error, FileNotFoundError):
        return ExitCategory.NOT_FOUND
    if isinstance(error, IsADirectoryError):
        return ExitCategory.USAGE
    if isinstance(error, OSError):
        return ExitCategory.INVALID
    return ExitCategory.INTERNAL


def exit_code_for(error: BaseException) -> int:
    """The process exit code for an error raised by a command."""
    return OUTCOMES[category_of(error)].exit_code


def http_status_for(error: BaseException) -> int:
    """The HTTP status for an error raised by a request handler."""
    return OUTCOMES[category_of(error)].http_status


def is_stored_damage(error: BaseException) -> bool:
    """Whether ``error`` reports a damaged workspace (exit 5, with an ``odf verify`` hint).

    A stored object whose bytes no longer match its name or its block, an object the chain
    references that is gone (a block, slice or checkpoint), a data file that is no longer
    Parquet, a chain that does not decode or link, a missing or garbled ``refs/head``, a
    symlink planted in a store. Errors about files the user passes on the command line
    (``odf hash``, ``odf block``) are the user's input instead (4): `report_error`
    re-classifies those.
    """
    return category_of(error) is ExitCategory.DAMAGED


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
    what = f"{error.filename}: " if error.filename is not None else ""
    err(f"{what}{_os_reason(error)}")
    return exit_code_for(error)


def _os_reason(error: OSError) -> str:
    """The words for an OS error: the common ones said plainly, others as the OS says."""
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, IsADirectoryError):
        return "is a directory"
    if isinstance(error, PermissionError):
        return "permission denied"
    if error.errno in (errno_mod.ENOSPC, errno_mod.EDQUOT):
        return "no space left on device"
    return error.strerror or str(error) or type(error).__name__
