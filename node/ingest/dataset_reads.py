"""Reading a dataset's existing records: the changelog, the live state of a keyed dataset,
the verified slice files and the vocabulary naming the system columns.

Every slice is checked against its block (size, physical hash) before it is read
(`storage.verified`). Ingest reads existing data only for keyed merges; the Python API
(`node.api`) and the transform tests read through here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from fbs.model import DatasetVocabulary, Multihash
from node.ingest.writer import DEFAULT_VOCAB

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from storage.chain import ChainState
    from storage.dataset import Dataset
    from storage.verified import SliceSource

__all__ = ["read_changelog", "read_live_state", "slice_paths", "vocab_of"]


def vocab_of(state: ChainState | None) -> DatasetVocabulary:
    """The dataset vocabulary: the SetVocab's names over the defaults."""
    base = DatasetVocabulary()
    v = None if state is None else state.vocab
    if v is None:
        return base
    return DatasetVocabulary(
        offset_column=v.offset_column or base.offset_column,
        operation_type_column=v.operation_type_column or base.operation_type_column,
        system_time_column=v.system_time_column or base.system_time_column,
        event_time_column=v.event_time_column or base.event_time_column,
    )


def slice_paths(dataset: Dataset, head: Multihash | None = None) -> list[Path]:
    """Data files of every ``new_data`` up to ``head`` (default: the current head), oldest first,
    each checked against its block's size and physical hash (`storage.verified`).

    Raises:
        CorruptChain / ObjectNotFound: an unreadable chain or a missing data file.
        DamagedObject: a data file that differs from its metadata.
    """
    from storage.reads import verified_slice_paths

    return verified_slice_paths(dataset, head)


def _open_slice(src: SliceSource) -> pq.ParquetFile:
    """The verified slice as Parquet (`storage.reads.open_slice`)."""
    from storage.reads import open_slice

    return open_slice(src)


def read_changelog(
    dataset: Dataset,
    *,
    head: Multihash | None = None,
    columns: Sequence[str] | None = None,
    schema: pa.Schema | None = None,
) -> pa.Table | None:
    """All records up to ``head`` as one table (``None`` if there are none).

    Slices written under older schemas get the newer columns as nulls.

    Raises:
        storage.errors.InvalidDataFile: a data file that is not readable Parquet.
        storage.errors.DamagedObject / ObjectNotFound: a damaged or missing data file.
    """
    from storage.reads import iter_slice_sources, read_slices

    table = read_slices(iter_slice_sources(dataset, head), columns)
    if table is None:
        return None
    if schema is not None:
        wanted = [f for f in schema if columns is None or f.name in columns]
        cols = [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in wanted
        ]
        table = pa.table(cols, names=[f.name for f in wanted])
    return table


def read_live_state(
    dataset: Dataset,
    primary_key: Sequence[str],
    *,
    head: Multihash | None = None,
    vocab: DatasetVocabulary = DEFAULT_VOCAB,
) -> pa.Table | None:
    """The live rows of a keyed dataset up to ``head`` (``None`` if it has no records).

    Slices are folded in one at a time (state = live rows of state + slice), so memory
    is bounded by the live state plus one slice, not by the whole history; the result
    equals `current_state` of the full changelog.

    Raises:
        storage.errors.InvalidDataFile: a data file that is not readable Parquet.
        MergeError: a slice without the key, ``offset`` or ``op`` columns.
    """
    from node.ingest.merge import current_state  # only keyed merges: not on an Append's path
    from storage.errors import InvalidDataFile
    from storage.reads import iter_slice_sources

    state: pa.Table | None = None
    for src in iter_slice_sources(dataset, head):
        try:
            table = _open_slice(src).read(use_threads=True)
        except (pa.ArrowException, OSError) as e:
            raise InvalidDataFile(f"data file {src.path.name}: {e}") from None
        if state is not None:
            table = pa.concat_tables([state, table], promote_options="permissive")
        state = current_state(table, primary_key, vocab=vocab)
    return state
