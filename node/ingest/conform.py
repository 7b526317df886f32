"""Fitting new input to the dataset's schema: event time, casts, schema evolution.

The first data defines the schema (system columns + the data columns, from
`fbs.arrow_schema.data_schema_from_arrow`, encoding attributes stripped). Later data may
omit optional columns (filled with nulls) and add new nullable columns (a new
``SetDataSchema`` with the columns appended); a column whose values cannot be cast to
the dataset's type, a missing required column or a new required column is refused with
`SchemaError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from fbs.arrow_values import int_scalar
from fbs.model import DatasetVocabulary, SetDataSchema, Timestamp
from node.ingest.errors import SchemaError
from storage.chain import ChainState

__all__ = [
    "conform",
    "dataset_arrow_schema",
    "schema_change",
    "schema_event",
    "system_columns",
    "with_event_time",
]


def dataset_arrow_schema(state: ChainState | None) -> pa.Schema | None:
    """The dataset's schema as Arrow (``None`` before its first ``SetDataSchema``)."""
    if state is None or state.data_schema is None or state.data_schema.schema is None:
        return None
    from fbs.arrow_schema import arrow_schema_from_data

    return arrow_schema_from_data(state.data_schema.schema)


def with_event_time(table: pa.Table, vocab: DatasetVocabulary, value: Timestamp) -> pa.Table:
    """``table`` with a typed event time column: ISO-8601 text is cast, a missing column is
    added holding ``value``.

    Raises:
        SchemaError: event times as text that is not ISO-8601.
    """
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


def conform(
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


def schema_event(schema: pa.Schema) -> SetDataSchema:
    """The ``SetDataSchema`` declaring ``schema`` (encoding attributes stripped)."""
    from fbs.arrow_schema import data_schema_from_arrow

    return SetDataSchema(schema=data_schema_from_arrow(schema, strip_encoding=True))


def schema_change(
    target: pa.Schema | None, evolved: pa.Schema | None, new_schema: pa.Schema
) -> SetDataSchema | None:
    """The ``SetDataSchema`` to commit: the first schema, an evolved one, or none."""
    if target is None:
        return schema_event(new_schema)
    if evolved is not None:
        return schema_event(evolved)
    return None


def system_columns(vocab: DatasetVocabulary) -> set[str]:
    """The columns the slice writer adds (offset, operation type, system time)."""
    return {vocab.offset_column, vocab.operation_type_column, vocab.system_time_column}
