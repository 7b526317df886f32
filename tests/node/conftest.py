"""Fixtures of the coordinator tests: workspaces, root datasets written block by block.

`running` runs a node daemon for the length of a block (the daemon and network tests of
tests/node and tests/p2p).

The engine (`engine` / `engine_process`) comes from ``tests/conftest.py``: one Spark JVM
for the whole test session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from fbs.arrow_schema import data_schema_from_arrow
from fbs.model import (
    AddData,
    DatasetKind,
    DatasetSnapshot,
    DataSlice,
    ExecuteTransform,
    OffsetInterval,
    SetDataSchema,
    SetTransform,
    SqlQueryStep,
    TransformInput,
    TransformSql,
)
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from node.daemon.config import NodeConfig
from node.daemon.service import NodeDaemon
from storage.dataset import CommitResult, Dataset
from storage.hashing import logical_hash_parquet, physical_hash_file
from storage.workspace import Workspace

TS = pa.timestamp("ms", tz="UTC")
#: 2020-01-01T00:00:00Z in milliseconds.
BASE_MS = 1_577_836_800_000
ROOT_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("op", pa.int32(), nullable=False),
        pa.field("system_time", TS, nullable=False),
        pa.field("event_time", TS),
        pa.field("city", pa.string()),
        pa.field("population", pa.int64()),
    ]
)


def ts_ms(ms: int) -> Timestamp:
    """A Timestamp from epoch milliseconds."""
    return Timestamp(ms * 1_000_000)


@dataclass
class RootWriter:
    """Appends AddData blocks to a root dataset, writing the Parquet slices itself."""

    ws: Workspace
    alias: str
    tmp: Path
    clock_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def ds(self) -> Dataset:
        return self.ws.get(self.alias)

    def append(
        self,
        rows: Sequence[tuple[str, int]],
        *,
        ops: Sequence[int] | None = None,
        watermark_ms: int | None = None,
        event_ms: Sequence[int] | None = None,
    ) -> Multihash:
        """Append ``(city, population)`` rows (and/or a watermark); returns the new head."""
        ds = self.ds
        state = ds.state()
        assert state is not None
        head = state.head
        self.clock_ms += 60_000
        when = ts_ms(self.clock_ms)
        if state.data_schema is None and rows:
            schema = SetDataSchema(schema=data_schema_from_arrow(ROOT_SCHEMA))
            head = ds.commit(schema, system_time=when, expected_head=head).new_head
        start = 0 if state.last_offset is None else state.last_offset + 1
        new_data = None
        path: Path | None = None
        if rows:
            n = len(rows)
            table = pa.table(
                {
                    "offset": pa.array(range(start, start + n), pa.int64()),
                    "op": pa.array(list(ops) if ops is not None else [0] * n, pa.int32()),
                    "system_time": pa.array([self.clock_ms] * n, TS),
                    "event_time": pa.array(
                        list(event_ms)
                        if event_ms is not None
                        else [self.clock_ms - 1000 + i for i in range(n)],
                        TS,
                    ),
                    "city": pa.array([r[0] for r in rows], pa.string()),
                    "population": pa.array([r[1] for r in rows], pa.int64()),
                },
                schema=ROOT_SCHEMA,
            )
            path = self.tmp / f"{self.alias}-{start}.parquet"
            pq.write_table(table, path)
            physical, size = physical_hash_file(path)
            new_data = DataSlice(
                logical_hash=logical_hash_parquet(path),
                physical_hash=physical,
                offset_interval=OffsetInterval(start=start, end=start + n - 1),
                size=size,
            )
        event = AddData(
            prev_offset=state.last_offset,
            new_data=new_data,
            new_watermark=None if watermark_ms is None else ts_ms(watermark_ms),
        )
        return ds.commit(event, system_time=when, expected_head=head, data_file=path).new_head


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """An empty workspace."""
    return Workspace.init(tmp_path / "project")


@pytest.fixture
def make_root(ws: Workspace, tmp_path: Path) -> Callable[[str], RootWriter]:
    """Create a root dataset; returns its writer."""
    slices = tmp_path / "slices"
    slices.mkdir()

    def make(alias: str) -> RootWriter:
        ws.add_snapshot(DatasetSnapshot(name=alias, kind=DatasetKind.Root, metadata=()))
        return RootWriter(ws, alias, slices)

    return make


def add_derivative(
    ws: Workspace,
    alias: str,
    inputs: Sequence[str | tuple[str, str]],
    queries: Sequence[tuple[str | None, str]] | str,
    *,
    version: str | None = None,
) -> Dataset:
    """Create a derivative dataset (inputs by alias, or ``(alias, query_alias)``)."""
    steps = (
        (SqlQueryStep(query=queries),)
        if isinstance(queries, str)
        else tuple(SqlQueryStep(alias=a, query=q) for a, q in queries)
    )
    tinputs = tuple(
        TransformInput(dataset_ref=i)
        if isinstance(i, str)
        else TransformInput(dataset_ref=i[0], alias=i[1])
        for i in inputs
    )
    transform = TransformSql(engine="spark", version=version, queries=steps)
    snapshot = DatasetSnapshot(
        name=alias,
        kind=DatasetKind.Derivative,
        metadata=(SetTransform(inputs=tinputs, transform=transform),),
    )
    return ws.add_snapshot(snapshot)


def read_records(ds: Dataset) -> pa.Table:
    """All records of a dataset, oldest slice first."""
    tables = []
    for _h, _raw, block in reversed(list(ds.iter_blocks())):
        event = block.event
        if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
            tables.append(pq.read_table(ds.layout.data.path_of(event.new_data.physical_hash)))
    assert tables, "dataset has no data"
    return pa.concat_tables(tables)


def transforms_of(ds: Dataset) -> list[ExecuteTransform]:
    """The ExecuteTransform events of a dataset, oldest first."""
    return [
        b.event
        for _h, _raw, b in reversed(list(ds.iter_blocks()))
        if isinstance(b.event, ExecuteTransform)
    ]


def commit_forged(ws: Workspace, alias: str, engine: EngineClient) -> CommitResult:
    """Run the transform, double column ``p`` and commit with consistent hashes.

    The forged slice passes every integrity check; only a replay catches it.
    """
    from node.transform import commit_transform, plan_transform, run_transform, transform_work_dir

    output = run_transform(plan_transform(ws, alias), engine, transform_work_dir(ws))
    assert output.data_file is not None and output.event.new_data is not None
    table = pq.read_table(output.data_file)
    i = table.schema.get_field_index("p")
    table = table.set_column(i, "p", pc.multiply(table.column("p"), 2))
    fake = output.work_dir / "fake.parquet"
    pq.write_table(table, fake)
    physical, size = physical_hash_file(fake)
    slice_ = DataSlice(
        logical_hash=logical_hash_parquet(fake),
        physical_hash=physical,
        offset_interval=output.event.new_data.offset_interval,
        size=size,
    )
    event = output.event.replace(new_data=slice_)
    return commit_transform(ws, dataclasses.replace(output, event=event, data_file=fake))


@contextlib.asynccontextmanager
async def running(
    ws: Workspace, config: NodeConfig, engine: EngineClient | None = None
) -> AsyncIterator[NodeDaemon]:
    """A started `NodeDaemon` of ``ws``, stopped when the block ends."""
    daemon = NodeDaemon(ws, config, engine=engine)
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()
