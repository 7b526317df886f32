"""The ingest pipeline: input files → merged slice → ``SetDataSchema`` / ``AddData`` commits.

Push ingest (`ingest`): files or a byte stream are read with the push source's read
step. Polling ingest (`pull`): fetch → prepare → read with the polling source. Both
then run the optional preprocess SQL on the engine (`node.ingest.preprocess`: the
engine transform, replay, SQL and validation use, reached only when a preprocess step
runs), add the event time when the data has none, conform the data to the dataset
schema (`node.ingest.conform`), merge, write one slice (`node.ingest.compute`) and
commit (`node.ingest.commit`).

Commit protocol and exactly-once: every output (slice file, hashes, offsets, watermark,
source state) is computed against one observed head; the data and the new source state
land together in a single ``AddData`` moved in by compare-and-swap on ``refs/head``,
with a needed ``SetDataSchema`` in the same head move. A crash at any earlier point
leaves the head unchanged, so a re-run fetches and ingests the same input again; a crash
after the CAS leaves the new source state in place, so a re-run of a polling source
finds nothing new, and a re-run of a push ingest finds its input key
(`node.ingest.input_keys`). If another writer moved the head, everything is recomputed
on the new head (up to `MAX_COMMIT_ATTEMPTS`). Bad input raises before anything is
committed. A push ingest whose input holds no records (empty file or stream, header
only) commits nothing at all (``IngestResult.empty_input``).

Reading a dataset's existing records lives in `node.ingest.dataset_reads`; its
functions are re-exported here for the callers that import them from the pipeline.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from fbs.model import (
    AddPushSource,
    DatasetKind,
    Multihash,
    ReadStep,
    ReadStepCsv,
    ReadStepEsriShapefile,
    ReadStepGeoJson,
    ReadStepJson,
    ReadStepNdGeoJson,
    ReadStepNdJson,
    ReadStepParquet,
    SetPollingSource,
    Timestamp,
)
from node.ingest.commit import IngestResult, commit_plan
from node.ingest.compute import DEFAULT_BATCH_ROWS, Input, Plan, Source, compute
from node.ingest.dataset_reads import read_changelog, read_live_state, slice_paths, vocab_of
from node.ingest.errors import IngestError, ReadError, SourceNotFound, UnsupportedFormat
from node.ingest.input_keys import DuplicateInput, InputKeys
from node.ingest.preprocess import EngineProvider, engine_provider
from node.ingest.progress import Progress, ProgressUpdate
from storage.chain import ChainState
from storage.dataset import Dataset
from storage.errors import RefCASFailed

if TYPE_CHECKING:
    from engine.client import EngineClient

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "INPUT_FORMATS",
    "MAX_COMMIT_ATTEMPTS",
    "IngestResult",
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


# -- sources -----------------------------------------------------------------------------------


def _push_source(state: ChainState | None, name: str | None) -> AddPushSource:
    sources = () if state is None else state.push_sources
    if state is not None and state.kind == DatasetKind.Derivative:
        raise IngestError("cannot ingest into a derivative dataset: `odf pull` runs its transform")
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


def _input_paths(source: Sequence[Path | str] | IO[bytes], workdir: Path) -> tuple[Path, ...]:
    """The input files: the paths given (each must exist), or the stream spooled to a file.

    Raises:
        IngestError: a string (not a sequence of paths) was given.
        FileNotFoundError: a path that is not a file.
    """
    if isinstance(source, str | bytes):
        raise IngestError("pass a sequence of paths or a binary stream, not a string")
    if not isinstance(source, Sequence):
        return (_spool(source, workdir / "stdin"),)
    paths = tuple(Path(p) for p in source)
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(2, "no such file", str(p))
    return paths


# -- entry points ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PushRequest:
    """What every attempt of one push ingest reads from (see `ingest`)."""

    dataset: Dataset
    paths: tuple[Path, ...]
    stdin: Path | None
    workdir: Path
    input_format: str | None
    event_time: Timestamp | None
    system_time: Timestamp | None
    engine: EngineProvider
    progress: Progress | None
    allow_duplicate: bool


def ingest(
    dataset: Dataset,
    source: Sequence[Path | str] | IO[bytes],
    *,
    source_name: str | None = None,
    event_time: Timestamp | None = None,
    input_format: str | None = None,
    system_time: Timestamp | None = None,
    engine: EngineClient | None = None,
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
        engine: engine for preprocess queries (default: the dataset's workspace engine,
            `node.engine_manager.dataset_engine`, reached only if a preprocess step runs).
        workdir: parent directory for temporary files (default: the system's).
        progress: called with `ProgressUpdate` reports.
        allow_duplicate: ingest even if the input equals the last one of this source.

    Raises:
        SourceNotFound: no (or an ambiguous) push source.
        ReadError / SchemaError / MergeError / UnsupportedFormat / PreprocessError: bad
            input; nothing is committed.
        node.errors.EngineManagerError / engine.errors.EngineUnavailable: a preprocess
            step whose engine cannot be started or reached; nothing is committed.
        RefCASFailed: the head kept moving during `MAX_COMMIT_ATTEMPTS` attempts.
    """
    with _workdir(workdir) as wd:
        paths = _input_paths(source, wd)
        stdin = None if isinstance(source, Sequence) else paths[0]
        request = _PushRequest(
            dataset, paths, stdin, wd, input_format, event_time, system_time,
            engine_provider(dataset, engine), progress, allow_duplicate,
        )  # fmt: skip
        keys: InputKeys | None = None
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            with _quarantined_slice(dataset) as out:
                head = dataset.head()
                state = dataset.state()
                push = _push_source(state, source_name)
                last = None if state is None else state.last_source_state
                if keys is None or keys.source_name != push.source_name:
                    # Hashed on a thread while the input is read (a duplicate stops the read).
                    keys = InputKeys(push.source_name, paths, input_format, last)
                try:
                    return _push_attempt(request, push, keys, head, state, out)
                except RefCASFailed:
                    if attempt + 1 == MAX_COMMIT_ATTEMPTS:
                        raise
    raise AssertionError("unreachable")


