"""Generated root datasets for the read, verify and SQL benchmarks (one way to build them).

`system_schema` gives the ODF system columns plus a bench's own; `build_root` commits
a Seed, the schema and one `AddData` per generated slice, exactly as an ingest would
(physical and logical hashes, offset intervals), and returns the dataset and its slice
files. Each benchmark only says what its slices contain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from storage.dataset import Dataset
    from storage.workspace import Workspace

#: The timestamp type of the system and event time columns.
TS = pa.timestamp("ms", tz="UTC")

MakeSlice = Callable[[int, int, int], pa.Table]
"""``make(s, start, clock_ms)``: slice number ``s`` whose first offset is ``start``."""


def system_schema(*fields: pa.Field) -> pa.Schema:
    """``offset``, ``op``, ``system_time``, ``event_time``, then ``fields``."""
    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("system_time", TS, nullable=False),
            pa.field("event_time", TS),
            *fields,
        ]
    )


def build_root(
    ws: Workspace,
    alias: str,
    schema: pa.Schema,
    slices: int,
    rows: int,
    make: MakeSlice,
    scratch: Path,
) -> tuple[Dataset, list[Path]]:
    """A root dataset ``alias`` of ``slices`` slices of ``rows`` rows made by ``make``.

    Returns:
        The dataset and its slice files in the object store, oldest first.
    """
    from fbs.arrow_schema import data_schema_from_arrow
    from fbs.model import (
        AddData,
        DatasetKind,
        DatasetSnapshot,
        DataSlice,
        OffsetInterval,
        SetDataSchema,
    )
    from fbs.timestamp import Timestamp
    from storage.hashing import logical_hash_parquet, physical_hash_file

    ds = ws.add_snapshot(DatasetSnapshot(name=alias, kind=DatasetKind.Root, metadata=()))
    clock = int(time.time() * 1000)
    head = ds.commit(
        SetDataSchema(schema=data_schema_from_arrow(schema)),
        system_time=Timestamp(clock * 1_000_000),
        expected_head=ds.head(),
    ).new_head
    files: list[Path] = []
    prev = None
    for s in range(slices):
        start = s * rows
        path = scratch / f"slice-{alias}-{s}.parquet"
        pq.write_table(make(s, start, clock), path)
        physical, size = physical_hash_file(path)
        event = AddData(
            prev_offset=prev,
            new_data=DataSlice(
                logical_hash=logical_hash_parquet(path),
                physical_hash=physical,
                offset_interval=OffsetInterval(start=start, end=start + rows - 1),
                size=size,
            ),
        )
        when = Timestamp((clock + s + 1) * 1_000_000)
        head = ds.commit(event, system_time=when, expected_head=head, data_file=path).new_head
        path.unlink()
        files.append(ds.layout.data.path_of(physical))
        prev = start + rows - 1
    return ds, files
