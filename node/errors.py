"""Errors raised by the `node` package (coordinator, CLI).

Tree::

    OdfError (fbs.errors)
    └── NodeError
        ├── UsageError         a command line or argument that cannot be acted on
        └── VerificationFailed a dataset failed verification (report attached)

CLI exit codes (see `node.cli`):
    0 success, 1 internal error, 2 usage error, 3 not found, 4 invalid input
    (malformed block/manifest/hash, refused append), 5 verification failed, 6 conflict
    (concurrent update lost compare-and-swap).
"""

from __future__ import annotations

from typing import Any

from fbs.errors import OdfError


class NodeError(OdfError):
    """Base class of coordinator/CLI errors."""


class UsageError(NodeError, ValueError):
    """A command or argument that cannot be acted on."""


class VerificationFailed(NodeError):
    """A dataset did not verify; `report` holds the structured findings."""

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report
