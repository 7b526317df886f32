"""One attempt's computation: read the inputs, (preprocess), conform, merge, write a slice.

Everything is computed against one observed chain state and written to one path (the
quarantine name the commit moves into the data store); nothing is committed here
(`node.ingest.commit`).

Memory: Append without preprocess streams record batches straight into the slice
writer (bounded by two Parquet row groups, see `node.ingest.writer`), read on a thread
at most `node.ingest.prefetch.PREFETCH_ITEMS` batches ahead. Other strategies and
preprocess hold the new input in memory; keyed strategies also load the needed columns
of the existing slices to derive the current state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa

from fbs.model import (
    DatasetVocabulary,
    MergeStrategy,
    MergeStrategyAppend,
    ReadStep,
    SetDataSchema,
    Timestamp,
    Transform,
)
from node.ingest.conform import (
    conform,
    dataset_arrow_schema,
    schema_change,
    schema_event,
    system_columns,
    with_event_time,
)
from node.ingest.dataset_reads import read_changelog, read_live_state, vocab_of
from node.ingest.errors import SchemaError
from node.ingest.preprocess import EngineProvider, preprocess
from node.ingest.progress import Progress, ProgressUpdate
from node.ingest.writer import SliceWriter, WrittenSlice, slice_schema, write_slice
from storage.chain import ChainState
from storage.dataset import Dataset

__all__ = ["DEFAULT_BATCH_ROWS", "Input", "Plan", "Source", "compute"]

#: Rows per record batch read from an input file.
DEFAULT_BATCH_ROWS: Final = 65_536


@dataclass(frozen=True, slots=True)
class Input:
    """One input file and the event time of data without an event time column."""

    path: Path
    event_time: Timestamp | None


@dataclass(frozen=True, slots=True)
class Source:
    """The steps of the source an attempt reads through."""

    read: ReadStep
    preprocess: Transform | None
    merge: MergeStrategy


@dataclass(frozen=True, slots=True)
class Plan:
    """What one attempt computed against one head: the slice written and the schema to
    commit before it (either may be absent)."""

    slice: WrittenSlice | None
    schema_event: SetDataSchema | None


def _batches(
    read: ReadStep, path: Path, progress: Progress | None
) -> Generator[pa.RecordBatch, None, None]:
    """The record batches of ``path``, read on a thread ahead of the caller (`prefetched`)."""
    from node.ingest.prefetch import prefetched
    from node.ingest.read import read_batches

    rows = 0
    reading = prefetched(lambda: read_batches(read, path, batch_rows=DEFAULT_BATCH_ROWS))
    with contextlib.closing(reading) as batches:
        for batch in batches:
            rows += batch.num_rows
            if progress is not None:
                progress(ProgressUpdate("read", path.name, rows))
            yield batch


def _read_table(read: ReadStep, path: Path, progress: Progress | None) -> pa.Table:
    from node.ingest.read import read_schema

    batches = list(_batches(read, path, progress))
    if batches:
        return pa.Table.from_batches(batches)
    declared = read_schema(read)
    return (declared if declared is not None else pa.schema([])).empty_table()


def _prepared_inputs(
    src: Source,
    inputs: Sequence[Input],
    vocab: DatasetVocabulary,
    system_time: Timestamp,
    workdir: Path,
    engine: EngineProvider,
    progress: Progress | None,
) -> pa.Table:
    """Read (and preprocess) every input into one table with an event time column."""
    tables = []
    for n, item in enumerate(inputs):
        table = _read_table(src.read, item.path, progress)
        if src.preprocess is not None:
            table = preprocess(src.preprocess, table, workdir / f"pre-{n}", engine)
        tables.append(with_event_time(table, vocab, item.event_time or system_time))
    if not tables:
        return pa.table({})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(f"input files have incompatible schemas: {e}") from None


def compute(
    dataset: Dataset,
    state: ChainState | None,
    src: Source,
    inputs: Sequence[Input],
    system_time: Timestamp,
    workdir: Path,
    out: Path,
    engine: EngineProvider,
    progress: Progress | None,
) -> Plan:
    """Read, merge and write the new slice to ``out`` against ``state``."""
    vocab = vocab_of(state)
    target = dataset_arrow_schema(state)
    start = 0 if state is None or state.last_offset is None else state.last_offset + 1
    keep = [] if isinstance(src.merge, MergeStrategyAppend) else [vocab.operation_type_column]
    if isinstance(src.merge, MergeStrategyAppend) and src.preprocess is None:
        return _compute_streaming(src, inputs, vocab, target, start, system_time, out, progress)
    from node.ingest.merge import merge, primary_key_of, required_columns

    table = _prepared_inputs(src, inputs, vocab, system_time, workdir, engine, progress)
    table, evolved = conform(table, target, vocab, keep)
    if progress is not None:
        progress(ProgressUpdate("merge", rows=table.num_rows))
    existing = None
    needed = required_columns(src.merge, vocab)
    head = state.head if state else None
    key = primary_key_of(src.merge)
    if needed is None and key is not None:
        # Snapshot / UpsertStream only look at the current state: fold it slice by slice.
        existing = read_live_state(dataset, key, head=head, vocab=vocab)
    elif needed is None or needed:
        cols = None if needed is None else [*needed, vocab.operation_type_column]
        existing = read_changelog(dataset, head=head, columns=cols)
    merged = merge(src.merge, table, existing, vocab=vocab)
    new_schema = slice_schema(merged.schema, vocab)
    event = schema_change(target, evolved, new_schema)
    if merged.num_rows == 0:
        return Plan(None, event if target is None else None)
    if progress is not None:
        progress(ProgressUpdate("write", rows=merged.num_rows))
    written = write_slice(out, merged, start_offset=start, system_time=system_time, vocab=vocab)
    return Plan(written, event)


def _compute_streaming(
    src: Source,
    inputs: Sequence[Input],
    vocab: DatasetVocabulary,
    target: pa.Schema | None,
    start: int,
    system_time: Timestamp,
    out: Path,
    progress: Progress | None,
) -> Plan:
    writer: SliceWriter | None = None
    schema: pa.Schema | None = target
    evolved: pa.Schema | None = None
    try:
        for item in inputs:
            # Closed on any error: the read-ahead thread stops before the writer aborts.
            with contextlib.closing(_batches(src.read, item.path, progress)) as batches:
                for batch in batches:
                    table = with_event_time(
                        pa.Table.from_batches([batch]), vocab, item.event_time or system_time
                    )
                    table, ev = conform(table, schema, vocab, ())
                    if writer is None:
                        if schema is None:
                            # First data of the dataset: the first batch defines the schema.
                            schema = slice_schema(table.schema, vocab)
                            table, _ = conform(table, schema, vocab, ())
                        elif ev is not None:
                            evolved, schema = ev, ev
                            table, _ = conform(table, schema, vocab, ())
                        writer = SliceWriter(
                            out,
                            pa.schema([f for f in schema if f.name not in system_columns(vocab)]),
                            start_offset=start,
                            system_time=system_time,
                            vocab=vocab,
                        )
                    elif ev is not None:
                        known = set() if schema is None else set(schema.names)
                        raise SchemaError(
                            f"{item.path.name}: columns {[n for n in ev.names if n not in known]} "
                            "appear mid-file; split the input or declare them in the schema"
                        )
                    writer.write(table)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is None or writer.next_offset == start:
        if writer is not None:
            writer.abort()
        return Plan(None, None)
    written = writer.close()
    if progress is not None:
        progress(ProgressUpdate("write", rows=written.num_records))
    event = None
    if target is None:
        assert schema is not None
        event = schema_event(schema)
    elif evolved is not None:
        event = schema_event(evolved)
    return Plan(written, event)
