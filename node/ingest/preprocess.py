"""Preprocess: a source's SQL run over the new input on the engine, before it is conformed.

The engine is the one transform, replay, SQL and validation use: `node.engine_manager`
(``$ODF_ENGINE_ADDRESS`` or the workspace config, else the workspace's shared engine,
started on demand and reused; `node.engine_manager.dataset_engine`). It is reached only
when a preprocess step runs, so ingest without one never starts or leases an engine.

The query goes to the engine as the contract's ``RawQueryRequest`` (``ExecuteRawQuery``):
SQL steps over Parquet files registered as the view ``input``, one Parquet file out, no
system columns (ingest adds those afterwards).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from fbs.model import Transform
from node.ingest.errors import PreprocessError

if TYPE_CHECKING:
    from engine.client import EngineClient
    from storage.dataset import Dataset

__all__ = ["EngineProvider", "engine_provider", "preprocess"]

#: Returns the engine client; called only when a preprocess query is about to run.
EngineProvider = Callable[[], "EngineClient"]


def engine_provider(dataset: Dataset, given: EngineClient | None = None) -> EngineProvider:
    """``given``, or the engine for ``dataset`` (`node.engine_manager.engine_provider`:
    looked up on the first call and remembered for the later ones)."""
    from node.engine_manager import engine_provider as lookup

    return lookup(dataset, given)


def preprocess(
    transform: Transform, table: pa.Table, workdir: Path, engine: EngineProvider
) -> pa.Table:
    """Run ``transform`` over ``table`` (view ``input``) on the engine; its result.

    The table goes to the engine as ``workdir/input.parquet``; the result comes back as
    ``workdir/output.parquet``.

    Raises:
        PreprocessError: invalid SQL, an engine-side failure, or an unreadable result.
        node.errors.EngineManagerError: no engine could be located or started.
        engine.errors.EngineUnavailable / EngineTimeout: the engine cannot be reached.
    """
    from engine.client import raise_for_result
    from engine.errors import EngineInternalError, InvalidQuery
    from fbs.model import RawQueryRequest
    from fbs.rules import normalize_transform

    workdir.mkdir(parents=True, exist_ok=True)
    src, out = workdir / "input.parquet", workdir / "output.parquet"
    pq.write_table(table, src, coerce_timestamps="ms", allow_truncated_timestamps=True)
    request = RawQueryRequest(
        input_data_paths=(str(src),),
        transform=normalize_transform(transform),
        output_data_path=str(out),
    )
    client = engine()
    try:
        raise_for_result(client.execute_raw_query(request))
    except (InvalidQuery, EngineInternalError) as e:  # protocol errors included
        raise PreprocessError(f"preprocess query failed: {e}") from None
    try:
        return pq.read_table(out)
    except (pa.ArrowException, OSError) as e:
        raise PreprocessError(f"preprocess output is not readable: {e}") from None
