"""The staging of ``odf sql`` (`node.sql.query`): the data files a query reads, checked.

For each dataset a query reads, a temp directory under ``.odf/run/sql/`` holds hard
links (copies across filesystems) of exactly the data files the dataset's chain
references, each hash-checked first (`storage.verified`: one ``lstat`` for a slice
checked before), so unreferenced objects (left by interrupted commits) and damaged ones
are never read; a dataset with a schema but no data gets an empty Parquet file with its
schema. The list of a dataset's slices and its schema come from the slice-list cache of
its current head (`storage.catalog.cached_slices`), else from a walk of its chain, which
then writes that cache: a query over datasets that did not change since the last one
decodes no block. Light on imports, like `node.sql.query`: the embedded path must start fast.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa

from node.sql.embedded import StagedTable
from storage.catalog import (
    DatasetEntry,
    SliceList,
    cached_slices,
    open_dataset,
    state_cache_path,
    write_slices_cache,
)
from storage.layout import DatasetLayout
from storage.verified import VerifiedObjects, record_path_for

if TYPE_CHECKING:
    from fbs.model import SetDataSchema

__all__ = ["SQL_DIR", "stage", "stage_dataset", "work_dir"]

#: Where queries stage their tables, under ``.odf/run/``.
SQL_DIR: Final = "sql"


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _declared_schema(event: SetDataSchema) -> pa.Schema | None:
    """The Arrow schema of a SetDataSchema, None if it cannot be converted (the
    embedded engine then infers it from the files). Not `node.transform.arrow_schema_of`:
    that module is too heavy to import on the embedded path."""
    from fbs.arrow_schema import arrow_schema_from_data
    from fbs.errors import FbsError

    try:
        if event.schema is not None:
            return arrow_schema_from_data(event.schema)
        if event.raw_arrow_schema is not None:
            return pa.ipc.read_schema(pa.py_buffer(event.raw_arrow_schema))
    except (FbsError, pa.ArrowException, ValueError):
        return None
    return None


def _list_from_chain(root: Path, entry: DatasetEntry) -> SliceList | None:
    """The slice list of ``entry``, from its chain (decoded); kept for the next query.

    Raises:
        InputNotReady: a dataset without data whose schema cannot be converted.
    """
    from fbs.rules import new_data

    ds = open_dataset(root, entry)
    state = ds.state()
    if state is None:
        return None
    slices = []
    schema: pa.Schema | None = None
    if state.data_schema is not None:
        for _h, _raw, block in ds.iter_blocks(state.head):
            d = new_data(block.event)
            if d is not None:
                slices.append((d.physical_hash, d.size))
        slices.reverse()
        if slices:
            schema = _declared_schema(state.data_schema)
        else:
            from node.transform import arrow_schema_of

            schema = arrow_schema_of(state.data_schema, entry.alias)
    listing = SliceList(
        state.head,
        tuple(slices),
        state.data_schema is not None,
        None if schema is None else schema.serialize().to_pybytes(),
    )
    write_slices_cache(root, entry, listing)
    return listing


def stage_dataset(root: Path, entry: DatasetEntry, target: Path) -> StagedTable | None:
    """Fill ``target`` with the dataset's data files; None if it has nothing to read.

    Raises:
        MissingObject / DamagedObject: a slice is missing or does not match its block.
    """
    listing = cached_slices(root, entry) or _list_from_chain(root, entry)
    if listing is None or not listing.has_schema:
        return None
    schema = None if listing.schema is None else pa.ipc.read_schema(pa.py_buffer(listing.schema))
    target.mkdir(parents=True)
    data = DatasetLayout(entry.path).data.root
    verifier = VerifiedObjects(record_path_for(state_cache_path(root, entry.id)))
    try:  # every slice checked against its block before it is staged
        for h, size in listing.slices:
            verifier.check(data, "data", h, size)
    finally:
        verifier.flush()
    for h, _size in listing.slices:
        name = h.to_multibase()
        _link(data / name, target / f"{name}.parquet")
    if not listing.slices:
        import pyarrow.parquet as pq

        assert schema is not None  # `_list_from_chain` keeps one for a dataset without data
        pq.write_table(schema.empty_table(), target / "empty.parquet")
    return StagedTable(entry.alias, target, schema)


@contextlib.contextmanager
def work_dir(root: Path) -> Iterator[Path]:
    """A fresh directory under ``.odf/run/sql/`` for one query, removed afterwards."""
    base = root / "run" / SQL_DIR
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="q-", dir=base))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stage(
    root: Path, picked: Sequence[DatasetEntry], work: Path, first: int = 0
) -> list[StagedTable]:
    """Stage each of ``picked`` under ``work`` (``t<n>``, from ``first``); those with a table."""
    staged = []
    for n, entry in enumerate(picked, start=first):
        table = stage_dataset(root, entry, work / f"t{n}")
        if table is not None:
            staged.append(table)
    return staged
