"""The ingest pipeline: input files → merged slice → ``SetDataSchema`` / ``AddData`` commits.

Push ingest (`ingest`): files or a byte stream are read with the push source's read
step. Polling ingest (`pull`): fetch → prepare → read with the polling source. Both
then run the optional preprocess SQL on the Spark engine (`PreprocessEngine`, started on
demand and reused; ingest without preprocess never starts it), add the event time when
the data has none, conform the data to the dataset schema, merge, write one slice and
commit.

Commit protocol and exactly-once: every output (slice file, hashes, offsets, watermark,
source state) is computed against one observed head; the data and the new source state
land together in a single ``AddData`` moved in by compare-and-swap on ``refs/head``.
Before the first data (or when optional columns are added) a ``SetDataSchema`` is
committed first; re-running after a crash between the two finds the schema already in
place and commits the data. A crash at any earlier point leaves the head unchanged, so a
re-run fetches and ingests the same input again; a crash after the CAS leaves the new
source state in place, so a re-run of a polling source finds nothing new. If another
writer moved the head, everything is recomputed on the new head (up to
`MAX_COMMIT_ATTEMPTS`). Bad input raises before anything is committed. A push ingest
whose input holds no records (empty file or stream, header only) commits nothing at all
(``IngestResult.empty_input``). Every block is encoded and read back under the decode
limits before anything is stored (`storage.dataset.Dataset.commit_events`).

Schema rules: the first data defines the schema (system columns + the data columns, from
`fbs.arrow_schema.data_schema_from_arrow`, encoding attributes stripped). Later data may
omit optional columns (filled with nulls) and add new nullable columns (a new
``SetDataSchema`` with the columns appended); a column whose values cannot be cast to
the dataset's type, a missing required column or a new required column is refused with
`SchemaError`.

Watermark: the maximum of the previous watermark and the newest event time (dates count
as midnight UTC), unless set explicitly (`pull` with ``set_watermark``), which commits a
watermark-only ``AddData`` and must not move the watermark back.

Memory: Append without preprocess streams record batches straight into the slice
writer (bounded by two Parquet row groups, see `node.ingest.writer`), read on a thread
at most `node.ingest.prefetch.PREFETCH_ITEMS` batches ahead. Other strategies
and preprocess hold the new input in memory; keyed strategies also load the needed
columns of the existing slices to derive the current state.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fbs.arrow_values import int_scalar
from fbs.model import (
    AddData,
    AddPushSource,
    DatasetVocabulary,
    MergeStrategy,
    MergeStrategyAppend,
    Multihash,
    OffsetInterval,
    ReadStep,
    ReadStepCsv,
    ReadStepEsriShapefile,
    ReadStepGeoJson,
    ReadStepJson,
    ReadStepNdGeoJson,
    ReadStepNdJson,
    ReadStepParquet,
    SetDataSchema,
    SetPollingSource,
    SourceState,
    Timestamp,
    Transform,
)
from node.ingest.errors import (
    IngestError,
    PreprocessError,
    ReadError,
    SchemaError,
    SourceNotFound,
    UnsupportedFormat,
)
from node.ingest.writer import (
    DEFAULT_VOCAB,
    SliceWriter,
    WrittenSlice,
    slice_schema,
    write_slice,
)
from storage.chain import ChainState
from storage.dataset import Dataset, PendingEvent
from storage.errors import RefCASFailed

if TYPE_CHECKING:
    from engine.client import EngineClient
    from engine.process import EngineProcess
    from storage.verified import SliceSource

__all__ = [
    "INPUT_FORMATS",
    "MAX_COMMIT_ATTEMPTS",
    "IngestResult",
    "PreprocessEngine",
    "Progress",
    "ProgressUpdate",
    "ingest",
    "pull",
    "read_changelog",
    "read_live_state",
    "slice_paths",
    "vocab_of",
]

#: Attempts when another writer keeps moving the head between compute and commit.
MAX_COMMIT_ATTEMPTS: Final = 8
#: Rows per record batch read from an input file.
DEFAULT_BATCH_ROWS: Final = 65_536
#: Bytes copied per step when spooling a stream to a file.
SPOOL_CHUNK: Final = 1 << 20

#: ``--input-format`` names (and media types) → read step class.
INPUT_FORMATS: Final[dict[str, type[ReadStep]]] = {
    "csv": ReadStepCsv,
    "text/csv": ReadStepCsv,
    "json": ReadStepJson,
    "application/json": ReadStepJson,
    "ndjson": ReadStepNdJson,
    "application/x-ndjson": ReadStepNdJson,
    "geojson": ReadStepGeoJson,
    "application/geo+json": ReadStepGeoJson,
    "ndgeojson": ReadStepNdGeoJson,
    "application/x-ndgeojson": ReadStepNdGeoJson,
    "parquet": ReadStepParquet,
    "application/vnd.apache.parquet": ReadStepParquet,
    "esrishapefile": ReadStepEsriShapefile,
    "shapefile": ReadStepEsriShapefile,
}


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """One progress report: ``stage`` (fetch/read/merge/write/commit), counters."""

    stage: str
    file: str | None = None
    rows: int = 0
    bytes_done: int | None = None
    bytes_total: int | None = None


Progress = Callable[[ProgressUpdate], None]


@dataclass(frozen=True, slots=True)
class IngestResult:
    """Outcome of one ingest or pull.

    Attributes:
        old_head / new_head: heads before and after (equal if nothing was committed).
        num_records: records appended.
        offset_interval: offsets of the new records (``None`` if none).
        new_watermark: the watermark committed (``None`` if none was committed).
        schema_committed: a ``SetDataSchema`` block was committed.
        up_to_date: a polling source reported nothing new (nothing committed).
        duplicate_input: a push ingest whose input is identical to the last one committed
            through that source; nothing was committed (see `PUSH_INPUT_STATE_KIND`).
        empty_input: a push ingest whose input holds no records (an empty file or
            stream, a CSV with only a header...); nothing was committed.
        blocks: hashes of the committed blocks, oldest first.
    """

    old_head: Multihash | None
    new_head: Multihash | None
    num_records: int = 0
    offset_interval: OffsetInterval | None = None
    new_watermark: Timestamp | None = None
    schema_committed: bool = False
    up_to_date: bool = False
    duplicate_input: bool = False
    empty_input: bool = False
    blocks: tuple[Multihash, ...] = field(default_factory=tuple)

    @property
    def committed(self) -> bool:
        """True when at least one block was committed."""
        return bool(self.blocks)


# -- preprocess engine -------------------------------------------------------------------------


class PreprocessEngine:
    """The Spark engine used for preprocess queries, started on first use and reused.

    Args:
        address: ``host:port`` of a running engine; ``None`` starts one
            (`engine.process.start_engine_process`) on the first query.
    """

    def __init__(self, address: str | None = None) -> None:
        self._address = address
        self._process: EngineProcess | None = None
        self._client: EngineClient | None = None

    @property
    def started(self) -> bool:
        """True once an engine connection exists."""
        return self._client is not None

    def _ensure(self) -> EngineClient:
        if self._client is None:
            from engine.client import EngineClient

            if self._address is None:
                from engine.process import start_engine_process

                self._process = start_engine_process()
                self._address = self._process.address
            self._client = EngineClient(self._address)
        return self._client

    def run(self, transform: Transform, inputs: Sequence[Path], output: Path) -> None:
        """Run ``transform`` over the Parquet ``inputs`` (view ``input``) into ``output``.

        Raises:
            PreprocessError: invalid SQL or an engine failure (the message says which).
        """
        from engine.client import raise_for_result
        from engine.errors import EngineError
        from fbs.model import RawQueryRequest
        from fbs.rules import normalize_transform

        request = RawQueryRequest(
            input_data_paths=tuple(str(p) for p in inputs),
            transform=normalize_transform(transform),
            output_data_path=str(output),
        )
        try:
            raise_for_result(self._ensure().execute_raw_query(request))
        except EngineError as e:
            raise PreprocessError(f"preprocess query failed: {e}") from None

    def close(self) -> None:
        """Close the connection and stop the engine this object started."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is not None:
            self._process.stop()
            self._process = None

    def __enter__(self) -> PreprocessEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- reading existing data ---------------------------------------------------------------------


