"""Execute a `RawQueryRequest`: SQL over Parquet files, one Parquet file out.

The input files are read together and registered as the view ``input``; the transform's
SQL steps run as in `engine.transform` (aliased steps become views, the last step is the
output), and the output is written as one snappy Parquet file at ``output_data_path``
with no column checks or system columns (ingest pre-processing adds those later).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Final

from engine.errors import EngineInternalError, InvalidQuery
from engine.sql import (
    is_query_error,
    query_steps,
    register_view,
    run_steps,
    spark_message,
    write_single_parquet,
)
from fbs.model.engine import (
    RawQueryRequest,
    RawQueryResponseInternalError,
    RawQueryResponseInvalidQuery,
    RawQueryResponseSuccess,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["INPUT_VIEW", "MAX_RAW_INPUT_FILES", "RawQueryResult", "execute_raw_query"]

RawQueryResult = (
    RawQueryResponseSuccess | RawQueryResponseInvalidQuery | RawQueryResponseInternalError
)

#: Name of the view holding the input files.
INPUT_VIEW: Final = "input"
#: Most input files of one raw query.
MAX_RAW_INPUT_FILES: Final = 100_000


def execute_raw_query(root: SparkSession, request: RawQueryRequest) -> RawQueryResult:
    """Run ``request`` in a child session of ``root``.

    Returns:
        `RawQueryResponseSuccess` with the number of records written,
        `RawQueryResponseInvalidQuery` for bad SQL, or `RawQueryResponseInternalError`.
    """
    from engine.spark import request_session

    try:
        return _execute(request_session(root), request)
    except InvalidQuery as e:
        return RawQueryResponseInvalidQuery(message=e.message)
    except EngineInternalError as e:
        return RawQueryResponseInternalError(message=e.message, backtrace=e.backtrace)
    except Exception as e:
        return RawQueryResponseInternalError(
            message=spark_message(e), backtrace=traceback.format_exc()
        )


def _execute(session: SparkSession, request: RawQueryRequest) -> RawQueryResult:
    import pyarrow.parquet as pq

    steps = query_steps(request.transform)
    paths = list(request.input_data_paths)
    if len(paths) > MAX_RAW_INPUT_FILES:
        raise EngineInternalError(f"{len(paths)} input files exceed {MAX_RAW_INPUT_FILES}")
    if paths:
        try:
            register_view(session.read.parquet(*paths), INPUT_VIEW)
        except Exception as e:
            raise EngineInternalError(
                f"cannot read inputs: {spark_message(e)}", traceback.format_exc()
            ) from None
    try:
        write_single_parquet(run_steps(session, steps), request.output_data_path)
    except Exception as e:
        if is_query_error(e):
            raise InvalidQuery(spark_message(e)) from None
        raise
    try:
        num_records = int(pq.read_metadata(request.output_data_path).num_rows)
    except (OSError, ValueError) as e:
        raise EngineInternalError(f"cannot read back the output: {e}") from None
    return RawQueryResponseSuccess(num_records=num_records)
