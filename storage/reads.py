"""Reading verified slices as Arrow tables: all of them in order, or only the end.

`read_tail` is what ``odf tail`` and `node.api.DatasetView.tail` run: it reads the newest
slices that hold the records asked for (`storage.verified.newest_slice_sources`), so its
cost follows ``n``, not the length of the dataset's history. Only pyarrow's Parquet
reader is imported here (not the ingest pipeline, whose logical-hash module makes
pyarrow import pandas).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from storage.errors import InvalidDataFile

if TYPE_CHECKING:
    from fbs.multiformats import Multihash
    from storage.dataset import Dataset
    from storage.verified import SliceSource

__all__ = ["open_slice", "read_slices", "read_tail"]


def open_slice(src: SliceSource) -> pq.ParquetFile:
    """The verified slice as Parquet: from the bytes just hashed, else from its file."""
    return pq.ParquetFile(src.path if src.data is None else pa.BufferReader(src.data))


def read_slices(
    sources: Iterable[SliceSource], columns: Sequence[str] | None = None
) -> pa.Table | None:
    """The records of verified ``sources`` in order as one table (``None``: no slice).

    Slices written under older schemas get the newer columns as nulls.

    Raises:
        InvalidDataFile: a data file that is not readable Parquet.
    """
    tables = []
    for src in sources:
        try:
            pf = open_slice(src)
            cols = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
            tables.append(pf.read(columns=cols, use_threads=True))
        except (pa.ArrowException, OSError) as e:
            raise InvalidDataFile(f"data file {src.path.name}: {e}") from None
    return pa.concat_tables(tables, promote_options="permissive") if tables else None


def read_tail(dataset: Dataset, n: int, head: Multihash | None = None) -> pa.Table | None:
    """The last ``n`` records up to ``head`` (default: the head), with the columns of the
    slices they come from; ``None`` when the dataset has no slice yet.

    Raises:
        MissingObject / DamagedObject: a slice it needs is missing or damaged.
        InvalidDataFile: a slice it needs is not readable Parquet.
    """
    from storage.verified import newest_slice_sources

    table = read_slices(newest_slice_sources(dataset, n, head))
    return None if table is None else table.slice(max(0, table.num_rows - n))