def vocab_of(state: ChainState | None) -> DatasetVocabulary:
    """The dataset vocabulary: the SetVocab's names over the defaults."""
    base = DatasetVocabulary()
    v = None if state is None else state.vocab
    if v is None:
        return base
    return DatasetVocabulary(
        offset_column=v.offset_column or base.offset_column,
        operation_type_column=v.operation_type_column or base.operation_type_column,
        system_time_column=v.system_time_column or base.system_time_column,
        event_time_column=v.event_time_column or base.event_time_column,
    )


def slice_paths(dataset: Dataset, head: Multihash | None = None) -> list[Path]:
    """Data files of every ``new_data`` up to ``head`` (default: the current head), oldest first,
    each checked against its block's size and physical hash (`storage.verified`).

    Raises:
        CorruptChain / ObjectNotFound: an unreadable chain or a missing data file.
        DamagedObject: a data file that differs from its metadata.
    """
    from storage.reads import verified_slice_paths

    return verified_slice_paths(dataset, head)


def _open_slice(src: SliceSource) -> pq.ParquetFile:
    """The verified slice as Parquet (`storage.reads.open_slice`)."""
    from storage.reads import open_slice

    return open_slice(src)


def read_changelog(
    dataset: Dataset,
    *,
    head: Multihash | None = None,
    columns: Sequence[str] | None = None,
    schema: pa.Schema | None = None,
) -> pa.Table | None:
    """All records up to ``head`` as one table (``None`` if there are none).

    Slices written under older schemas get the newer columns as nulls.

    Raises:
        storage.errors.InvalidDataFile: a data file that is not readable Parquet.
        storage.errors.DamagedObject / ObjectNotFound: a damaged or missing data file.
    """
    from storage.reads import iter_slice_sources, read_slices

    table = read_slices(iter_slice_sources(dataset, head), columns)
    if table is None:
        return None
    if schema is not None:
        wanted = [f for f in schema if columns is None or f.name in columns]
        cols = [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in wanted
        ]
        table = pa.table(cols, names=[f.name for f in wanted])
    return table


