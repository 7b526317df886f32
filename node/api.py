"""Python API: open a workspace, ingest into datasets and read their data back.

::

    import node.api as odf

    ws = odf.open_workspace(".")
    ds = ws.dataset("city-populations")
    ds.ingest(["cities.csv"])
    table = ds.to_arrow()                 # every record (the changelog), by offset
    then = ds.as_of(some_block_hash)      # what the dataset held at that block
    live = ds.current_state()             # keyed datasets: corrections/retractions applied

Projections are cheap views: `DatasetView.as_of` pins a head (a block hash, or the
newest block whose system time is <= a `Timestamp`); reading happens in `to_arrow`.
"""

from __future__ import annotations

import datetime
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa

from fbs.model import (
    DataSchema,
    MergeStrategyAppend,
    Multihash,
    Timestamp,
)
from node.errors import UsageError
from node.ingest.merge import primary_key_of
from node.ingest.pipeline import (
    IngestResult,
    Progress,
    ingest,
    pull,
    read_changelog,
    read_live_state,
    vocab_of,
)
from node.ownership import require_owned_dataset
from storage.dataset import Dataset, as_block_hash
from storage.workspace import Workspace as _StorageWorkspace

if TYPE_CHECKING:
    from engine.client import EngineClient

__all__ = ["DatasetView", "MissingDependency", "Workspace", "open_workspace"]


class MissingDependency(UsageError):
    """An optional package needed by the call is not installed (the message names it)."""


def open_workspace(path: str | Path | None = None) -> Workspace:
    """Open the workspace at ``path`` (or the nearest one above it / the cwd).

    Raises:
        storage.errors.WorkspaceNotFound: there is none.
    """
    return Workspace(_StorageWorkspace.open(None if path is None else Path(path)))


