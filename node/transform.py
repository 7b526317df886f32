"""Derivative datasets: plan, run and commit one ``ExecuteTransform`` (odf-format.md 5.3).

A pull of a derivative dataset has three steps, each usable on its own:

1. `plan_transform`: from the dataset's chain state and each input's chain, what is new
   since the last ``ExecuteTransform``: per input (in ``SetTransform`` order) the block
   interval ``(prev, head]`` and offset interval ``(prev_offset, new_offset]``, the data
   files of that block range (oldest first), explicit watermarks and vocabulary; plus
   ``next_offset``, the previous checkpoint and ``system_time`` (now). When no input has
   new data or watermarks the plan is *up to date* and nothing runs.
2. `run_transform`: writes one empty Parquet file per input carrying its Arrow schema
   (from its last ``SetDataSchema``), sends the `TransformRequest` to the engine, hashes
   the output (logical + physical) and the new checkpoint, and builds the
   ``ExecuteTransform`` event (plus a ``SetDataSchema`` the first time, derived from the
   output Arrow schema with the ``arrow.apache.org/*`` encoding attributes stripped).
3. `commit_transform`: appends ``SetDataSchema`` (if any) and ``ExecuteTransform`` by
   compare-and-swap on the head the plan was made against.

Exactly once: a run that is never committed (crash, kill) leaves only temp files under
``.odf/run/transform/``; the next pull plans the same input ranges again and commits
them once. Two pulls racing on one dataset both plan against the same head; the ref CAS
lets only one commit, the other sees `RefCASFailed`, re-plans and finds itself up to
date (`pull_derivative` does this).

Engine identity: `pin_engine_version` records `engine.spark.engine_identity()` in
``TransformSql.version`` of a new derivative manifest (no Spark session is started);
a pull or replay on another identity logs a warning and reports it.

Known limit (kamu rule 6): a run whose inputs had new data but whose output has no
records, no watermark and no checkpoint cannot be committed (an empty
``ExecuteTransform`` is refused); `pull_derivative` reports it as ``EMPTY_OUTPUT`` and
the same input range is offered again on the next pull.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import EngineProtocolError
from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.model import (
    AddData,
    AddPushSource,
    DatasetSnapshot,
    DatasetVocabulary,
    DataSlice,
    ExecuteTransform,
    ExecuteTransformInput,
    MetadataBlock,
    SetDataSchema,
    SetPollingSource,
    SetTransform,
    SetVocab,
    TransformRequest,
    TransformRequestInput,
    TransformSql,
    Watermark,
)
from fbs.model.events import Checkpoint, OffsetInterval
from fbs.multiformats import Multihash
from fbs.rules import evolve_schema
from fbs.timestamp import Timestamp
from node.errors import (
    DependencyCycle,
    IncompatibleSchema,
    InputHistoryDiverged,
    InputNotReady,
    NotDerivative,
    TransformError,
)
from node.ownership import is_owned, require_owned
from storage.chain import ChainState
from storage.dataset import CommitResult, Dataset, PendingEvent
from storage.errors import DatasetNotFound, InvalidAlias, RefCASFailed
from storage.hashing import arrow_rs_schema, logical_hash_parquet, physical_hash_file
from storage.verified import verified_checkpoint_path, verified_object_path

if TYPE_CHECKING:
    from engine.client import EngineClient
    from storage.workspace import Workspace

__all__ = [
    "DEFAULT_MAX_PULL_ATTEMPTS",
    "MAX_INPUT_RANGE_BLOCKS",
    "RUN_DIR",
    "InputPlan",
    "PullResult",
    "PullStatus",
    "TransformOutput",
    "TransformPlan",
    "arrow_schema_of",
    "build_request",
    "check_streaming",
    "commit_transform",
    "data_schema_of_output",
    "derivative_order",
    "evolved_schema",
    "foreign_engines",
    "identity_warning",
    "input_plan_from_blocks",
    "pin_engine_version",
    "plan_transform",
    "pull_derivative",
    "retarget_engine",
    "run_transform",
    "schemas_compatible",
    "transform_work_dir",
    "vocabulary",
]

log = logging.getLogger("odf.transform")

#: Scratch space for engine outputs, under the workspace's ``.odf/`` directory (same
#: filesystem as the object stores, so committing moves no data across devices).
RUN_DIR: Final = "run"
TRANSFORM_DIR: Final = "transform"
#: Plans re-made after losing the head compare-and-swap before `pull_derivative` gives up.
DEFAULT_MAX_PULL_ATTEMPTS: Final = 8
#: Most input blocks walked back to find the previously consumed block (guards against
#: walking a whole unrelated chain when the history diverged).
MAX_INPUT_RANGE_BLOCKS: Final = 10_000_000
#: Temp directories of crashed runs older than this are removed at the next run.
STALE_WORK_DIR_S: Final = 24 * 3600.0
_SCHEMA_FILE_PREFIX: Final = "schema-"


# -- engine identity --------------------------------------------------------------------------


def pin_engine_version(snapshot: DatasetSnapshot) -> DatasetSnapshot:
    """``snapshot`` with ``TransformSql.version`` set to this node's Spark engine identity.

    Only Spark transforms without a version are touched; no Spark session is started
    (the identity uses the installed PySpark's version).
    """
    from engine.spark import ENGINE_NAME, engine_identity

    identity: str | None = None
    events = []
    changed = False
    for event in snapshot.metadata:
        t = event.transform if isinstance(event, SetTransform) else None
        if (
            isinstance(event, SetTransform)
            and isinstance(t, TransformSql)
            and t.engine.lower() == ENGINE_NAME
            and t.version is None
        ):
            identity = identity or engine_identity()
            event = event.replace(transform=t.replace(version=identity))
            changed = True
        events.append(event)
    return snapshot.replace(metadata=tuple(events)) if changed else snapshot


def _sql_transforms(event: object) -> list[TransformSql]:
    """The SQL transforms an event runs: a derivative's transform, a source's preprocess."""
    if isinstance(event, SetTransform):
        t: object = event.transform
    elif isinstance(event, AddPushSource | SetPollingSource):
        t = event.preprocess
    else:
        return []
    return [t] if isinstance(t, TransformSql) else []


def check_streaming(snapshot: DatasetSnapshot) -> None:
    """Refuse a derivative whose query the engine cannot run with streaming semantics
    (SESSION or month windows, an undeclared ``FOR SYSTEM_TIME AS OF`` table ...), at
    ``odf add`` rather than at the first pull. Needs no Spark.

    Raises:
        engine.errors.InvalidQuery: naming the construct and the dataset.
    """
    from engine.errors import InvalidQuery
    from engine.sql import query_steps
    from engine.streaming.rewrite import check_streaming_query

    for event in snapshot.metadata:
        if not isinstance(event, SetTransform) or not isinstance(event.transform, TransformSql):
            continue
        t = event.transform
        names = [n for i in event.inputs for n in (i.alias, i.dataset_ref) if n]
        tables = [(tt.name, tt.primary_key) for tt in t.temporal_tables or ()]
        try:
            check_streaming_query(query_steps(t, check_engine=False), tables, names)
        except InvalidQuery as e:
            raise InvalidQuery(f"{snapshot.name}: {e.message}") from None


def foreign_engines(snapshot: DatasetSnapshot) -> list[str]:
    """Engine names of ``snapshot``'s SQL transforms that are not this node's Spark engine.

    Derivative transforms and source preprocess steps both run on Spark here, so a
    manifest naming another engine (kamu's ``flink``, ``risingwave``, ``datafusion``)
    would only fail later, at ``odf pull`` / ``odf ingest``.
    """
    from engine.spark import ENGINE_NAME

    names: list[str] = []
    for event in snapshot.metadata:
        for t in _sql_transforms(event):
            if t.engine.lower() != ENGINE_NAME and t.engine not in names:
                names.append(t.engine)
    return names


def retarget_engine(snapshot: DatasetSnapshot, engine: str) -> DatasetSnapshot:
    """``snapshot`` with every SQL transform's ``engine`` set to ``engine``.

    Covers ``SetTransform`` and the ``preprocess`` of push/polling sources. A transform
    moved to another engine loses its ``version`` (it named the old engine's release);
    `pin_engine_version` then records the identity of the engine that really runs it.
    Everything else (queries, temporal tables, inputs) is kept as written.
    """
    events = []
    changed = False
    for event in snapshot.metadata:
        for t in _sql_transforms(event):
            if t.engine == engine:
                continue
            moved = t.replace(engine=engine, version=None)
            if isinstance(event, SetTransform):
                event = event.replace(transform=moved)
            elif isinstance(event, AddPushSource | SetPollingSource):
                event = event.replace(preprocess=moved)
            changed = True
        events.append(event)
    return snapshot.replace(metadata=tuple(events)) if changed else snapshot


def identity_warning(transform: TransformSql, current: str) -> str | None:
    """A warning text when ``transform`` was pinned to another engine identity."""
    if transform.version is not None and transform.version != current:
        return (
            f"transform was created with engine {transform.version!r}; running on "
            f"{current!r}: results may differ"
        )
    return None


# -- plans ------------------------------------------------------------------------------------


def vocabulary(vocab: SetVocab | None) -> DatasetVocabulary:
    """The effective vocabulary of a dataset (defaults for unset columns)."""
    default = DatasetVocabulary()
    if vocab is None:
        return default
    return DatasetVocabulary(
        offset_column=vocab.offset_column or default.offset_column,
        operation_type_column=vocab.operation_type_column or default.operation_type_column,
        system_time_column=vocab.system_time_column or default.system_time_column,
        event_time_column=vocab.event_time_column or default.event_time_column,
    )


@dataclass(frozen=True, slots=True)
class InputPlan:
    """What one input contributes to a transform run.

    Attributes:
        dataset_id / dataset_alias: the input dataset.
        query_alias: the name the query uses for it (``SetTransform`` input alias).
        prev_block_hash / prev_offset: what the previous run consumed (``None``: nothing).
        new_block_hash: the input head now (``None``: no new blocks).
        new_offset: last offset of the new data (``None``: no new data).
        data_files: data objects of the new blocks, oldest first.
        explicit_watermarks: watermarks of the new blocks, oldest first.
        vocab: the input's vocabulary.
        schema: the input's SetDataSchema as of ``new_block_hash ?: prev_block_hash``.
    """

    dataset_id: DatasetId
    dataset_alias: str
    query_alias: str
    prev_block_hash: Multihash | None
    new_block_hash: Multihash | None
    prev_offset: int | None
    new_offset: int | None
    data_files: tuple[Path, ...]
    explicit_watermarks: tuple[Watermark, ...]
    vocab: DatasetVocabulary
    schema: SetDataSchema | None

    @property
    def offset_interval(self) -> OffsetInterval | None:
        """Closed interval of the new records, if any."""
        if self.new_offset is None:
            return None
        start = 0 if self.prev_offset is None else self.prev_offset + 1
        return OffsetInterval(start=start, end=self.new_offset)

    @property
    def has_news(self) -> bool:
        """Whether this input brings data or watermarks the derivative has not seen."""
        return self.new_offset is not None or bool(self.explicit_watermarks)

    def query_input(self) -> ExecuteTransformInput:
        """The ``ExecuteTransformInput`` recording this input's consumption."""
        return ExecuteTransformInput(
            dataset_id=self.dataset_id,
            prev_block_hash=self.prev_block_hash,
            new_block_hash=self.new_block_hash,
            prev_offset=self.prev_offset,
            new_offset=self.new_offset,
        )


@dataclass(frozen=True, slots=True)
class TransformPlan:
    """One transform run of a derivative dataset, made against ``head``.

    Attributes:
        dataset_id / dataset_alias: the derivative dataset.
        head: the head the plan was made against (the commit's CAS expectation).
        system_time: the run's system time (now; the recorded one when replaying).
        transform: the SQL transform.
        vocab: the derivative's vocabulary.
        inputs: one plan per input, in SetTransform order.
        prev_offset: the dataset's last offset.
        prev_checkpoint: the dataset's last checkpoint, and ``prev_checkpoint_file`` its file.
        data_schema: the dataset's current SetDataSchema (``None`` before the first run).
    """

    dataset_id: DatasetId
    dataset_alias: str
    head: Multihash
    system_time: Timestamp
    transform: TransformSql
    vocab: DatasetVocabulary
    inputs: tuple[InputPlan, ...]
    prev_offset: int | None
    prev_checkpoint: Multihash | None
    prev_checkpoint_file: Path | None
    data_schema: SetDataSchema | None

    @property
    def next_offset(self) -> int:
        """Offset of the first output record."""
        return 0 if self.prev_offset is None else self.prev_offset + 1

    @property
    def up_to_date(self) -> bool:
        """True when no input has new data or watermarks (nothing to run)."""
        return not any(i.has_news for i in self.inputs)


def input_plan_from_blocks(
    *,
    dataset_id: DatasetId,
    dataset_alias: str,
    query_alias: str,
    data_dir: Path,
    prev_block_hash: Multihash | None,
    new_block_hash: Multihash | None,
    prev_offset: int | None,
    blocks: Sequence[tuple[Multihash, MetadataBlock]],
    vocab: DatasetVocabulary,
    schema: SetDataSchema | None,
) -> InputPlan:
    """Build an `InputPlan` from the input blocks in ``(prev, new]``, oldest first.

    ``data_dir`` is the input's data object store directory.
    """
    files: list[Path] = []
    watermarks: list[Watermark] = []
    new_offset: int | None = None
    for _h, block in blocks:
        event = block.event
        if not isinstance(event, AddData | ExecuteTransform):
            continue
        if event.new_data is not None:
            d = event.new_data  # checked against the block before the engine may read it
            files.append(verified_object_path(data_dir, "data", d.physical_hash, d.size))
            new_offset = event.new_data.offset_interval.end
        if event.new_watermark is not None:
            watermarks.append(
                Watermark(system_time=block.system_time, event_time=event.new_watermark)
            )
    return InputPlan(
        dataset_id=dataset_id,
        dataset_alias=dataset_alias,
        query_alias=query_alias,
        prev_block_hash=prev_block_hash,
        new_block_hash=new_block_hash if blocks else None,
        prev_offset=prev_offset,
        new_offset=new_offset,
        data_files=tuple(files),
        explicit_watermarks=tuple(watermarks),
        vocab=vocab,
        schema=schema,
    )


def _blocks_since(
    ds: Dataset, prev: Multihash | None, head: Multihash, who: str
) -> list[tuple[Multihash, MetadataBlock]]:
    """Blocks in ``(prev, head]`` oldest first (walks back from ``head``)."""
    out: list[tuple[Multihash, MetadataBlock]] = []
    for n, (h, _raw, block) in enumerate(ds.iter_blocks(head)):
        if h == prev:
            break
        if n >= MAX_INPUT_RANGE_BLOCKS:
            raise InputHistoryDiverged(f"{who}: more than {MAX_INPUT_RANGE_BLOCKS} new blocks")
        out.append((h, block))
    else:
        if prev is not None:
            raise InputHistoryDiverged(
                f"{who}: block {prev} consumed by the last transform is no longer in its "
                "chain (the input was reset or replaced)"
            )
    out.reverse()
    return out


def _open_input(
    ws: Workspace, did: DatasetId, reader: str, name: str | None
) -> tuple[str, Dataset]:
    """An input of ``reader``'s transform, which calls it ``name`` (its query alias)."""
    try:
        entry = ws.resolve(did)
    except (DatasetNotFound, InvalidAlias, FbsError):
        called = f"{name} ({did})" if name else str(did)
        raise InputNotReady(
            f"{reader}: transform input {called} is not in this workspace (deleted, or never "
            "pulled: `odf pull` its DID or URL)"
        ) from None
    return entry.alias, ws.get(entry.id)


def _derivative_state(ds: Dataset, alias: str) -> tuple[ChainState, SetTransform, TransformSql]:
    state = ds.state()
    if state is None or state.transform is None:
        raise NotDerivative(f"{alias} is not a derivative dataset (no SetTransform)")
    transform = state.transform.transform
    if not isinstance(transform, TransformSql):  # pragma: no cover - the only variant in v0.38
        raise NotDerivative(f"{alias}: unsupported transform {type(transform).__name__}")
    return state, state.transform, transform


def plan_transform(
    ws: Workspace, ref: str | DatasetId, *, system_time: Timestamp | None = None
) -> TransformPlan:
    """Plan the next transform run of the derivative ``ref`` (see the module docstring).

    Raises:
        DatasetNotFound / InvalidAlias: no such dataset.
        NotDerivative: the dataset has no SetTransform.
        InputNotReady: an input that is not in the workspace.
        InputHistoryDiverged: a consumed input block that is no longer in its chain.
    """
    entry = ws.resolve(ref)
    ds = ws.get(entry.id)
    state, set_transform, transform = _derivative_state(ds, entry.alias)
    consumed = {s.dataset_id: s for s in state.inputs or ()}
    inputs: list[InputPlan] = []
    for tinput in set_transform.inputs:
        did = DatasetId.from_did(tinput.dataset_ref)
        alias, input_ds = _open_input(ws, did, entry.alias, tinput.alias)
        input_state = input_ds.state()
        if input_state is None:
            raise InputNotReady(f"transform input {alias} has no blocks")
        last = consumed.get(did)
        prev_hash = last.last_block_hash if last else None
        prev_offset = last.last_offset if last else None
        blocks = (
            []
            if input_state.head == prev_hash
            else _blocks_since(input_ds, prev_hash, input_state.head, f"input {alias}")
        )
        inputs.append(
            input_plan_from_blocks(
                dataset_id=did,
                dataset_alias=alias,
                query_alias=tinput.alias or alias,
                data_dir=input_ds.layout.data.root,
                prev_block_hash=prev_hash,
                new_block_hash=input_state.head,
                prev_offset=prev_offset,
                blocks=blocks,
                vocab=vocabulary(input_state.vocab),
                schema=input_state.data_schema,
            )
        )
    checkpoint = state.last_checkpoint
    return TransformPlan(
        dataset_id=state.dataset_id,
        dataset_alias=entry.alias,
        head=state.head,
        system_time=system_time or _now_after(state.system_time),
        transform=transform,
        vocab=vocabulary(state.vocab),
        inputs=tuple(inputs),
        prev_offset=state.last_offset,
        prev_checkpoint=checkpoint,
        prev_checkpoint_file=(
            verified_checkpoint_path(ds.layout.checkpoints.root, checkpoint)
            if checkpoint is not None
            else None
        ),
        data_schema=state.data_schema,
    )


def _now_after(previous: Timestamp) -> Timestamp:
    # A clock stepping back must not produce a block older than its parent (rule 4).
    now = Timestamp.now()
    return now if now >= previous else previous


# -- running ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransformOutput:
    """A finished engine run, ready to commit.

    Attributes:
        plan: the plan it ran.
        event: the ExecuteTransform to append.
        set_data_schema: the SetDataSchema to append first (first run, or an evolution).
        output_schema: the output's schema (always computed, for compatibility checks).
        data_file: the new data file (``None`` when the run produced no records).
        checkpoint_file: the new checkpoint file (``None``: the engine wrote none).
        work_dir: the temp directory holding both (removed by `commit_transform`).
        engine_seconds: wall time of the engine call.
    """

    plan: TransformPlan
    event: ExecuteTransform
    set_data_schema: SetDataSchema | None
    output_schema: SetDataSchema
    data_file: Path | None
    checkpoint_file: Path | None
    work_dir: Path
    engine_seconds: float

    @property
    def num_records(self) -> int:
        """Records the run produced."""
        d = self.event.new_data
        return 0 if d is None else d.offset_interval.end - d.offset_interval.start + 1

    @property
    def is_empty(self) -> bool:
        """True if the event adds no data, checkpoint or watermark (cannot be committed)."""
        e = self.event
        return e.new_data is None and e.new_checkpoint is None and e.new_watermark is None


def transform_work_dir(ws: Workspace) -> Path:
    """A fresh temp directory for one engine run under ``.odf/run/transform/``.

    Leftovers of crashed runs older than `STALE_WORK_DIR_S` are removed on the way.
    """
    base = ws.root / RUN_DIR / TRANSFORM_DIR
    base.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - STALE_WORK_DIR_S
    with contextlib.suppress(OSError):
        for old in base.iterdir():
            with contextlib.suppress(OSError):
                if old.is_dir() and old.stat().st_mtime < cutoff:
                    shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix="run-", dir=base))


def arrow_schema_of(event: SetDataSchema, who: str) -> pa.Schema:
    """The Arrow schema of a SetDataSchema.

    Raises:
        InputNotReady: a schema that cannot be converted (``who`` names its dataset).
    """
    from fbs.arrow_schema import arrow_schema_from_data

    try:
        if event.schema is not None:
            return arrow_schema_from_data(event.schema)
        if event.raw_arrow_schema is not None:
            return pa.ipc.read_schema(pa.py_buffer(event.raw_arrow_schema))
    except (FbsError, pa.ArrowException, ValueError) as e:
        raise InputNotReady(f"{who}: unusable data schema: {e}") from None
    raise InputNotReady(f"{who}: SetDataSchema without a schema")


def _write_schema_file(inp: InputPlan, work_dir: Path) -> Path:
    if inp.schema is None:
        raise InputNotReady(
            f"input {inp.dataset_alias} has no data schema yet (pull or ingest it first)"
        )
    path = work_dir / f"{_SCHEMA_FILE_PREFIX}{inp.dataset_id.as_multibase()}.parquet"
    schema = arrow_schema_of(inp.schema, f"input {inp.dataset_alias}")
    pq.write_table(schema.empty_table(), path)
    return path


def build_request(plan: TransformPlan, work_dir: Path) -> TransformRequest:
    """The engine request of ``plan``; schema files are written into ``work_dir``.

    Raises:
        InputNotReady: an input without a (usable) data schema.
    """
    inputs = tuple(
        TransformRequestInput(
            dataset_id=inp.dataset_id,
            dataset_alias=inp.dataset_alias,
            query_alias=inp.query_alias,
            vocab=inp.vocab,
            offset_interval=inp.offset_interval,
            data_paths=tuple(str(p) for p in inp.data_files),
            schema_file=str(_write_schema_file(inp, work_dir)),
            explicit_watermarks=inp.explicit_watermarks,
        )
        for inp in plan.inputs
    )
    return TransformRequest(
        dataset_id=plan.dataset_id,
        dataset_alias=plan.dataset_alias,
        system_time=plan.system_time,
        vocab=plan.vocab,
        transform=plan.transform,
        query_inputs=inputs,
        next_offset=plan.next_offset,
        prev_checkpoint_path=(
            str(plan.prev_checkpoint_file) if plan.prev_checkpoint_file is not None else None
        ),
        new_checkpoint_path=str(work_dir / "checkpoint"),
        new_data_path=str(work_dir / "data"),
    )


def data_schema_of_output(path: Path) -> SetDataSchema:
    """``SetDataSchema`` of an output Parquet file: its arrow-rs Arrow schema, encodings stripped.

    Raises:
        TransformError: the file is not readable Parquet or has an inexpressible type.
    """
    from fbs.arrow_schema import data_schema_from_arrow

    try:
        schema = arrow_rs_schema(pq.ParquetFile(path))
        return SetDataSchema(schema=data_schema_from_arrow(schema, strip_encoding=True))
    except (FbsError, pa.ArrowException, OSError, ValueError) as e:
        raise TransformError(f"cannot read the schema of the engine output: {e}") from None


def _shape(schema: SetDataSchema) -> list[tuple[str, str]]:
    """Field names and Arrow types, nullability ignored (Spark's is an artifact)."""
    arrow = arrow_schema_of(schema, "schema")
    return [(f.name, str(f.type)) for f in arrow]


def schemas_compatible(current: SetDataSchema, output: SetDataSchema) -> bool:
    """Whether an output with schema ``output`` may be appended under ``current``."""
    if current.schema is not None and output.schema is not None:
        return evolve_schema(current.schema, output.schema) == current.schema
    try:
        return _shape(current) == _shape(output)  # raw Arrow schemas
    except InputNotReady:
        return False


def evolved_schema(current: SetDataSchema, output: SetDataSchema) -> SetDataSchema | None:
    """The schema that lets ``output`` follow ``current`` by ODF's evolution rules, if any.

    Allowed (rule 12, `fbs.rules.evolve_schema`): the same fields with the same types,
    possibly in another order, plus new fields, which are recorded as optional. Existing
    fields keep their recorded definitions (Spark's nullability of a column may differ
    from run to run). None when a field was dropped or changed its type.
    """
    if current.schema is None or output.schema is None:
        return None
    schema = evolve_schema(current.schema, output.schema)
    return None if schema is None or schema == current.schema else SetDataSchema(schema=schema)


def run_transform(plan: TransformPlan, engine: EngineClient, work_dir: Path) -> TransformOutput:
    """Run ``plan`` on ``engine``; outputs land in ``work_dir``; nothing is committed.

    Raises:
        InputNotReady: an input without a data schema.
        engine.errors.InvalidQuery: the engine refused the query (Spark's message).
        engine.errors.EngineInternalError: the engine failed.
        engine.errors.EngineUnavailable / EngineTimeout: the engine cannot be reached.
        IncompatibleSchema: the output schema differs from the dataset's.
        TransformError: the engine's output does not match its response.
    """
    from engine.client import raise_for_result  # grpc: only when a transform really runs

    request = build_request(plan, work_dir)
    started = time.monotonic()
    response = raise_for_result(engine.execute_transform(request))
    seconds = time.monotonic() - started
    data_path = Path(request.new_data_path)
    checkpoint_path = Path(request.new_checkpoint_path)
    if not data_path.is_file():
        raise EngineProtocolError("the engine reported success but wrote no data file")
    output_schema = data_schema_of_output(data_path)
    set_schema: SetDataSchema | None = None
    if plan.data_schema is None:
        set_schema = output_schema
    elif not schemas_compatible(plan.data_schema, output_schema):
        # New columns (e.g. an input gained an optional column under `SELECT *`) evolve
        # the schema first; dropped or retyped columns cannot.
        set_schema = evolved_schema(plan.data_schema, output_schema)
        if set_schema is None:
            raise IncompatibleSchema(
                f"{plan.dataset_alias}: the query's output schema {_shape(output_schema)} "
                f"differs from the dataset's {_shape(plan.data_schema)}; only added "
                "columns (recorded as optional) or a new column order can evolve it"
            )
    interval = response.new_offset_interval
    new_data: DataSlice | None = None
    data_file: Path | None = None
    if interval is not None:
        rows = pq.read_metadata(data_path).num_rows
        if interval.start != plan.next_offset or interval.end - interval.start + 1 != rows:
            raise TransformError(
                f"engine returned offsets [{interval.start}, {interval.end}] for {rows} "
                f"records starting at {plan.next_offset}"
            )
        physical, size = physical_hash_file(data_path)
        new_data = DataSlice(
            logical_hash=logical_hash_parquet(data_path),
            physical_hash=physical,
            offset_interval=interval,
            size=size,
        )
        data_file = data_path
    new_checkpoint: Checkpoint | None = None
    checkpoint_file: Path | None = None
    if checkpoint_path.is_file():
        ck_hash, ck_size = physical_hash_file(checkpoint_path)
        new_checkpoint = Checkpoint(physical_hash=ck_hash, size=ck_size)
        checkpoint_file = checkpoint_path
    event = ExecuteTransform(
        query_inputs=tuple(i.query_input() for i in plan.inputs),
        prev_checkpoint=plan.prev_checkpoint,
        prev_offset=plan.prev_offset,
        new_data=new_data,
        new_checkpoint=new_checkpoint,
        new_watermark=response.new_watermark,
    )
    return TransformOutput(
        plan=plan,
        event=event,
        set_data_schema=set_schema,
        output_schema=output_schema,
        data_file=data_file,
        checkpoint_file=checkpoint_file,
        work_dir=work_dir,
        engine_seconds=seconds,
    )


def commit_transform(ws: Workspace, output: TransformOutput) -> CommitResult:
    """Append the run's SetDataSchema (first run) and ExecuteTransform.

    Both blocks land with one CAS from the plan's head: if anything else was appended
    meanwhile nothing is written and `RefCASFailed` is raised (re-plan and run again).

    Raises:
        RefCASFailed: the head moved since the plan.
        TransformError: the run produced an empty event (see the module docstring).
        ChainRuleViolation: the event breaks a chain rule.
    """
    if output.is_empty:
        raise TransformError(
            f"{output.plan.dataset_alias}: the run produced no records, watermark or "
            "checkpoint; nothing to commit"
        )
    ds = ws.get(output.plan.dataset_id)
    events = [PendingEvent(output.event, output.data_file, output.checkpoint_file)]
    if output.set_data_schema is not None:
        events.insert(0, PendingEvent(output.set_data_schema))
    # One head move: a refused ExecuteTransform leaves no SetDataSchema behind either.
    results = ds.commit_events(
        events, system_time=output.plan.system_time, expected_head=output.plan.head
    )
    return results[-1]


# -- pull -------------------------------------------------------------------------------------


class PullStatus(enum.StrEnum):
    """Outcome of pulling one derivative dataset."""

    UPDATED = "updated"
    UP_TO_DATE = "up-to-date"
    EMPTY_OUTPUT = "empty-output"


@dataclass(frozen=True, slots=True)
class PullResult:
    """What `pull_derivative` did to one dataset.

    Attributes:
        alias / dataset_id: the dataset.
        status: updated, up to date, or ran without anything to commit.
        old_head / new_head: heads before and after (equal unless updated).
        num_records: records added.
        new_watermark: the committed watermark, if any.
        warnings: e.g. an engine identity differing from the pinned one.
        upstream: results of upstream derivatives pulled first (``recursive``).
    """

    alias: str
    dataset_id: DatasetId
    status: PullStatus
    old_head: Multihash
    new_head: Multihash
    num_records: int = 0
    new_watermark: Timestamp | None = None
    warnings: tuple[str, ...] = ()
    upstream: tuple[PullResult, ...] = ()


def derivative_order(ws: Workspace, ref: str | DatasetId) -> list[DatasetId]:
    """``ref`` and its upstream derivative datasets, inputs before their consumers.

    Root datasets are not included (they are ingested, not transformed), nor are upstream
    replicas: a derivative pulled from another node (it has a pull alias,
    `node.remote.aliases`) gets its data from there, like a root, never by running its
    transform here (its own inputs may not even be in this workspace).

    Raises:
        NotDerivative: ``ref`` is not a derivative dataset.
        DependencyCycle: the inputs form a cycle.
        InputNotReady: an input that is not in the workspace.
    """
    target = ws.resolve(ref)
    order: list[DatasetId] = []
    done: set[DatasetId] = set()
    visiting: set[DatasetId] = set()

    def visit(did: DatasetId, alias: str) -> None:
        if did in done:
            return
        if did in visiting:
            raise DependencyCycle(f"derivative inputs form a cycle through {alias}")
        ds = ws.get(did)
        state = ds.state()
        replica = did != target.id and bool(ds.layout.read_config().pull_aliases)
        if state is None or state.transform is None or replica:
            done.add(did)
            return
        visiting.add(did)
        for tinput in state.transform.inputs:
            input_did = DatasetId.from_did(tinput.dataset_ref)
            input_alias, _ = _open_input(ws, input_did, alias, tinput.alias)
            visit(input_did, input_alias)
        visiting.discard(did)
        done.add(did)
        order.append(did)

    # Iterative deepening is unnecessary: derivative graphs are shallow, and Python's
    # recursion limit (1000) is far above any realistic pipeline depth.
    visit(target.id, target.alias)
    if target.id not in order:
        raise NotDerivative(f"{target.alias} is not a derivative dataset (no SetTransform)")
    return order


def _pull_one(
    ws: Workspace, did: DatasetId, engine: Callable[[], EngineClient], max_attempts: int
) -> PullResult:
    from engine.spark import engine_identity

    last: RefCASFailed | None = None
    for _attempt in range(max(1, max_attempts)):
        plan = plan_transform(ws, did)
        warnings = tuple(w for w in [identity_warning(plan.transform, engine_identity())] if w)
        for w in warnings:
            log.warning("%s: %s", plan.dataset_alias, w)
        if plan.up_to_date:
            return PullResult(
                plan.dataset_alias, did, PullStatus.UP_TO_DATE, plan.head, plan.head,
                warnings=warnings,
            )  # fmt: skip
        work_dir = transform_work_dir(ws)
        try:
            output = run_transform(plan, engine(), work_dir)
            if output.is_empty:
                return PullResult(
                    plan.dataset_alias, did, PullStatus.EMPTY_OUTPUT, plan.head, plan.head,
                    warnings=warnings,
                )  # fmt: skip
            try:
                committed = commit_transform(ws, output)
            except RefCASFailed as e:
                last = e  # someone else appended: plan again on the new head
                continue
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
        return PullResult(
            plan.dataset_alias,
            did,
            PullStatus.UPDATED,
            plan.head,
            committed.new_head,
            num_records=output.num_records,
            new_watermark=output.event.new_watermark,
            warnings=warnings,
        )
    assert last is not None
    raise last


def pull_derivative(
    ws: Workspace,
    ref: str | DatasetId,
    *,
    recursive: bool = False,
    engine: EngineClient | None = None,
    max_attempts: int = DEFAULT_MAX_PULL_ATTEMPTS,
) -> PullResult:
    """Bring the derivative dataset ``ref`` up to date with its inputs.

    Args:
        ws: the workspace.
        ref: alias or DID of a derivative dataset.
        recursive: first pull upstream derivative datasets (inputs before consumers).
        engine: the engine client; default: `node.engine_manager.get_engine` (started
            on demand, reused).
        max_attempts: re-plans after losing a race with another writer.

    Returns:
        The result for ``ref``; with ``recursive``, ``upstream`` holds the others.

    Raises:
        NotDerivative / InputNotReady / InputHistoryDiverged / IncompatibleSchema /
            DependencyCycle / TransformError: see `node.errors`.
        engine.errors.InvalidQuery / EngineInternalError / EngineUnavailable: engine
            failures (nothing is committed).
        RefCASFailed: lost the head race ``max_attempts`` times.
    """
    # The engine is reached only when a transform really runs: an up-to-date pull (a cron
    # job's `odf pull --all`) must neither start a JVM nor keep one alive for its idle timeout.
    from node.engine_manager import engine_provider

    provide = engine_provider(ws, engine)
    target = ws.resolve(ref).id
    order = derivative_order(ws, target) if recursive else [target]
    require_owned(ws, target, action="run its transform")  # a replica's blocks are its publisher's
    # An upstream replica is brought up to date by pulling it, never by running it here.
    results = [_pull_one(ws, did, provide, max_attempts) for did in order if is_owned(ws, did)]
    final = results[-1]
    return dataclasses.replace(final, upstream=tuple(results[:-1])) if recursive else final
