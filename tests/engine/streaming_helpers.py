"""Drive the engine as a coordinator would over a stream split into runs; fold the changelog.

`StreamRunner` feeds batches of input rows to `execute_transform` run after run (offsets,
watermarks and checkpoints carried over exactly as `node.transform` does) and collects the
output slices. `fold` applies an RFC-015 changelog (``+A``/``+C`` add a row, ``-R``/``-C``
remove one) and returns the resulting multiset of data rows, so that an incremental run can
be compared with a single run and with a batch reference.
"""

from __future__ import annotations

import collections
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.transform import execute_transform
from fbs.did import DatasetId
from fbs.model.engine import (
    TransformRequest,
    TransformRequestInput,
    TransformResponseSuccess,
    Watermark,
)
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import SqlQueryStep, TemporalTable, TransformSql
from tests.engine.helpers import OUT_ID, SYSTEM_TIME, TS_MS_UTC, ts

SYSTEM_COLUMNS = ("offset", "op", "system_time")


@dataclass
class InputStream:
    """One input dataset of the stream: its schema and the slices written so far."""

    alias: str
    schema: pa.Schema  # data columns, event_time included
    folder: Path
    event_time: str = "event_time"
    slices: list[Path] = field(default_factory=list)
    next_offset: int = 0
    watermark_ms: int | None = None
    pending: tuple[int, int] | None = None  # offsets not yet given to the engine
    #: Write Parquet column statistics (a writer may leave them out).
    statistics: bool = True

    @property
    def dataset_id(self) -> DatasetId:
        return DatasetId.new_seeded(b"stream-" + self.alias.encode())

    def append(self, rows: Sequence[Mapping[str, Any]], watermark_ms: int | None = None) -> None:
        """Write ``rows`` as a new slice; the watermark defaults to the max event time."""
        if rows:
            n = len(rows)
            cols: dict[str, pa.Array] = {
                "offset": pa.array(range(self.next_offset, self.next_offset + n), pa.int64()),
                "op": pa.array([r.get("op", 0) for r in rows], pa.int32()),
                "system_time": pa.array([0] * n, TS_MS_UTC),
            }
            for f in self.schema:
                cols[f.name] = pa.array([r[f.name] for r in rows], f.type)
            path = self.folder / f"{self.alias}-{len(self.slices)}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(cols), path, write_statistics=self.statistics)
            self.slices.append(path)
            start = self.pending[0] if self.pending else self.next_offset
            self.pending = (start, self.next_offset + n - 1)
            self.next_offset += n
            if watermark_ms is None:
                watermark_ms = max(_ms(r[self.event_time]) for r in rows)
        if watermark_ms is not None and (
            self.watermark_ms is None or watermark_ms > self.watermark_ms
        ):
            self.watermark_ms = watermark_ms
            self._new_watermark = True

    def request_input(self, work: Path) -> TransformRequestInput:
        schema_file = work / f"schema-{self.alias}.parquet"
        full = pa.schema(
            [
                pa.field("offset", pa.int64()),
                pa.field("op", pa.int32()),
                pa.field("system_time", TS_MS_UTC),
                *self.schema,
            ]
        )
        pq.write_table(full.empty_table(), schema_file)
        new_wm = getattr(self, "_new_watermark", False)
        self._new_watermark = False
        interval = self.pending
        self.pending = None
        return TransformRequestInput(
            dataset_id=self.dataset_id,
            dataset_alias=self.alias,
            query_alias=self.alias,
            vocab=DatasetVocabulary(event_time_column=self.event_time),
            offset_interval=None
            if interval is None
            else OffsetInterval(start=interval[0], end=interval[1]),
            data_paths=tuple(str(p) for p in self.slices) if interval else (),
            schema_file=str(schema_file),
            explicit_watermarks=(
                (Watermark(system_time=ts(0), event_time=ts(self.watermark_ms)),)
                if new_wm and self.watermark_ms is not None
                else ()
            ),
        )


