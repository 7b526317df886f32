"""What a data slice's Parquet footer tells without reading its rows."""

from __future__ import annotations

from pathlib import Path

__all__ = ["max_op"]


def max_op(path: Path, op_column: str) -> int | None:
    """The largest ``op`` of a Parquet file by its statistics (None: unknown)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (OSError, ValueError):
        return None  # Spark reports the unreadable file
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if op_column not in names:
        return 0
    index = names.index(op_column)
    best = 0
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max:
            return None
        best = max(best, int(stats.max), abs(int(stats.min)))
    return best
