"""A stateless query over changelog inputs: each output row keeps its input row's ``op``.

A root merged as a snapshot or changelog, and any derivative with a non-monotonic query,
holds retractions and corrections (RFC-015 ``op`` 1 and 2) besides appends. A stateless
query (projection, filter, unnest: one input row at a time, no state) that read those rows
as plain rows would turn a retraction into one more append: the folded output would keep
rows its input no longer has. As in Flink, whose row kinds pass through such operators,
the query's output row for an input row carries that row's ``op`` here:

- the query runs once over the input rows that add (appends and corrections-to: ``op`` 0
  and 3) and once over those that remove (retractions and corrections-from: 1 and 2), and
  their rows are written as one output, tagged append (0) and retraction (1) respectively:
  the adding run first. Which types a slice holds is read from its Parquet footer's
  statistics (no data is read to find out).

For a query that maps each row on its own, the query over a subset of rows is the
subset's images, so the folded output is the query's answer over the folded input, for
any split of the input into pulls. Within one output slice the rows are grouped rather
than kept in input order (a query's output carries no input offset to restore it by), and
that is why corrections become plain retractions and appends: RFC-015 requires a ``+C`` to
follow its ``-C`` immediately, which grouped runs cannot give (``+C`` rows written before their
``-C`` rows make a changelog a strict reader, such as a ChangelogStream merge,
refuses). Adds before removes keeps the changelog well formed read in order: a
removal always comes after the row it removes, which may have been added in the same
slice. Flink keeps the pair, in input order; folded, the outputs are the same.
A query that selects ``op`` itself writes its own.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Final

from engine.inputs import read_input
from engine.sql import quote_identifier, register_view, run_steps

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame, SparkSession

    from engine.inputs import InputPlan
    from fbs.model.engine import TransformRequest
    from fbs.model.source import SqlQueryStep

#: The RFC-015 operation types an input slice may hold, in `changelog_ops`' order.
WRITE_ORDER: Final = (0, 3, 1, 2)

#: The output ``op`` of each input type, in the order the runs are written: the rows that
#: add a row (append, correct-to) as appends, then those that remove one (retract,
#: correct-from) as retractions (see the module docstring).
OUTPUT_OPS: Final = ((0, (0, 3)), (1, (1, 2)))


def changelog_ops(request: TransformRequest, plans: Sequence[InputPlan]) -> list[int]:
    """The operation types the new input rows may hold, in `WRITE_ORDER` (``[]``: appends
    only, by every slice's footer statistics; all types when a footer cannot tell)."""
    from engine.s3io.objects import input_object, max_op
    from engine.streaming.footers import max_op as footer_max_op  # as the state reads it
    from storage.s3.url import is_s3_url

    highest = 0
    for inp, plan in zip(request.query_inputs, plans, strict=True):
        for s in plan.slices:
            op_column = inp.vocab.operation_type_column
            found = (
                max_op(input_object(s.path), op_column)
                if is_s3_url(s.path)
                else footer_max_op(Path(s.path), op_column)
            )
            highest = max(highest, max(WRITE_ORDER) if found is None else found)
    return [] if highest == 0 else [op for op in WRITE_ORDER if op <= highest]


def has_op_column(result: DataFrame, request: TransformRequest) -> bool:
    """Whether the query's output has its own ``op`` column (then it is written as is)."""
    op = request.vocab.operation_type_column.lower()
    return any(f.name.lower() == op for f in result.schema.fields)


def per_op_result(
    session: SparkSession,
    request: TransformRequest,
    plans: Sequence[InputPlan],
    steps: list[SqlQueryStep],
    ops: Sequence[int],
) -> DataFrame:
    """The query run over the input rows that add, tagged append, then over those that
    remove, tagged retraction (`OUTPUT_OPS`; only the runs whose input types are in
    ``ops``), as one output (the ``op`` column first).

    Raises:
        pyspark AnalysisException/ParseException: bad SQL (see `engine.sql.is_query_error`).
    """
    from pyspark.sql import functions as F

    out_op = request.vocab.operation_type_column
    runs = []
    for tag, types in OUTPUT_OPS:
        present = [t for t in types if t in ops]
        if not present:
            continue
        for inp, plan in zip(request.query_inputs, plans, strict=True):
            df = read_input(session, inp, plan, parallel=False)
            own = F.col(quote_identifier(inp.vocab.operation_type_column))
            register_view(df.where(own.isin(present)), inp.query_alias)
        result = run_steps(session, steps)
        runs.append(result.select(F.lit(tag).cast("int").alias(out_op), "*"))
    return functools.reduce(lambda a, b: a.union(b), runs).coalesce(1)
