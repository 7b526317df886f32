"""Shared pieces of the transform and raw-query executors.

- `query_steps`: the SQL steps of a `TransformSql` (``query`` or ``queries``), checked;
- `register_view` / `run_steps`: temp views named exactly as the aliases (backtick-quoted,
  so aliases such as ``com.example.trades`` stay single identifiers);
- `write_single_parquet`: Spark writes a folder of part files (in parallel) into a temp
  folder next to the target; `engine.parquet_merge` joins them into the one output file;
- `is_query_error`: which Spark exceptions are the user's query's fault.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from engine.errors import InvalidQuery
from engine.parquet_merge import SequenceColumn, part_files, write_merged
from engine.spark import ENGINE_NAME
from fbs.model.source import SqlQueryStep, TransformSql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_QUERY_STEPS",
    "is_query_error",
    "query_steps",
    "quote_identifier",
    "register_view",
    "run_steps",
    "spark_message",
    "trim_spark_message",
    "write_single_parquet",
]

#: Most SQL steps in one transform.
MAX_QUERY_STEPS: Final = 256
#: Longest SQL text of one step.
MAX_QUERY_CHARS: Final = 1024 * 1024


def query_steps(transform: TransformSql, *, check_engine: bool = True) -> list[SqlQueryStep]:
    """The steps of ``transform``, the unaliased output step last.

    A single ``query`` is one unaliased step. With ``queries`` every step but the last
    must have an alias and the last must have none.

    Raises:
        InvalidQuery: for another engine's transform, no/both query forms, misplaced
            aliases, or a limit exceeded.
    """
    if check_engine and transform.engine.lower() != ENGINE_NAME:
        raise InvalidQuery(
            f"transform is for engine {transform.engine!r}; this engine is {ENGINE_NAME!r}"
        )
    if transform.query is not None and transform.queries:
        raise InvalidQuery("transform has both 'query' and 'queries'")
    if transform.query is not None:
        steps = [SqlQueryStep(alias=None, query=transform.query)]
    elif transform.queries:
        steps = list(transform.queries)
    else:
        raise InvalidQuery("transform has no query")
    if len(steps) > MAX_QUERY_STEPS:
        raise InvalidQuery(f"transform has {len(steps)} steps (limit {MAX_QUERY_STEPS})")
    for i, step in enumerate(steps):
        last = i == len(steps) - 1
        if len(step.query) > MAX_QUERY_CHARS:
            raise InvalidQuery(f"query step {i} is longer than {MAX_QUERY_CHARS} characters")
        if last and step.alias is not None:
            raise InvalidQuery("the last query step is the output and must have no alias")
        if not last and not step.alias:
            raise InvalidQuery(f"query step {i} needs an alias (only the last step has none)")
    return steps


def quote_identifier(name: str) -> str:
    """Backtick-quote ``name`` as one Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def register_view(df: DataFrame, name: str) -> None:
    """Register ``df`` as temp view ``name`` (any characters; replaces a view of that name)."""
    df.createOrReplaceTempView(quote_identifier(name))


def run_steps(session: SparkSession, steps: list[SqlQueryStep]) -> DataFrame:
    """Run the steps in order, registering aliased ones as views; return the output step.

    Raises:
        pyspark AnalysisException/ParseException: for bad SQL (see `is_query_error`).
    """
    result: DataFrame | None = None
    for step in steps:
        df = session.sql(step.query)
        if step.alias is None:
            result = df
        else:
            register_view(df, step.alias)
    if result is None:  # query_steps guarantees an output step
        raise InvalidQuery("transform has no output step")
    return result


def is_query_error(exc: BaseException) -> bool:
    """True for Spark errors caused by the query text (parse / analysis errors)."""
    from pyspark.errors import AnalysisException

    return isinstance(exc, AnalysisException)


def spark_message(exc: BaseException) -> str:
    """Spark's message for ``exc`` as one line (`trim_spark_message`)."""
    from pyspark.errors import PySparkException

    if isinstance(exc, PySparkException):
        msg = exc.getMessage() if hasattr(exc, "getMessage") else str(exc)
        return trim_spark_message(str(msg)) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


#: Sentences of Spark's messages about Spark itself (catalog search paths, DROP ... IF
#: EXISTS, configuration flags): not actions an ODF transform author can take.
_SPARK_ADVICE: Final = re.compile(
    r"\s*(?:Verify the spelling|If you did not qualify|To tolerate the error|"
    r"If necessary set|Please check the current catalog|You may get a different result|"
    r"Search path:).*?(?:\.(?=\s|$)|$)",
    re.MULTILINE,
)
#: Where the message proper ends: the JVM stack, the logical plan, the quoted SQL.
_SPARK_TAIL: Final = re.compile(r"\n\s*(?:at |'|\+-|:\s*\+-|== SQL|== Physical|== Analyzed)")


def trim_spark_message(text: str) -> str:
    """Spark's error text as one line: the message without the JVM stack, the logical
    plan, the echoed SQL, the ``SQLSTATE`` code and Spark's own advice."""
    text = text.replace("\r", "")
    text = _SPARK_TAIL.split(text, maxsplit=1)[0]
    text = text.split("\tat ", 1)[0]
    text = re.sub(r"\s*SQLSTATE: \w+;?", "", text)
    text = _SPARK_ADVICE.sub("", text)
    text = " ".join(text.split())
    return text.rstrip(" ;")


def write_single_parquet(
    df: DataFrame,
    target: str | os.PathLike[str],
    columns: Sequence[SequenceColumn | int] | None = None,
    *,
    spark_schema: StructType | None = None,
) -> int:
    """Write ``df`` as exactly one Parquet file at ``target`` (replaced atomically).

    Spark writes one snappy part file per partition, on all cores; `merge_parts` joins
    them in partition order (the order ``coalesce(1)`` gives) without re-encoding.

    Args:
        df: the rows to write.
        target: the output file.
        columns: output columns (see `merge_parts`); default: ``df``'s columns as they are.
        spark_schema: Spark schema of the output when ``columns`` adds columns.

    Returns:
        The number of rows written.

    Raises:
        EngineInternalError: if the parts cannot be merged or moved into place.
    """

    def write_parts(tmp_dir: Path) -> list[Path]:
        df.write.mode("errorifexists").option("compression", "snappy").parquet(str(tmp_dir))
        return part_files(tmp_dir)

    return write_merged(
        target,
        write_parts,
        list(range(len(df.columns))) if columns is None else columns,
        spark_schema_json=None if spark_schema is None else spark_schema.json(),
    )
