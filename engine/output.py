"""The output file of a transform: checks of the query's columns and how the merge completes them.

Spark writes the query's columns (``op`` first, under the vocabulary's spelling, when the
query has one); `engine.parquet_merge` puts ``offset``, ``op`` (when absent) and
``system_time`` in front as arithmetic sequences.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from engine.errors import InvalidQuery
from engine.parquet_merge import SequenceColumn
from engine.sql import quote_identifier
from fbs.model.engine import TransformRequest
from fbs.model.events import DatasetVocabulary

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

__all__ = ["OP_APPEND", "finish_output"]

#: Operation type written when the query has no ``op`` column.
OP_APPEND: Final = 0


def finish_output(
    result: DataFrame, request: TransformRequest
) -> tuple[DataFrame, list[SequenceColumn | int], StructType]:
    """Check the query's output; return what Spark writes and how the merge completes it.

    Spark writes the query's columns (with ``op`` first, under the vocabulary's spelling,
    when the query has one); the merge puts ``offset``, ``op`` (when absent) and
    ``system_time`` in front as sequences. Also returns the Spark schema of the file.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        StructField,
        StructType,
        TimestampType,
    )

    vocab: DatasetVocabulary = request.vocab
    op_field = _checked_op_field(result, vocab)

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
        if result.schema.fields[0].name == vocab.operation_type_column:
            out = result  # already first, under the vocabulary's spelling
        else:
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


def _checked_op_field(result: DataFrame, vocab: DatasetVocabulary) -> StructField | None:
    """The query's ``op`` column, if it has one, after checking the output's columns.

    Raises:
        InvalidQuery: a system column in the output, no (or a mistyped) event time column,
            or an ``op`` column that is not INT.
    """
    from pyspark.sql.types import DateType, IntegerType, TimestampType

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
    return op_field