@dataclass
class StreamRunner:
    """Runs one derivative query over `InputStream` s, one engine call per `run`."""

    engine: Any  # an EngineClient, or a SparkSession to run the engine in-process
    inputs: list[InputStream]
    steps: Sequence[tuple[str | None, str]]
    folder: Path
    event_time: str = "event_time"
    temporal: Sequence[tuple[str, Sequence[str]]] = ()
    outputs: list[pa.Table] = field(default_factory=list)
    next_offset: int = 0
    checkpoint: Path | None = None
    runs: int = 0
    watermark_ms: int | None = None
    #: The output vocabulary's operation type column.
    op_column: str = "op"

    def transform(self) -> TransformSql:
        return TransformSql(
            engine="spark",
            queries=tuple(SqlQueryStep(alias=a, query=q) for a, q in self.steps),
            temporal_tables=tuple(
                TemporalTable(name=n, primary_key=tuple(k)) for n, k in self.temporal
            )
            or None,
        )

    def request(self, work: Path) -> TransformRequest:
        return TransformRequest(
            dataset_id=OUT_ID,
            dataset_alias="out",
            system_time=SYSTEM_TIME,
            vocab=DatasetVocabulary(
                event_time_column=self.event_time, operation_type_column=self.op_column
            ),
            transform=self.transform(),
            query_inputs=tuple(i.request_input(work) for i in self.inputs),
            next_offset=self.next_offset,
            prev_checkpoint_path=None if self.checkpoint is None else str(self.checkpoint),
            new_checkpoint_path=str(work / "checkpoint"),
            new_data_path=str(work / "data"),
        )

    def run(self) -> pa.Table:
        """One engine run over what the inputs gained since the last run."""
        work = self.folder / f"run-{self.runs}"
        work.mkdir(parents=True)
        self.runs += 1
        request = self.request(work)
        if hasattr(self.engine, "execute_transform"):
            result = self.engine.execute_transform(request)
        else:
            result = execute_transform(self.engine, request)
        assert isinstance(result, TransformResponseSuccess), result
        table = pq.read_table(work / "data")
        if result.new_offset_interval is not None:
            iv = result.new_offset_interval
            assert iv.start == self.next_offset
            assert table.num_rows == iv.end - iv.start + 1
            assert table.column("offset").to_pylist() == list(range(iv.start, iv.end + 1))
            self.next_offset = iv.end + 1
            self.outputs.append(table)
        else:
            assert table.num_rows == 0
        if (work / "checkpoint").exists():
            self.checkpoint = work / "checkpoint"
        if result.new_watermark is not None:
            self.watermark_ms = result.new_watermark.nanos // 1_000_000
        return table


def fold(tables: Sequence[pa.Table], op_column: str = "op") -> collections.Counter[tuple[Any, ...]]:
    """The multiset of data rows left after applying the changelog ``tables`` in order
    (``op_column``: the name of their operation type column). Each table must be a well
    formed RFC-015 changelog: a ``+C`` (3) right after a ``-C`` (2), and only there."""
    state: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for t in tables:
        data = [c for c in t.column_names if c not in {*SYSTEM_COLUMNS, op_column}]
        ops = t.column(op_column).to_pylist()
        for i, op in enumerate(ops):
            after_from = i > 0 and ops[i - 1] == 2
            assert (op == 3) == after_from, f"op {op} at row {i} breaks a -C/+C pair: {ops}"
        assert not ops or ops[-1] != 2, f"a -C without its +C at the end: {ops}"
        rows = zip(*(t.column(c).to_pylist() for c in data), strict=True)
        for op, row in zip(ops, rows, strict=True):
            if op in (0, 3):
                state[row] += 1
            else:
                assert state[row] > 0, f"retraction of a row that is not live: {row}"
                state[row] -= 1
                if state[row] == 0:
                    del state[row]
    return state


def counter_of(rows: Sequence[Sequence[Any]]) -> collections.Counter[tuple[Any, ...]]:
    """A multiset of rows (for comparing with `fold`)."""
    return collections.Counter(tuple(r) for r in rows)


def _ms(value: Any) -> int:
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


def state_mode(checkpoint: Path | None) -> str:
    """The mode a stateful run recorded in its checkpoint's ``state/state.json``."""
    assert checkpoint is not None
    with tarfile.open(checkpoint) as tar:
        member = tar.extractfile("state/state.json")
        assert member is not None
        return str(json.load(member)["mode"])