def read_live_state(
    dataset: Dataset,
    primary_key: Sequence[str],
    *,
    head: Multihash | None = None,
    vocab: DatasetVocabulary = DEFAULT_VOCAB,
) -> pa.Table | None:
    """The live rows of a keyed dataset up to ``head`` (``None`` if it has no records).

    Slices are folded in one at a time (state = live rows of state + slice), so memory
    is bounded by the live state plus one slice, not by the whole history; the result
    equals `current_state` of the full changelog.

    Raises:
        storage.errors.InvalidDataFile: a data file that is not readable Parquet.
        MergeError: a slice without the key, ``offset`` or ``op`` columns.
    """
    from node.ingest.merge import current_state  # only keyed merges: not on an Append's path
    from storage.errors import InvalidDataFile
    from storage.reads import iter_slice_sources

    state: pa.Table | None = None
    for src in iter_slice_sources(dataset, head):
        try:
            table = _open_slice(src).read(use_threads=True)
        except (pa.ArrowException, OSError) as e:
            raise InvalidDataFile(f"data file {src.path.name}: {e}") from None
        if state is not None:
            table = pa.concat_tables([state, table], promote_options="permissive")
        state = current_state(table, primary_key, vocab=vocab)
    return state


# -- schema ------------------------------------------------------------------------------------


def _dataset_arrow_schema(state: ChainState | None) -> pa.Schema | None:
    if state is None or state.data_schema is None or state.data_schema.schema is None:
        return None
    from fbs.arrow_schema import arrow_schema_from_data

    return arrow_schema_from_data(state.data_schema.schema)


def _with_event_time(table: pa.Table, vocab: DatasetVocabulary, value: Timestamp) -> pa.Table:
    et = vocab.event_time_column
    if et in table.column_names:
        col = table.column(et)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            # Untyped input (no declared schema): event times as ISO-8601 text.
            try:
                col = pc.cast(col, pa.timestamp("ms", "UTC"))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"event time column {et!r} is not ISO-8601 text: {e}") from None
            i = table.column_names.index(et)
            return table.set_column(i, pa.field(et, col.type), col)
        return table
    ms = value.nanos // 1_000_000
    col = pa.repeat(int_scalar(ms, pa.timestamp("ms", "UTC")), table.num_rows)
    return table.add_column(0, pa.field(et, pa.timestamp("ms", "UTC"), nullable=False), col)


def _conform(
    table: pa.Table, target: pa.Schema | None, vocab: DatasetVocabulary, keep: Sequence[str]
) -> tuple[pa.Table, pa.Schema | None]:
    """Cast ``table`` to the dataset's data columns; returns it and an evolved schema, if any.

    ``keep`` names input-only columns (``op`` of changelog/upsert input) left untouched.

    Raises:
        SchemaError: uncastable column, missing required column, new required column.
    """
    if target is None:
        return table, None
    system = {vocab.offset_column, vocab.operation_type_column, vocab.system_time_column}
    data_fields = [f for f in target if f.name not in system]
    cols: list[pa.ChunkedArray | pa.Array] = []
    fields: list[pa.Field] = []
    for f in data_fields:
        if f.name in table.column_names:
            col = table.column(f.name)
            if col.type != f.type:
                try:
                    col = pc.cast(col, f.type, safe=f.name != vocab.event_time_column)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SchemaError(
                        f"column {f.name!r}: values of type {col.type} do not fit the "
                        f"dataset type {f.type}: {e}"
                    ) from None
        elif f.nullable:
            col = pa.nulls(table.num_rows, f.type)
        else:
            raise SchemaError(f"input lacks the required column {f.name!r}")
        cols.append(col)
        fields.append(f)
    known = {f.name for f in target}
    added = [f for f in table.schema if f.name not in known and f.name not in keep]
    if added:
        _check_evolution(target, pa.schema([*target, *added]))
    for f in added:
        cols.append(table.column(f.name))
        fields.append(f)
    for name in keep:
        if name in table.column_names:
            cols.append(table.column(name))
            fields.append(table.schema.field(name))
    conformed = pa.table(cols, schema=pa.schema(fields))
    evolved = pa.schema([*target, *added]) if added else None
    return conformed, evolved


