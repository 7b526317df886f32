"""How ingests and root pulls are shown: a progress display on a terminal, one summary."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node.ingest.pipeline import IngestResult, Progress

__all__ = ["ingest_progress", "ingest_summary"]


@contextlib.contextmanager
def ingest_progress(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress display on stderr while the block runs, when it is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    from node.ingest.pipeline import ProgressUpdate

    with RichProgress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.fields[rows]:>12,} rows"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("starting", rows=0)

        def report(u: ProgressUpdate) -> None:
            label = u.stage if u.file is None else f"{u.stage} {u.file}"
            bar.update(task, description=label, rows=u.rows)

        yield report


def ingest_summary(result: IngestResult, verb: str) -> None:
    """Print what an ingest (``verb`` "ingested") or a root pull ("pulled") committed."""
    if result.up_to_date:
        print("Up to date: nothing new at the source")
        return
    if result.duplicate_input:
        print("Nothing ingested: this input was already ingested through this source")
        print("(the last commit recorded its digest; use --allow-duplicate to ingest it again)")
        return
    if result.empty_input:
        print("Nothing to ingest: the input holds no records")
        return
    if not result.committed:
        print(f"Nothing {verb}: no new records")
        return
    iv = result.offset_interval
    span = f" (offsets {iv.start}..{iv.end})" if iv is not None else ""
    wm = f", watermark {result.new_watermark}" if result.new_watermark is not None else ""
    schema = ", schema set" if result.schema_committed else ""
    print(f"{verb.capitalize()} {result.num_records} record(s){span}{wm}{schema}")
    print(f"New head: {result.new_head}")
