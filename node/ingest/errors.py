"""Errors raised by the ingest pipeline (`node.ingest`).

Tree::

    NodeError (node.errors)
    └── IngestError
        ├── ReadError           a source file that cannot be read as declared
        │                       (names the file and, where known, line and column)
        ├── SchemaError         a declared or derived schema that cannot be used
        ├── FetchError          a source that cannot be fetched
        │   ├── SourceUnreachable   a URL/path that cannot be reached (names it)
        │   └── ToolMissing         an external tool (podman/docker) is not installed
        ├── PrepareError        a prepare step (decompress, pipe) failed
        ├── MergeError          input that a merge strategy cannot merge
        ├── UnsupportedFormat   a fetch/read/prepare kind this node does not implement
        ├── PreprocessError     the preprocess SQL failed on the engine (names the query error)
        └── SourceNotFound      no push/polling source of that name (or none at all)
"""

from __future__ import annotations

from pathlib import Path

from fbs.errors import ExitCategory
from node.errors import NodeError


class IngestError(NodeError):
    """Base class of ingest errors."""

    exit_category = ExitCategory.INVALID


class ReadError(IngestError, ValueError):
    """A source file that cannot be read as declared.

    Attributes:
        path: the file being read (None for in-memory input).
        line: 1-based line number where the problem is, when the format has lines and the
            reader knows it.
        column: the offending column name, when known.
        reason: what is wrong.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: Path | str | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)
        self.path = path
        self.line = line
        self.column = column
        self.reason = reason


class SchemaError(IngestError, ValueError):
    """A declared or derived schema that cannot be used (bad DDL, refused evolution)."""


class FetchError(IngestError):
    """A source that cannot be fetched."""


class SourceUnreachable(FetchError):
    """A URL or path that cannot be reached; the message names it."""

    exit_category = ExitCategory.UNAVAILABLE


class ToolMissing(FetchError):
    """An external tool needed by a step (e.g. podman or docker) is not installed."""


class PrepareError(IngestError):
    """A prepare step (decompress, pipe) failed."""


class MergeError(IngestError, ValueError):
    """Input that a merge strategy cannot merge (missing key columns, bad ``op`` values)."""


class UnsupportedFormat(IngestError):
    """A fetch/prepare/read kind this node does not implement."""


class PreprocessError(IngestError):
    """The preprocess transform failed on the engine (invalid SQL, engine error)."""


class SourceNotFound(IngestError):
    """A dataset without the push/polling source an ingest asked for."""

    exit_category = ExitCategory.NOT_FOUND
