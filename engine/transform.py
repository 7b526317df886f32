"""Execute a `TransformRequest` with Spark, with the semantics of kamu's Spark engine.

Steps (odf-format.md §5.4):

1. Inputs: each input's Parquet files (read with the schema of its ``schema_file``) are
   limited to ``offset in [start, end]`` (empty when the request has no interval or no
   files) and registered as a temp view named by ``query_alias``, in offset order.
2. The SQL steps run in order; aliased steps become views; the last step is the output.
3. Output checks: an event-time column of type TIMESTAMP or DATE is required; columns
   named like the offset / system-time columns are refused; an ``op`` column must be INT
   and is added as 0 (append) when absent. Failures are `InvalidQuery`.
4. ``offset`` = ``next_offset`` + the row's position (row order = the output order of the
   query), ``system_time`` = the request's time; columns ordered offset, op, system_time,
   then the query's columns.
5. One Parquet file is written at ``new_data_path`` (also when empty: the coordinator
   then takes only its schema); timestamps are UTC milliseconds.
6. Watermarks: per input the latest explicit watermark, else the one stored in the
   previous checkpoint; the output watermark is the minimum over inputs, and absent when
   some input has none (kamu's engine fails in that case instead). The per-input values
   form the new checkpoint (`engine.checkpoint`), written only when there is at least one.

How it runs in parallel and still gives kamu's single-partition results: the output's
row order is defined as the order of one partition holding each input in offset order
(kamu coalesces every input and the output to one partition). Here:

- An input's slices are read one scan per file and concatenated in order (a union keeps
  its children's partitions in order and one file's splits are in file order), so the
  input's partitions, taken in index order, are in offset order without a sort. Slices
  whose footer statistics put every offset inside the interval are read unfiltered (the
  offset column is then not read at all), slices wholly outside are not read.
- When the query is *narrow* (`is_narrow`: only projections, filters, unions and
  generators, all deterministic) every output row stays in the partition of the input
  row it came from, so the partitions of the output in index order are exactly the
  single-partition output. Other queries (aggregations, joins, windows, sorts, limits,
  non-deterministic functions) read each input as one partition, as kamu does, so their
  shuffles see one ordered map output.
- Spark writes one part file per output partition on all cores, and
  `engine.parquet_merge` concatenates them in partition order into the single output
  file, writing the offset, system-time (and absent op) columns itself: they are
  arithmetic sequences over the file, so no Spark task has to count rows.

`execute_transform` never raises for a bad request or a Spark failure: it returns the
`TransformResponseInvalidQuery` / `TransformResponseInternalError` variant.
"""

from __future__ import annotations

import contextlib
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from engine.checkpoint import extract_state, read_watermarks, write_checkpoint
from engine.errors import EngineInternalError, InvalidQuery
from engine.inputs import (
    InputPlan,
    is_narrow,
    parallel_min_bytes,
    plan_input,
    read_input,
    stateful_nodes,
)
from engine.output import finish_output
from engine.parquet_merge import SequenceColumn
from engine.row_changelog import changelog_ops, has_op_column, per_op_result
from engine.s3io.settings import staging_of, stateful_refused
from engine.sql import (
    is_query_error,
    query_steps,
    register_view,
    run_steps,
    spark_message,
    write_single_parquet,
)
from engine.streaming.execute import run_stateful, temporal_sources
from engine.streaming.rewrite import rewrite_steps
from engine.streaming.state import StreamState, load_state, save_state
from fbs.model.engine import (
    TransformRequest,
    TransformRequestInput,
    TransformResponseInternalError,
    TransformResponseInvalidQuery,
    TransformResponseSuccess,
)
from fbs.model.events import OffsetInterval
from fbs.model.source import SqlQueryStep
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from storage.s3.url import S3Location

__all__ = [
    "MAX_INPUTS",
    "MAX_INPUT_FILES",
    "TransformResult",
    "compute_watermarks",
    "execute_transform",
]

TransformResult = (
    TransformResponseSuccess | TransformResponseInvalidQuery | TransformResponseInternalError
)

#: Most inputs of one transform.
MAX_INPUTS: Final = 1024
#: Most data files of one input.
MAX_INPUT_FILES: Final = 100_000
#: Offsets are Int64 in Parquet (kamu's Spark engine writes LongType).
MAX_OFFSET: Final = 2**63 - 1


def execute_transform(root: SparkSession, request: TransformRequest) -> TransformResult:
    """Run ``request`` in a child session of ``root``.

    Returns:
        `TransformResponseSuccess` (``new_offset_interval`` absent when no records were
        produced), `TransformResponseInvalidQuery` (bad SQL or output columns) or
        `TransformResponseInternalError` (unreadable inputs/checkpoint, Spark failures).
    """
    from engine.spark import request_session

    try:
        return _execute(request_session(root), request)
    except InvalidQuery as e:
        return TransformResponseInvalidQuery(message=e.message)
    except EngineInternalError as e:
        return TransformResponseInternalError(message=e.message, backtrace=e.backtrace)
    except Exception as e:
        return TransformResponseInternalError(
            message=spark_message(e), backtrace=traceback.format_exc()
        )