def _check_evolution(target: pa.Schema, evolved: pa.Schema) -> None:
    """Apply rule 12 (`fbs.rules.schema_change_problem`) to the columns the input adds.

    Raises:
        SchemaError: a new required column (or another change rule 12 refuses).
    """
    from fbs.arrow_schema import data_schema_from_arrow
    from fbs.rules import schema_change_problem

    problem = schema_change_problem(
        data_schema_from_arrow(target, strip_encoding=True),
        data_schema_from_arrow(evolved, strip_encoding=True),
    )
    if problem is None:
        return
    if problem.kind == "added-required":
        raise SchemaError(f"new column {problem.field!r} must be optional (nullable) to be added")
    raise SchemaError(f"the input cannot evolve the dataset schema: {problem}")


def _schema_event(schema: pa.Schema) -> SetDataSchema:
    from fbs.arrow_schema import data_schema_from_arrow

    return SetDataSchema(schema=data_schema_from_arrow(schema, strip_encoding=True))


# -- sources -----------------------------------------------------------------------------------


def _push_source(state: ChainState | None, name: str | None) -> AddPushSource:
    sources = () if state is None else state.push_sources
    if not sources:
        raise SourceNotFound("dataset has no push source (add one with AddPushSource)")
    if name is None:
        if len(sources) > 1:
            names = ", ".join(s.source_name for s in sources)
            raise SourceNotFound(f"dataset has several push sources ({names}); pick one by name")
        return sources[0]
    for s in sources:
        if s.source_name == name:
            return s
    names = ", ".join(s.source_name for s in sources)
    raise SourceNotFound(f"no push source {name!r} (sources: {names})")


def _override_format(read: ReadStep, input_format: str | None) -> ReadStep:
    if input_format is None:
        return read
    cls = INPUT_FORMATS.get(input_format.strip().lower())
    if cls is None:
        raise UnsupportedFormat(
            f"unknown input format {input_format!r} (known: {', '.join(sorted(INPUT_FORMATS))})"
        )
    if isinstance(read, cls):
        return read
    ddl, schema = read.ddl_schema, read.schema
    if cls is ReadStepCsv:
        # A pushed CSV file is expected to carry a header line.
        return ReadStepCsv(ddl_schema=ddl, schema=schema, header=True)
    return cls(ddl_schema=ddl, schema=schema)


# -- the core ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Input:
    path: Path
    event_time: Timestamp | None


@dataclass(frozen=True, slots=True)
class _Source:
    read: ReadStep
    preprocess: Transform | None
    merge: MergeStrategy


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
    src: _Source,
    inputs: Sequence[_Input],
    vocab: DatasetVocabulary,
    system_time: Timestamp,
    workdir: Path,
    engine: PreprocessEngine | None,
    progress: Progress | None,
) -> pa.Table:
    """Read (and preprocess) every input into one table with an event time column."""
    tables = []
    for n, item in enumerate(inputs):
        table = _read_table(src.read, item.path, progress)
        if src.preprocess is not None:
            table = _preprocess(src.preprocess, table, workdir / f"pre-{n}", engine)
        tables.append(_with_event_time(table, vocab, item.event_time or system_time))
    if not tables:
        return pa.table({})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(f"input files have incompatible schemas: {e}") from None


def _preprocess(
    transform: Transform, table: pa.Table, workdir: Path, engine: PreprocessEngine | None
) -> pa.Table:
    if engine is None:
        raise PreprocessError("the source has a preprocess step but no engine was provided")
    workdir.mkdir(parents=True, exist_ok=True)
    src, out = workdir / "input.parquet", workdir / "output.parquet"
    pq.write_table(table, src, coerce_timestamps="ms", allow_truncated_timestamps=True)
    engine.run(transform, [src], out)
    try:
        return pq.read_table(out)
    except (pa.ArrowException, OSError) as e:
        raise PreprocessError(f"preprocess output is not readable: {e}") from None


@dataclass(slots=True)
class _Plan:
    """What one attempt computed against one head."""

    slice: WrittenSlice | None
    schema_event: SetDataSchema | None