def _push_attempt(
    request: _PushRequest,
    push: AddPushSource,
    keys: InputKeys,
    head: Multihash | None,
    state: ChainState | None,
    out: Path,
) -> IngestResult:
    """Compute against ``state`` and commit on ``head`` (or report a duplicate or empty
    input, committing nothing).

    Raises:
        RefCASFailed: another writer moved the head.
    """
    last = None if state is None else state.last_source_state
    skip_duplicate = not request.allow_duplicate
    watched = keys.watch(request.progress, last) if skip_duplicate else request.progress
    src = Source(_override_format(push.read, request.input_format), push.preprocess, push.merge)
    now = request.system_time or _not_before(state)
    inputs = [Input(p, request.event_time) for p in request.paths]
    dataset = request.dataset
    try:
        with _stdin_named(request.stdin):
            plan = compute(
                dataset, state, src, inputs, now, request.workdir, out, request.engine, watched
            )
    except DuplicateInput:
        return IngestResult(head, head, duplicate_input=True)
    except Exception:
        # A duplicate is reported as such even if reading it fails now.
        if skip_duplicate and keys.is_duplicate_of(last):
            return IngestResult(head, head, duplicate_input=True)
        raise
    if skip_duplicate and keys.is_duplicate_of(last):
        return IngestResult(head, head, duplicate_input=True)
    if plan.slice is None:
        # No records (empty file or stream, header only): nothing to commit, not even the
        # schema or the input digest.
        return IngestResult(head, head, empty_input=True)
    if request.progress is not None:
        request.progress(ProgressUpdate("commit"))
    return commit_plan(dataset, head, state, plan, keys.key(), None, now)


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
    engine: EngineClient | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Poll a root dataset's ``SetPollingSource`` once and commit what is new.

    With ``set_watermark`` nothing is fetched: a watermark-only ``AddData`` is committed.
    ``engine``: for preprocess queries, as in `ingest`.

    Raises:
        SourceNotFound: the dataset has no polling source.
        FetchError / PrepareError / ReadError / SchemaError / MergeError /
            PreprocessError: nothing is committed.
        IngestError: ``set_watermark`` before the current watermark.
        node.errors.EngineManagerError / engine.errors.EngineUnavailable: see `ingest`.
        RefCASFailed: the head kept moving during `MAX_COMMIT_ATTEMPTS` attempts.
    """
    from node.ingest.fetch import fetch
    from node.ingest.prepare import prepare

    provide = engine_provider(dataset, engine)
    with _workdir(workdir) as wd:
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            head = dataset.head()
            state = dataset.state()
            now = system_time or _not_before(state)
            if set_watermark is not None:
                if state is None:
                    raise SourceNotFound("dataset has no blocks")
                plan = Plan(None, None)
                try:
                    return commit_plan(dataset, head, state, plan, None, set_watermark, now)
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
                Input(prepare(polling.prepare or (), f.path, attempt_dir), f.event_time)
                for f in fetched.files
            ]
            src = Source(polling.read, polling.preprocess, polling.merge)
            with _quarantined_slice(dataset) as out:
                plan = compute(
                    dataset, state, src, inputs, now, attempt_dir, out, provide, progress
                )
                if progress is not None:
                    progress(ProgressUpdate("commit"))
                try:
                    return commit_plan(dataset, head, state, plan, fetched.new_state, None, now)
                except RefCASFailed:
                    if attempt + 1 == MAX_COMMIT_ATTEMPTS:
                        raise
    raise AssertionError("unreachable")
