"""Errors raised by the `engine` package.

Tree::

    OdfError (fbs.errors)
    └── EngineError
        ├── InvalidQuery            the engine refused the query (bad SQL, bad output columns)
        ├── EngineInternalError     the engine failed while running a valid request
        │   ├── EngineProtocolError     a malformed / unexpected message on the engine stream
        │   └── CheckpointError         an unreadable or oversized transform checkpoint
        ├── EngineUnavailable       no engine reachable at the address (or it died starting)
        │   └── EngineTimeout       the call or the start-up did not finish in time
        └── EngineConfigError       bad engine settings (master URL, port, limits)
"""

from __future__ import annotations

from fbs.errors import ExitCategory, OdfError


class EngineError(OdfError):
    """Base class of the engine errors."""

    exit_category = ExitCategory.INTERNAL


class InvalidQuery(EngineError, ValueError):
    """The engine refused the query: SQL that does not parse/resolve, or bad output columns.

    Attributes:
        message: the engine's explanation (Spark's message for SQL errors).
    """

    exit_category = ExitCategory.INVALID

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EngineInternalError(EngineError):
    """The engine failed while running a request it accepted.

    Attributes:
        message: one-line description.
        backtrace: the engine-side traceback, when known.
    """

    def __init__(self, message: str, backtrace: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.backtrace = backtrace


class EngineProtocolError(EngineInternalError):
    """A message on the engine stream that does not decode, or a stream without a result."""


class CheckpointError(EngineInternalError):
    """A previous checkpoint that cannot be read, or a checkpoint exceeding a limit."""


class EngineUnavailable(EngineError):
    """No engine answers at the address, or the engine process died while starting."""

    exit_category = ExitCategory.UNAVAILABLE


class EngineTimeout(EngineUnavailable):
    """An engine call (or engine start-up) did not finish within its deadline."""


class EngineConfigError(EngineError, ValueError):
    """Invalid engine settings (master URL, port, limits)."""

    exit_category = ExitCategory.USAGE