def _compute(
    dataset: Dataset,
    state: ChainState | None,
    src: _Source,
    inputs: Sequence[_Input],
    system_time: Timestamp,
    workdir: Path,
    out: Path,
    engine: PreprocessEngine | None,
    progress: Progress | None,
) -> _Plan:
    """Read, merge and write the new slice to ``out`` against ``state``."""
    vocab = vocab_of(state)
    target = _dataset_arrow_schema(state)
    start = 0 if state is None or state.last_offset is None else state.last_offset + 1
    keep = [] if isinstance(src.merge, MergeStrategyAppend) else [vocab.operation_type_column]
    if isinstance(src.merge, MergeStrategyAppend) and src.preprocess is None:
        return _compute_streaming(src, inputs, vocab, target, start, system_time, out, progress)
    from node.ingest.merge import merge, primary_key_of, required_columns

    table = _prepared_inputs(src, inputs, vocab, system_time, workdir, engine, progress)
    table, evolved = _conform(table, target, vocab, keep)
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
    schema_event = _schema_change(target, evolved, new_schema)
    if merged.num_rows == 0:
        return _Plan(None, schema_event if target is None else None)
    if progress is not None:
        progress(ProgressUpdate("write", rows=merged.num_rows))
    written = write_slice(out, merged, start_offset=start, system_time=system_time, vocab=vocab)
    return _Plan(written, schema_event)


def _schema_change(
    target: pa.Schema | None, evolved: pa.Schema | None, new_schema: pa.Schema
) -> SetDataSchema | None:
    if target is None:
        return _schema_event(new_schema)
    if evolved is not None:
        return _schema_event(evolved)
    return None