class Workspace:
    """A workspace facade: datasets by alias or DID.

    ``engine`` runs preprocess queries; by default the workspace's engine
    (`node.engine_manager.get_engine`: configured, or the shared one started on demand),
    reached only when a preprocess step runs.
    """

    def __init__(self, storage: _StorageWorkspace, engine: EngineClient | None = None) -> None:
        self.storage = storage
        self.engine = engine

    def __repr__(self) -> str:
        return f"Workspace({str(self.storage.root)!r})"

    def dataset(self, ref: str) -> DatasetView:
        """The dataset ``ref`` (alias or ``did:odf:...``).

        Raises:
            storage.errors.DatasetNotFound / InvalidAlias: unknown or malformed ref.
        """
        return DatasetView(self.storage.get(ref), engine=self.engine, name=ref)

    def datasets(self) -> list[str]:
        """Aliases of every dataset, sorted."""
        return [e.alias for e in self.storage.list()]

    def sql(self, query: str, *, engine: str = "datafusion") -> pa.Table:
        """Run ``query`` over the datasets as ``odf sql`` does; the result as a Table.

        ``engine``: ``"datafusion"`` (embedded, the default) or ``"spark"`` (the
        workspace's shared Spark engine). See `node.sql.query`.

        Raises:
            engine.errors.InvalidQuery: the engine refused the query.
        """
        import tempfile

        from node.sql.query import SQL_ENGINES, run_sql

        if engine not in SQL_ENGINES:
            raise UsageError(f"unknown SQL engine {engine!r} (one of {', '.join(SQL_ENGINES)})")
        with tempfile.TemporaryDirectory(prefix="odf-sql-") as tmp:
            path = Path(tmp) / "result.parquet"
            return run_sql(self.storage, query, path, sql_engine=engine).read()

    def close(self) -> None:
        """Drop this process's lease on the shared engine, if it took one: the engine
        stops once no process has used it for its idle timeout."""
        from node.engine_manager import release_lease

        release_lease()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DatasetView:
    """One dataset, optionally pinned to a past head (see `as_of`)."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        head: Multihash | None = None,
        engine: EngineClient | None = None,
        name: str | None = None,
    ) -> None:
        self.dataset = dataset
        self.head = head
        self.engine = engine
        self.name = name

    def __repr__(self) -> str:
        pin = "" if self.head is None else f" @ {self.head.short()}"
        return f"DatasetView({self.name or self.dataset.layout.root.name}{pin})"

    # -- projections ----------------------------------------------------------------------

    def as_of(self, point: Multihash | str | Timestamp | datetime.datetime) -> DatasetView:
        """The dataset as it was at a block (hash) or a system time.

        A `Timestamp` or an aware `datetime.datetime` selects the newest block whose
        ``system_time`` is at or before it.

        Raises:
            UsageError: a hash not in this dataset's chain, or a time before its Seed.
            fbs.errors.InvalidTimestamp: a naive datetime (its zone would be a guess).
        """
        start = self.head or self.dataset.head()
        if isinstance(point, datetime.datetime):
            point = Timestamp.from_datetime(point)
        if isinstance(point, Timestamp):
            for h, _raw, block in self.dataset.iter_blocks(start):
                if block.system_time <= point:
                    return self._pinned(h)
            raise UsageError(f"dataset did not exist at {point}")
        target = as_block_hash(point)
        for h, _raw, _block in self.dataset.iter_blocks(start):
            if h == target:
                return self._pinned(h)
        raise UsageError(f"block {target} is not in the dataset's chain")

    def _pinned(self, head: Multihash) -> DatasetView:
        return DatasetView(self.dataset, head=head, engine=self.engine, name=self.name)

    def _state_head(self) -> Multihash | None:
        return self.head or self.dataset.head()

    # -- reads ----------------------------------------------------------------------------

    def data_schema(self) -> DataSchema | None:
        """The ODF schema (from the newest SetDataSchema up to the pinned head)."""
        from fbs.model import SetDataSchema

        for _h, _raw, block in self.dataset.iter_blocks(self._state_head()):
            if isinstance(block.event, SetDataSchema) and block.event.schema is not None:
                return block.event.schema
        return None

    def schema(self) -> pa.Schema:
        """The Arrow schema of the data (empty schema if none was declared yet)."""
        from fbs.arrow_schema import arrow_schema_from_data

        ds = self.data_schema()
        return pa.schema([]) if ds is None else arrow_schema_from_data(ds)

    def to_arrow(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every record up to the pinned head, in offset order.

        Every slice is checked against its block (size, physical hash) before it is
        used (`storage.verified`; remembered, so a second read costs a stat per slice).

        Raises:
            storage.errors.DamagedObject: a slice whose bytes differ from the metadata.
            storage.errors.InvalidDataFile / ObjectNotFound: an unreadable or missing slice.
        """
        schema = self.schema()
        head = self._state_head()
        table = None if head is None else read_changelog(self.dataset, head=head, columns=columns)
        if table is None:
            wanted = [f for f in schema if columns is None or f.name in columns]
            return pa.schema(wanted).empty_table()
        return table

    def to_pandas(self, columns: Sequence[str] | None = None) -> Any:
        """`to_arrow` as a pandas DataFrame.

        Raises:
            MissingDependency: pandas is not installed.
        """
        if importlib.util.find_spec("pandas") is None:
            raise MissingDependency("to_pandas() needs the 'pandas' package: pip install pandas")
        return self.to_arrow(columns).to_pandas()

    def current_state(self, primary_key: Sequence[str] | None = None) -> pa.Table:
        """Live rows of a keyed changelog (retractions and corrections applied).

        Args:
            primary_key: the key; default: the primary key of the dataset's source.

        Raises:
            UsageError: no key given and the source has none (Append, or no source).
        """
        key = list(primary_key) if primary_key is not None else self._source_key()
        vocab = vocab_of(self.dataset.state())
        head = self._state_head()
        # Folded slice by slice: memory follows the live state, not the history.
        live = None if head is None else read_live_state(self.dataset, key, head=head, vocab=vocab)
        table = self.to_arrow() if live is None else live  # no records: the empty schema
        return table.drop_columns([vocab.operation_type_column])

    def _source_key(self) -> list[str]:
        state = self.dataset.state()
        strategies = []
        if state is not None:
            if state.polling_source is not None:
                strategies.append(state.polling_source.merge)
            strategies += [s.merge for s in state.push_sources]
        for s in strategies:
            if not isinstance(s, MergeStrategyAppend):
                key = primary_key_of(s)
                if key:
                    return list(key)
        raise UsageError("the dataset's source has no primary key; pass primary_key=[...]")

    def tail(self, n: int = 10) -> pa.Table:
        """The last ``n`` records (all columns of the slices they come from).

        Only the newest slices that hold them are read, each verified like `to_arrow`'s
        (`storage.reads.read_tail`): the cost follows ``n``, not the history.
        """
        from storage.reads import read_tail

        head = self._state_head()
        table = None if head is None else read_tail(self.dataset, n, head)
        return self.to_arrow() if table is None else table  # no slice: the empty schema

    # -- writes ---------------------------------------------------------------------------

    def ingest(
        self,
        source: Sequence[Path | str] | IO[bytes],
        *,
        source_name: str | None = None,
        event_time: Timestamp | None = None,
        input_format: str | None = None,
        progress: Progress | None = None,
    ) -> IngestResult:
        """Push files or a binary stream through a push source (see `pipeline.ingest`)."""
        self._writable()
        return ingest(
            self.dataset,
            source,
            source_name=source_name,
            event_time=event_time,
            input_format=input_format,
            engine=self.engine,
            progress=progress,
        )

    def pull(
        self, *, set_watermark: Timestamp | None = None, progress: Progress | None = None
    ) -> IngestResult:
        """Poll the dataset's polling source once (see `pipeline.pull`)."""
        self._writable()
        return pull(
            self.dataset, set_watermark=set_watermark, engine=self.engine, progress=progress
        )

    def _writable(self) -> None:
        if self.head is not None:
            raise UsageError("a dataset pinned with as_of() is read-only")
        require_owned_dataset(self.dataset, action="ingest into it or poll its source")