def compute_watermarks(
    inputs: tuple[TransformRequestInput, ...], prev_checkpoint_path: str | None
) -> tuple[dict[str, Timestamp], Timestamp | None]:
    """Per-input watermarks (DID multibase -> instant) and the resulting output watermark.

    Raises:
        CheckpointError: if the previous checkpoint cannot be read.
    """
    previous = read_watermarks(prev_checkpoint_path) if prev_checkpoint_path else {}
    per_input: dict[str, Timestamp] = {}
    keys = set()
    for inp in inputs:
        key = inp.dataset_id.as_multibase()
        keys.add(key)
        if inp.explicit_watermarks:
            per_input[key] = max(w.event_time for w in inp.explicit_watermarks)
        elif key in previous:
            per_input[key] = previous[key]
    complete = bool(keys) and keys <= per_input.keys()
    return per_input, (min(per_input.values()) if complete else None)


def _execute(session: SparkSession, request: TransformRequest) -> TransformResult:
    steps = query_steps(request.transform)
    _check_request(request)
    query = rewrite_steps(steps, temporal_sources(request))
    staging = staging_of(session)
    min_bytes = parallel_min_bytes(session)
    scratch = Path(request.new_checkpoint_path).parent
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".odf-state-", dir=scratch) as tmp:
        with _reading_inputs():
            per_input, new_watermark = compute_watermarks(
                request.query_inputs, request.prev_checkpoint_path or None
            )
            prev = _previous_state(request.prev_checkpoint_path, Path(tmp) / "prev")
            plans = [plan_input(inp) for inp in request.query_inputs]
            split = [p.splittable(min_bytes) for p in plans]
        state_dir = Path(tmp) / "next"
        try:
            stateful = prev is not None or bool(query.windows or query.temporal_joins)
            nodes: list[str] = []
            if not stateful:
                result = _plan_query(session, request, plans, list(query.steps), split)
                nodes = stateful_nodes(result)
                stateful = bool(nodes)
            if stateful and staging is not None:
                raise stateful_refused(
                    state=prev is not None,
                    windows=bool(query.windows),
                    temporal_joins=bool(query.temporal_joins),
                    nodes=nodes,
                )
            if stateful:
                run = run_stateful(session, request, query, plans, new_watermark, prev, state_dir)
                save_state(state_dir, run.state)
                num_records = run.num_records
            else:
                ops = changelog_ops(request, plans)
                if ops and not has_op_column(result, request):
                    # Retractions in the input stay retractions (`engine.row_changelog`).
                    result = per_op_result(session, request, plans, list(query.steps), ops)
                elif any(split) and not is_narrow(result):
                    result = _plan_query(
                        session, request, plans, list(query.steps), [False] * len(plans)
                    )
                out, columns, schema = finish_output(result, request)
                num_records = _write_output(out, request, columns, schema, staging)
        except (EngineInternalError, InvalidQuery):
            raise
        except Exception as e:
            if is_query_error(e):
                raise InvalidQuery(spark_message(e)) from None
            raise
        if per_input or stateful:
            write_checkpoint(
                request.new_checkpoint_path, per_input, state_dir if stateful else None
            )
    interval = (
        OffsetInterval(start=request.next_offset, end=request.next_offset + num_records - 1)
        if num_records > 0
        else None
    )
    return TransformResponseSuccess(new_offset_interval=interval, new_watermark=new_watermark)


def _write_output(
    out: DataFrame,
    request: TransformRequest,
    columns: list[SequenceColumn | int],
    schema: StructType,
    staging: S3Location | None,
) -> int:
    """Write the one output file: through the S3 staging location when there is one."""
    if staging is None:
        return write_single_parquet(out, request.new_data_path, columns, spark_schema=schema)
    from engine.s3io.write import write_s3_output

    return write_s3_output(
        out, request.new_data_path, columns, spark_schema=schema, staging=staging
    )


def _previous_state(path: str | None, into: Path) -> tuple[StreamState, Path] | None:
    """The stream state of the previous checkpoint, extracted into ``into`` (None: none)."""
    if not path or not extract_state(path, into):
        return None
    state = load_state(into)
    return None if state is None else (state, into)


def _plan_query(
    session: SparkSession,
    request: TransformRequest,
    plans: list[InputPlan],
    steps: list[SqlQueryStep],
    split: list[bool],
) -> DataFrame:
    """Register the inputs (across partitions where ``split``) and plan the steps."""
    for inp, plan, parallel in zip(request.query_inputs, plans, split, strict=True):
        with _reading_inputs():
            df = read_input(session, inp, plan, parallel=parallel)
        register_view(df, inp.query_alias)
    return run_steps(session, steps)


@contextlib.contextmanager
def _reading_inputs() -> Iterator[None]:
    """Turn failures while reading inputs (Spark, checkpoint) into `EngineInternalError`."""
    try:
        yield
    except EngineInternalError:
        raise
    except Exception as e:
        raise EngineInternalError(
            f"cannot read inputs: {spark_message(e)}", traceback.format_exc()
        ) from None


def _check_request(request: TransformRequest) -> None:
    if len(request.query_inputs) > MAX_INPUTS:
        raise EngineInternalError(f"{len(request.query_inputs)} inputs exceed {MAX_INPUTS}")
    if request.next_offset > MAX_OFFSET:
        raise EngineInternalError(f"next_offset {request.next_offset} does not fit Int64")
    aliases = [inp.query_alias.lower() for inp in request.query_inputs]
    if len(set(aliases)) != len(aliases):
        raise InvalidQuery("two inputs have the same query alias")
    for inp in request.query_inputs:
        if len(inp.data_paths) > MAX_INPUT_FILES:
            raise EngineInternalError(
                f"input {inp.query_alias!r} has {len(inp.data_paths)} files (limit "
                f"{MAX_INPUT_FILES})"
            )