def _compute_streaming(
    src: _Source,
    inputs: Sequence[_Input],
    vocab: DatasetVocabulary,
    target: pa.Schema | None,
    start: int,
    system_time: Timestamp,
    out: Path,
    progress: Progress | None,
) -> _Plan:
    writer: SliceWriter | None = None
    schema: pa.Schema | None = target
    evolved: pa.Schema | None = None
    try:
        for item in inputs:
            # Closed on any error: the read-ahead thread stops before the writer aborts.
            with contextlib.closing(_batches(src.read, item.path, progress)) as batches:
                for batch in batches:
                    table = _with_event_time(
                        pa.Table.from_batches([batch]), vocab, item.event_time or system_time
                    )
                    table, ev = _conform(table, schema, vocab, ())
                    if writer is None:
                        if schema is None:
                            # First data of the dataset: the first batch defines the schema.
                            schema = slice_schema(table.schema, vocab)
                            table, _ = _conform(table, schema, vocab, ())
                        elif ev is not None:
                            evolved, schema = ev, ev
                            table, _ = _conform(table, schema, vocab, ())
                        writer = SliceWriter(
                            out,
                            pa.schema([f for f in schema if f.name not in _system(vocab)]),
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
        return _Plan(None, None)
    written = writer.close()
    if progress is not None:
        progress(ProgressUpdate("write", rows=written.num_records))
    schema_event = None
    if target is None:
        assert schema is not None
        schema_event = _schema_event(schema)
    elif evolved is not None:
        schema_event = _schema_event(evolved)
    return _Plan(written, schema_event)


def _system(vocab: DatasetVocabulary) -> set[str]:
    return {vocab.offset_column, vocab.operation_type_column, vocab.system_time_column}


def _watermark(
    state: ChainState | None, written: WrittenSlice | None, explicit: Timestamp | None
) -> Timestamp | None:
    prev = None if state is None else state.last_watermark
    if explicit is not None:
        if prev is not None and explicit < prev:
            raise IngestError(f"watermark {explicit} is before the current watermark {prev}")
        return explicit
    newest = None if written is None else written.max_event_time
    if newest is None:
        return prev
    return newest if prev is None or newest > prev else prev


def _commit_plan(
    dataset: Dataset,
    head: Multihash | None,
    state: ChainState | None,
    plan: _Plan,
    source_state: SourceState | None,
    explicit_watermark: Timestamp | None,
    system_time: Timestamp,
) -> IngestResult:
    # SetDataSchema changes none of the fields an AddData is built from (offsets,
    # checkpoint, watermark, source state), so both are planned against ``state``.
    events: list[PendingEvent] = []
    if plan.schema_event is not None:
        events.append(PendingEvent(plan.schema_event))
    written = plan.slice
    has_data = written is not None and written.num_records > 0
    watermark = _watermark(state, written, explicit_watermark)
    prev_wm = None if state is None else state.last_watermark
    source_changed = source_state is not None and (
        state is None or state.last_source_state != source_state
    )
    added = has_data or source_changed or watermark != prev_wm
    if added:
        event = AddData(
            prev_checkpoint=None if state is None else state.last_checkpoint,
            prev_offset=None if state is None else state.last_offset,
            new_data=written.data_slice() if has_data and written is not None else None,
            new_watermark=watermark,
            new_source_state=source_state if source_changed else None,
        )
        data_file = written.path if has_data and written is not None else None
        # The slice was written into the data store's quarantine and hashed as written:
        # the commit moves it in (no copy, no second hash).
        digest = written.physical_hash.digest if has_data and written is not None else None
        events.append(PendingEvent(event, data_file, data_digest=digest))
    if not events:
        return IngestResult(head, head)
    # One head move: a refused AddData leaves no SetDataSchema behind either.
    results = dataset.commit_events(events, system_time=system_time, expected_head=head)
    return IngestResult(
        old_head=head,
        new_head=results[-1].new_head,
        num_records=written.num_records if has_data and written is not None else 0,
        offset_interval=written.offset_interval if has_data and written is not None else None,
        new_watermark=watermark if added else None,
        schema_committed=plan.schema_event is not None,
        blocks=tuple(r.new_head for r in results),
    )


@contextlib.contextmanager
def _workdir(parent: Path | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="odf-ingest-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _quarantined_slice(dataset: Dataset) -> Iterator[Path]:
    """Where one attempt writes its slice: a quarantine name in the dataset's data store.

    The commit moves the file from there into the store (same directory: a rename, no
    copy). Whatever is still there at exit (nothing was committed, or the head moved) is
    removed; a killed process leaves a ``.pending-*`` file that ``odf gc`` removes.
    """
    path = dataset.layout.data.quarantine_path()
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _engine_scope(
    engine: PreprocessEngine | None, needed: bool
) -> Iterator[PreprocessEngine | None]:
    if engine is not None or not needed:
        yield engine
        return
    own = PreprocessEngine()
    try:
        yield own
    finally:
        own.close()


#: Source-state kind recording a digest of the last push input (our own kind: the
#: ``odf/`` prefix is reserved for the spec). It makes push ingest exactly-once: a run
#: killed after its commit and re-run with the same input commits nothing the second
#: time. The value is ``sha256:<hex>`` over the source name, the input format and the
#: input bytes (an idempotency key, never an address; SHA-256 runs on the CPU's SHA
#: instructions, several times faster than SHA3 or blake2b here). Keys recorded before
#: as ``blake2b-256:<hex>`` are still recognised.
PUSH_INPUT_STATE_KIND: Final = "odf-node/push-input"
#: The algorithm of new push input keys, and the value prefix of each one accepted.
PUSH_INPUT_KEY_ALGORITHM: Final = "sha256"
_KEY_PREFIXES: Final = {"sha256": "sha256:", "blake2b-256": "blake2b-256:"}
_INPUT_KEY_CHUNK: Final = 1 << 20


def push_input_key(
    source_name: str,
    paths: Sequence[Path],
    input_format: str | None,
    *,
    algorithm: str = PUSH_INPUT_KEY_ALGORITHM,
) -> str:
    """The idempotency key of a push ingest (see `PUSH_INPUT_STATE_KIND`).

    Raises:
        KeyError: an ``algorithm`` not in `_KEY_PREFIXES`.
    """
    prefix = _KEY_PREFIXES[algorithm]
    h = hashlib.sha256() if algorithm == "sha256" else hashlib.blake2b(digest_size=32)
    for part in (source_name, input_format or ""):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    # One buffer read into again and again: no new bytes object per chunk.
    buffer = bytearray(_INPUT_KEY_CHUNK)
    view = memoryview(buffer)
    for path in paths:
        h.update(path.stat().st_size.to_bytes(8, "little"))
        with path.open("rb", buffering=0) as f:
            while n := f.readinto(buffer):
                h.update(view[:n])
    return prefix + h.hexdigest()


def _key_algorithm_of(state: SourceState | None) -> str:
    """The algorithm a recorded push input key was computed with (the current one if none)."""
    if state is not None and state.kind == PUSH_INPUT_STATE_KIND:
        for algorithm, prefix in _KEY_PREFIXES.items():
            if state.value.startswith(prefix):
                return algorithm
    return PUSH_INPUT_KEY_ALGORITHM


class _DuplicateInput(Exception):
    """The input is the one last committed through the source: stop computing."""


class _InputKeys:
    """The push input keys, hashed on a thread while the input is read.

    ``new`` is the key to record; ``previous`` the key in the algorithm of the source
    state last committed (they are one key unless that state was recorded by an older
    algorithm). `watch` wraps a progress callback so that a duplicate input stops the
    computation as soon as its key is known, not after the whole slice is written.
    """

    def __init__(
        self,
        source_name: str,
        paths: Sequence[Path],
        input_format: str | None,
        last: SourceState | None,
    ) -> None:
        self.source_name = source_name
        self._last = last
        self._previous_algorithm = _key_algorithm_of(last)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="input-key")
        self._keys = self._executor.submit(
            self._compute, source_name, list(paths), input_format, self._previous_algorithm
        )
        self._executor.shutdown(wait=False)

    @staticmethod
    def _compute(
        source_name: str, paths: list[Path], input_format: str | None, previous_algorithm: str
    ) -> tuple[str, str]:
        new = push_input_key(source_name, paths, input_format)
        if previous_algorithm == PUSH_INPUT_KEY_ALGORITHM:
            return new, new
        return new, push_input_key(source_name, paths, input_format, algorithm=previous_algorithm)

    def key(self) -> SourceState:
        """The source state recording this input (waits for the hashing)."""
        new, _ = self._keys.result()
        return SourceState(source_name=self.source_name, kind=PUSH_INPUT_STATE_KIND, value=new)

    def is_duplicate_of(self, last: SourceState | None) -> bool:
        """Whether ``last`` (the committed source state) records this very input."""
        if last is None or last.kind != PUSH_INPUT_STATE_KIND:
            return False
        new, previous = self._keys.result()
        value = previous if _key_algorithm_of(last) == self._previous_algorithm else new
        return last == SourceState(
            source_name=self.source_name, kind=PUSH_INPUT_STATE_KIND, value=value
        )

    def watch(self, progress: Progress | None, last: SourceState | None) -> Progress:
        """``progress``, raising `_DuplicateInput` once the keys show a duplicate input."""

        def report(update: ProgressUpdate) -> None:
            if self._keys.done() and self.is_duplicate_of(last):
                raise _DuplicateInput
            if progress is not None:
                progress(update)

        return report


#: How a spooled standard input is named in error messages.
STDIN_NAME: Final = "<stdin>"


@contextlib.contextmanager
def _stdin_named(spooled: Path | None) -> Iterator[None]:
    """Name the spooled standard input ``<stdin>`` (not its temporary path) in read errors."""
    try:
        yield
    except ReadError as e:
        if spooled is None or e.path is None or Path(e.path) != spooled:
            raise
        raise ReadError(e.reason, path=STDIN_NAME, line=e.line, column=e.column) from None


def _spool(stream: IO[bytes], dest: Path) -> Path:
    with dest.open("wb") as f:
        while chunk := stream.read(SPOOL_CHUNK):
            f.write(chunk)
    return dest


# -- entry points ------------------------------------------------------------------------------


def ingest(
    dataset: Dataset,
    source: Sequence[Path | str] | IO[bytes],
    *,
    source_name: str | None = None,
    event_time: Timestamp | None = None,
    input_format: str | None = None,
    system_time: Timestamp | None = None,
    engine: PreprocessEngine | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    allow_duplicate: bool = False,
) -> IngestResult:
    """Push files (or a byte stream) through a push source into ``dataset``.

    Exactly once: the commit records a digest of the input as the source state, and an
    input identical to the last one committed through the same source is not ingested
    again (``duplicate_input``) unless ``allow_duplicate`` is set.

    Args:
        dataset: a root dataset with at least one ``AddPushSource``.
        source: input file paths (all merged into one slice), or a binary stream.
        source_name: the push source (optional when there is exactly one).
        event_time: event time for data without an event time column (default: now).
        input_format: read the input as this format instead of the source's
            (``csv``, ``ndjson``, ``json``, ``parquet``, ``geojson``... or a media type).
        system_time: block and ``system_time`` column time (default: now).
        engine: engine for preprocess queries (default: started on demand, stopped after).
        workdir: parent directory for temporary files (default: the system's).
        progress: called with `ProgressUpdate` reports.
        allow_duplicate: ingest even if the input equals the last one of this source.

    Raises:
        SourceNotFound: no (or an ambiguous) push source.
        ReadError / SchemaError / MergeError / UnsupportedFormat / PreprocessError: bad
            input; nothing is committed.
        RefCASFailed: the head kept moving during `MAX_COMMIT_ATTEMPTS` attempts.
    """
    with _workdir(workdir) as wd:
        if isinstance(source, str | bytes):
            raise IngestError("pass a sequence of paths or a binary stream, not a string")
        stdin: Path | None = None
        if isinstance(source, Sequence):
            paths = [Path(p) for p in source]
            for p in paths:
                if not p.is_file():
                    raise FileNotFoundError(2, "no such file", str(p))
        else:
            stdin = _spool(source, wd / "stdin")
            paths = [stdin]
        keys: _InputKeys | None = None
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            with _quarantined_slice(dataset) as out:
                head = dataset.head()
                state = dataset.state()
                push = _push_source(state, source_name)
                last = None if state is None else state.last_source_state
                if keys is None or keys.source_name != push.source_name:
                    # Hashed on a thread while the input is read (a duplicate stops the read).
                    keys = _InputKeys(push.source_name, paths, input_format, last)
                watched = progress if allow_duplicate else keys.watch(progress, last)
                src = _Source(
                    _override_format(push.read, input_format), push.preprocess, push.merge
                )
                now = system_time or _not_before(state)
                inputs = [_Input(p, event_time) for p in paths]
                try:
                    with (
                        _engine_scope(engine, src.preprocess is not None) as eng,
                        _stdin_named(stdin),
                    ):
                        plan = _compute(dataset, state, src, inputs, now, wd, out, eng, watched)
                except _DuplicateInput:
                    return IngestResult(head, head, duplicate_input=True)
                except Exception:
                    # A duplicate is reported as such even if reading it fails now.
                    if not allow_duplicate and keys.is_duplicate_of(last):
                        return IngestResult(head, head, duplicate_input=True)
                    raise
                if not allow_duplicate and keys.is_duplicate_of(last):
                    return IngestResult(head, head, duplicate_input=True)
                if plan.slice is None:
                    # No records (empty file or stream, header only): nothing to commit, not
                    # even the schema or the input digest.
                    return IngestResult(head, head, empty_input=True)
                if progress is not None:
                    progress(ProgressUpdate("commit"))
                try:
                    return _commit_plan(dataset, head, state, plan, keys.key(), None, now)
                except RefCASFailed:
                    if attempt + 1 == MAX_COMMIT_ATTEMPTS:
                        raise
    raise AssertionError("unreachable")


def _not_before(state: ChainState | None) -> Timestamp:
    now = Timestamp.now()
    if state is not None and now < state.system_time:
        return state.system_time
    return now


def pull(
    dataset: Dataset,
    *,
    set_watermark: Timestamp | None = None,
    system_time: Timestamp | None = None,
    engine: PreprocessEngine | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Poll a root dataset's ``SetPollingSource`` once and commit what is new.

    With ``set_watermark`` nothing is fetched: a watermark-only ``AddData`` is committed.

    Raises:
        SourceNotFound: the dataset has no polling source.
        FetchError / PrepareError / ReadError / SchemaError / MergeError /
            PreprocessError: nothing is committed.
        IngestError: ``set_watermark`` before the current watermark.
        RefCASFailed: the head kept moving during `MAX_COMMIT_ATTEMPTS` attempts.
    """
    from node.ingest.fetch import fetch
    from node.ingest.prepare import prepare

    with _workdir(workdir) as wd:
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            head = dataset.head()
            state = dataset.state()
            now = system_time or _not_before(state)
            if set_watermark is not None:
                if state is None:
                    raise SourceNotFound("dataset has no blocks")
                plan = _Plan(None, None)
                try:
                    return _commit_plan(dataset, head, state, plan, None, set_watermark, now)
                except RefCASFailed:
                    if attempt + 1 == MAX_COMMIT_ATTEMPTS:
                        raise
                    continue
            polling: SetPollingSource | None = None if state is None else state.polling_source
            if polling is None:
                raise SourceNotFound("dataset has no polling source (SetPollingSource)")
            if progress is not None:
                progress(ProgressUpdate("fetch"))
            attempt_dir = wd / f"attempt-{attempt}"
            attempt_dir.mkdir()
            fetched = fetch(
                polling.fetch,
                prev_state=None if state is None else state.last_source_state,
                source_name=None,
                workdir=attempt_dir,
                system_time=now,
            )
            if fetched.up_to_date:
                return IngestResult(head, head, up_to_date=True)
            inputs = [
                _Input(prepare(polling.prepare or (), f.path, attempt_dir), f.event_time)
                for f in fetched.files
            ]
            src = _Source(polling.read, polling.preprocess, polling.merge)
            with _quarantined_slice(dataset) as out:
                with _engine_scope(engine, src.preprocess is not None) as eng:
                    plan = _compute(
                        dataset, state, src, inputs, now, attempt_dir, out, eng, progress
                    )
                if progress is not None:
                    progress(ProgressUpdate("commit"))
                try:
                    return _commit_plan(dataset, head, state, plan, fetched.new_state, None, now)
                except RefCASFailed:
                    if attempt + 1 == MAX_COMMIT_ATTEMPTS:
                        raise
    raise AssertionError("unreachable")
