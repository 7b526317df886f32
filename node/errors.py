"""Errors raised by the `node` package (coordinator, CLI).

Tree::

    OdfError (fbs.errors)
    └── NodeError
        ├── UsageError         a command line or argument that cannot be acted on
        │   └── AmbiguousRemote   several pull/push aliases and no URL given
        ├── VerificationFailed a dataset failed verification (report attached)
        ├── ReplicaReadOnly    a local append to a dataset whose key this node does not hold
        ├── TransformError     a derivative dataset cannot be brought up to date
        │   ├── NotDerivative          the dataset has no SetTransform
        │   ├── InputNotReady          an input is missing or has no data schema yet
        │   ├── InputHistoryDiverged   a consumed input block is no longer in its chain
        │   ├── IncompatibleSchema     the output schema differs from the dataset's
        │   └── DependencyCycle        derivative inputs form a cycle
        └── EngineManagerError an engine that cannot be located, started or reused
            └── EngineSettingsError  invalid engine settings (address, idle timeout)

Each class carries its failure category (``exit_category``, `fbs.errors.ExitCategory`);
`node.error_contract.OUTCOMES` gives the category's exit code and HTTP status: 0 success,
1 internal error, 2 usage error, 3 not found, 4 invalid input (malformed block/manifest/
hash, refused append), 5 verification failed, 6 conflict (concurrent update lost
compare-and-swap), 7 unavailable (the engine or a source cannot be reached).
"""

from __future__ import annotations

from typing import Any

from fbs.errors import ExitCategory, OdfError


class NodeError(OdfError):
    """Base class of coordinator/CLI errors."""

    exit_category = ExitCategory.INTERNAL


class UsageError(NodeError, ValueError):
    """A command or argument that cannot be acted on."""

    exit_category = ExitCategory.USAGE


class AmbiguousRemote(UsageError):
    """A dataset with several pull (or push) aliases, pulled or pushed without a URL."""


class VerificationFailed(NodeError):
    """A dataset did not verify; `report` holds the structured findings."""

    exit_category = ExitCategory.VERIFICATION_FAILED

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


class TransformError(NodeError):
    """A derivative dataset cannot be brought up to date (nothing was committed)."""

    exit_category = ExitCategory.INVALID


class NotDerivative(TransformError):
    """The dataset has no SetTransform: it is not a derivative dataset."""


class InputNotReady(TransformError):
    """A transform input is not in the workspace or has no data schema yet."""

    exit_category = ExitCategory.NOT_FOUND


class InputHistoryDiverged(TransformError):
    """A block the derivative already consumed is no longer in its input's chain."""

    exit_category = ExitCategory.CONFLICT


class IncompatibleSchema(TransformError):
    """The transform's output schema is not the dataset's current schema."""


class DependencyCycle(TransformError):
    """Derivative datasets whose inputs form a cycle."""


class ReplicaReadOnly(NodeError):
    """A local append (ingest, transform run, watermark) to a replica: a dataset whose key
    this workspace does not hold (`node.ownership`). Refused, not a conflict: nothing
    raced, the rule forbids it whatever the state (exit 4, HTTP 422)."""

    exit_category = ExitCategory.REFUSED


class DatasetInUse(NodeError):
    """A dataset another dataset's transform takes as an input: deleting it would leave that
    transform with an input that is gone."""

    exit_category = ExitCategory.CONFLICT


class EngineManagerError(NodeError):
    """An engine that cannot be located, started or reused (see `node.engine_manager`)."""

    exit_category = ExitCategory.UNAVAILABLE


class EngineSettingsError(EngineManagerError, ValueError):
    """Invalid engine settings in the environment or the workspace config (a usage error,
    not an engine that is unavailable)."""

    exit_category = ExitCategory.USAGE
