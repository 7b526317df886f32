"""Reading a dataset's slices, each verified first: as files, as checked bytes, as Arrow.

The readers here walk the metadata chain for the slices it names and check each against
its block (size, physical hash) through the dataset's `storage.verified.VerifiedObjects`
before handing it out: `verified_slice_paths` (files), `iter_slice_sources` (every slice,
with the bytes just hashed), `newest_slice_sources` (only the end of the chain).

`read_tail` is what ``odf tail`` and `node.api.DatasetView.tail` run: it reads the newest
slices that hold the records asked for (`newest_slice_sources`), so its cost follows
``n``, not the length of the dataset's history. Only pyarrow's Parquet
reader is imported here (not the ingest pipeline, whose logical-hash module makes
pyarrow import pandas).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from storage.errors import InvalidDataFile
from storage.verified import SliceSource

if TYPE_CHECKING:
    from fbs.multiformats import Multihash
    from storage.dataset import Dataset

__all__ = [
    "iter_slice_sources",
    "newest_slice_sources",
    "open_slice",
    "read_slices",
    "read_tail",
    "verified_slice_paths",
]


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
    table = read_slices(newest_slice_sources(dataset, n, head))
    return None if table is None else table.slice(max(0, table.num_rows - n))


def _slices(dataset: Dataset, head: Multihash | None) -> list[tuple[Multihash, int]]:
    from fbs.rules import new_data

    start = dataset.head() if head is None else head
    if start is None:
        return []
    out: list[tuple[Multihash, int]] = []
    for _h, _raw, block in dataset.iter_blocks(start):
        d = new_data(block.event)
        if d is not None:
            out.append((d.physical_hash, d.size))
    out.reverse()
    return out


def newest_slice_sources(
    dataset: Dataset, records: int, head: Multihash | None = None
) -> list[SliceSource]:
    """The newest slices up to ``head`` (default: the head) that hold at least ``records``
    records (at least one slice when there is one), oldest first, verified like
    `iter_slice_sources` (a slice not remembered comes with the bytes just hashed).

    The chain is walked from ``head`` only until those slices are found: reading the end
    of a dataset (``odf tail``) costs what it shows, not the length of its history.

    Raises:
        MissingObject / DamagedObject: one of those slices is missing or damaged.
    """
    from fbs.rules import new_data

    start = dataset.head() if head is None else head
    picked: list[tuple[Multihash, int]] = []
    total = 0
    for _h, _raw, block in dataset.iter_blocks(start) if start is not None else ():
        d = new_data(block.event)
        if d is not None:
            picked.append((d.physical_hash, d.size))
            total += d.offset_interval.end - d.offset_interval.start + 1
            if total >= records:
                break
    verifier = dataset.verified_objects
    root = dataset.layout.data.root
    try:
        return [
            SliceSource(
                h, root / h.to_multibase(), verifier.check(root, "data", h, size, keep=True)
            )
            for h, size in reversed(picked)
        ]
    finally:
        verifier.flush()


def iter_slice_sources(dataset: Dataset, head: Multihash | None = None) -> Iterator[SliceSource]:
    """Every data slice up to ``head`` (default: the head), oldest first, verified.

    A slice not verified before is read whole and hashed; its bytes come with it
    (``data``), so the caller parses exactly what was checked. A remembered one comes
    as a path only (``data`` None). The next slice is checked on a worker thread while
    the caller parses this one (SHA3 releases the GIL): at most two slices in memory.

    Raises:
        MissingObject / DamagedObject: a missing or damaged slice (when it is reached).
    """
    from concurrent.futures import ThreadPoolExecutor

    verifier = dataset.verified_objects
    root = dataset.layout.data.root
    items = _slices(dataset, head)

    def check(i: int) -> bytes | None:
        h, size = items[i]
        return verifier.check(root, "data", h, size, keep=True)

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="odf-verify") as pool:
            ahead = pool.submit(check, 0) if items else None
            for i, (h, _size) in enumerate(items):
                assert ahead is not None
                data = ahead.result()
                ahead = pool.submit(check, i + 1) if i + 1 < len(items) else None
                yield SliceSource(h, root / h.to_multibase(), data)
    finally:
        verifier.flush()


def verified_slice_paths(dataset: Dataset, head: Multihash | None = None) -> list[Path]:
    """Files of every data slice up to ``head`` (default: the head), oldest first, each
    checked against its block's size and physical hash (cheap when remembered).

    Raises:
        MissingObject / DamagedObject: a missing or damaged slice.
    """
    verifier = dataset.verified_objects
    root = dataset.layout.data.root
    out = []
    try:
        for h, size in _slices(dataset, head):
            verifier.check(root, "data", h, size)
            out.append(root / h.to_multibase())
    finally:
        verifier.flush()
    return out
