"""Progress reports of an ingest or pull: one `ProgressUpdate` per step, to a callback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Progress", "ProgressUpdate"]


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """One progress report: ``stage`` (fetch/read/merge/write/commit), counters."""

    stage: str
    file: str | None = None
    rows: int = 0
    bytes_done: int | None = None
    bytes_total: int | None = None


Progress = Callable[[ProgressUpdate], None]
