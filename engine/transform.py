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
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from engine.checkpoint import read_watermarks, write_checkpoint
from engine.errors import EngineInternalError, InvalidQuery
from engine.inputs import InputPlan, is_narrow, parallel_min_bytes, plan_input, read_input
from engine.parquet_merge import SequenceColumn
from engine.sql import (
    is_query_error,
    query_steps,
    quote_identifier,
    register_view,
    run_steps,
    spark_message,
    write_single_parquet,
)
from fbs.model.engine import (
    TransformRequest,
    TransformRequestInput,
    TransformResponseInternalError,
    TransformResponseInvalidQuery,
    TransformResponseSuccess,
)
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import SqlQueryStep
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "MAX_INPUTS",
    "MAX_INPUT_FILES",
    "OP_APPEND",
    "TransformResult",
    "compute_watermarks",
    "execute_transform",
]

TransformResult = (
    TransformResponseSuccess | TransformResponseInvalidQuery | TransformResponseInternalError
)

#: Operation type written when the query has no ``op`` column.
OP_APPEND: Final = 0
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
    min_bytes = parallel_min_bytes(session)
    with _reading_inputs():
        per_input, new_watermark = compute_watermarks(
            request.query_inputs, request.prev_checkpoint_path or None
        )
        plans = [plan_input(inp) for inp in request.query_inputs]
        split = [p.splittable(min_bytes) for p in plans]

    try:
        result = _plan_query(session, request, plans, steps, split)
        if any(split) and not is_narrow(result):
            result = _plan_query(session, request, plans, steps, [False] * len(plans))
        out, columns, schema = _finish_output(result, request)
        num_records = write_single_parquet(out, request.new_data_path, columns, spark_schema=schema)
    except (EngineInternalError, InvalidQuery):
        raise
    except Exception as e:
        if is_query_error(e):
            raise InvalidQuery(spark_message(e)) from None
        raise

    if per_input:
        write_checkpoint(request.new_checkpoint_path, per_input)
    interval = (
        OffsetInterval(start=request.next_offset, end=request.next_offset + num_records - 1)
        if num_records > 0
        else None
    )
    return TransformResponseSuccess(new_offset_interval=interval, new_watermark=new_watermark)


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


def _finish_output(
    result: DataFrame, request: TransformRequest
) -> tuple[DataFrame, list[SequenceColumn | int], StructType]:
    """Check the query's output; return what Spark writes and how the merge completes it.

    Spark writes the query's columns (with ``op`` first, under the vocabulary's spelling,
    when the query has one); the merge puts ``offset``, ``op`` (when absent) and
    ``system_time`` in front as sequences. Also returns the Spark schema of the file.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        DateType,
        IntegerType,
        LongType,
        StructField,
        StructType,
        TimestampType,
    )

    vocab: DatasetVocabulary = request.vocab
    fields = {f.name.lower(): f for f in result.schema.fields}
    for name in (vocab.offset_column, vocab.system_time_column):
        if name.lower() in fields:
            raise InvalidQuery(
                f"the query's output has a column {name!r}, which is a system column: rename "
                "it or configure the dataset vocabulary to use another name"
            )
    event_time = fields.get(vocab.event_time_column.lower())
    if event_time is None:
        raise InvalidQuery(
            f"the query's output has no event time column {vocab.event_time_column!r}"
        )
    if not isinstance(event_time.dataType, TimestampType | DateType):
        raise InvalidQuery(
            f"event time column {vocab.event_time_column!r} must be TIMESTAMP or DATE, got "
            f"{event_time.dataType.simpleString().upper()}"
        )
    op_field = fields.get(vocab.operation_type_column.lower())
    if op_field is not None and not isinstance(op_field.dataType, IntegerType):
        raise InvalidQuery(
            f"operation type column {op_field.name!r} must be INT, got "
            f"{op_field.dataType.simpleString().upper()}"
        )

    # Offsets follow the output's row order; Spark's TIMESTAMP_MILLIS writer floors.
    offset = SequenceColumn(
        name=vocab.offset_column, physical="INT64", first=request.next_offset, step=1
    )
    system_time = SequenceColumn(
        name=vocab.system_time_column,
        physical="INT64",
        first=request.system_time.nanos // 1_000_000,
        step=0,
        timestamp_millis=True,
    )
    head = [
        StructField(vocab.offset_column, LongType(), nullable=False),
        StructField(vocab.operation_type_column, IntegerType(), nullable=op_field is not None),
        StructField(vocab.system_time_column, TimestampType(), nullable=False),
    ]
    if op_field is None:
        out = result
        op_column: SequenceColumn | int = SequenceColumn(
            name=vocab.operation_type_column, physical="INT32", first=OP_APPEND, step=0
        )
        first_copied = 0
    else:
        head[1] = StructField(vocab.operation_type_column, IntegerType(), op_field.nullable)
        rest = [c for c in result.columns if c != op_field.name]
        # Written under the vocabulary's spelling even if the query used another case.
        out = result.select(
            F.col(quote_identifier(op_field.name)).alias(vocab.operation_type_column),
            *[F.col(quote_identifier(c)) for c in rest],
        )
        op_column = 0
        first_copied = 1
    copied = list(range(first_copied, len(out.columns)))
    schema = StructType([*head, *out.schema.fields[first_copied:]])
    return out, [offset, op_column, system_time, *copied], schema
