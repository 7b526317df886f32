"""Ingest and root pulls: new data through a root dataset's push or polling source.

Exactly once: an identical re-run commits nothing. Nothing is committed on failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from engine.client import EngineClient
    from fbs.timestamp import Timestamp
    from node.ingest.pipeline import IngestResult, Progress
    from storage.dataset import Dataset
    from storage.workspace import Workspace

__all__ = ["IngestOptions", "ingest", "ingest_into", "pull_root", "pull_root_into"]


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """How to read and commit the input.

    Attributes:
        source_name: the push source (default: the dataset's only one).
        event_time: the event time of records that carry none.
        input_format: read the input as this format, not the source's declared one.
        allow_duplicate: ingest even an input equal to the last one through the source.
    """

    source_name: str | None = None
    event_time: Timestamp | None = None
    input_format: str | None = None
    allow_duplicate: bool = False


def ingest(
    ws: Workspace,
    dataset: str,
    source: Sequence[Path | str] | IO[bytes],
    options: IngestOptions = IngestOptions(),
    progress: Progress | None = None,
) -> IngestResult:
    """Push files or a byte stream into the root dataset ``dataset`` of ``ws``.

    Raises:
        DatasetNotFound: no such dataset.
        IngestError: see `node.ingest.pipeline.ingest`.
    """
    from node.ingest.memory import use_ingest_memory_pool

    use_ingest_memory_pool()
    return ingest_into(ws.get(dataset), source, options, progress=progress)


def ingest_into(
    ds: Dataset,
    source: Sequence[Path | str] | IO[bytes],
    options: IngestOptions = IngestOptions(),
    *,
    engine: EngineClient | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """`ingest` into an open dataset (the HTTP API's push ingest, the Python API).

    Raises:
        ReplicaReadOnly: a replica (`node.ownership`): only its publisher ingests.
    """
    from node.ingest.pipeline import ingest as run_ingest
    from node.ownership import require_owned_dataset

    require_owned_dataset(ds, action="ingest into it")

    return run_ingest(
        ds,
        source,
        source_name=options.source_name,
        event_time=options.event_time,
        input_format=options.input_format,
        allow_duplicate=options.allow_duplicate,
        engine=engine,
        workdir=workdir,
        progress=progress,
    )


def pull_root(
    ws: Workspace,
    dataset: str,
    set_watermark: Timestamp | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Poll the root dataset's polling source once (``set_watermark``: commit only that).

    Raises:
        SourceNotFound: the dataset has no polling source.
        IngestError: see `node.ingest.pipeline.pull`.
    """
    from node.ingest.memory import use_ingest_memory_pool

    use_ingest_memory_pool()
    return pull_root_into(ws.get(dataset), set_watermark, progress=progress)


def pull_root_into(
    ds: Dataset,
    set_watermark: Timestamp | None = None,
    *,
    engine: EngineClient | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """`pull_root` of an open dataset (the Python API).

    Raises:
        ReplicaReadOnly: a replica (`node.ownership`): its publisher polls its source.
    """
    from node.ingest.pipeline import pull
    from node.ownership import require_owned_dataset

    require_owned_dataset(ds, action="poll its source or set its watermark")

    return pull(ds, set_watermark=set_watermark, engine=engine, progress=progress)
