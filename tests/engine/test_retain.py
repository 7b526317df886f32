"""Retained rows (engine.streaming.retain): skipping row groups by statistics keeps exactly the
rows a full read and filter keeps, in the same order. Pure pyarrow: no Spark."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.inputs import InputPlan, SlicePlan
from engine.streaming.retain import RETAINED_FILE, retain_rows
from tests.engine.helpers import BASE_MS, make_input

_SCALE = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0}


def _table(start: int, micros: list[int], unit: str) -> pa.Table:
    n = len(micros)
    scale = _SCALE[unit]
    values = [m // scale if scale else m * 1_000 for m in micros]
    return pa.table(
        {
            "offset": pa.array(range(start, start + n), pa.int64()),
            "op": pa.array([0] * n, pa.int32()),
            "event_time": pa.array(values, pa.timestamp(unit, tz="UTC")),
            "v": pa.array(range(n), pa.int64()),
        }
    )


def _expected(tables: list[pa.Table], cutoff_us: int, lo: int, hi: int) -> list[int]:
    """Offsets a full read keeps: event time >= cutoff, offset in [lo, hi]."""
    kept = []
    for t in tables:
        times = pc.cast(t.column("event_time"), pa.timestamp("us", tz="UTC")).cast(pa.int64())
        for off, us in zip(t.column("offset").to_pylist(), times.to_pylist(), strict=True):
            if us >= cutoff_us and lo <= off <= hi:
                kept.append(off)
    return kept


@settings(max_examples=60, deadline=None)
@given(
    unit=st.sampled_from(["s", "ms", "us", "ns"]),
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    row_group=st.integers(1, 16),
    steps=st.lists(st.integers(-3_000_000, 5_000_000), min_size=120, max_size=120),
    cut=st.integers(0, 119),
    exact=st.booleans(),
    trim=st.integers(0, 5),
)
def test_pruned_read_keeps_the_rows_of_a_full_read(
    unit: str,
    sizes: list[int],
    row_group: int,
    steps: list[int],
    cut: int,
    exact: bool,
    trim: int,
) -> None:
    # Event times mostly increase (as ingested slices do) but may step back.
    micros, now = [], BASE_MS * 1_000
    for step in steps:
        now += step
        micros.append(now)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tables, paths, start = [], [], 0
        for i, n in enumerate(sizes):
            table = _table(start, micros[start : start + n], unit)
            path = root / f"slice-{i}.parquet"
            pq.write_table(table, path, row_group_size=row_group)
            tables.append(table)
            paths.append(path)
            start += n
        # The cut-off is a stored value (a row exactly at it is kept) or just after one.
        stored = pc.cast(
            pa.concat_tables(tables).column("event_time"), pa.timestamp("us", tz="UTC")
        ).cast(pa.int64())
        cutoff_us = stored[min(cut, len(stored) - 1)].as_py() + (0 if exact else 1)
        lo, hi = trim, start - 1 - trim
        inp = make_input(
            seed=b"retain",
            alias="input",
            paths=paths,
            schema_file=paths[0],
            interval=(lo, max(lo, hi)),
        )
        plan = InputPlan(
            slices=tuple(SlicePlan(str(p), needs_filter=True) for p in paths), total_bytes=0
        )
        written = retain_rows(inp, plan, [], root / "out", cutoff_us=cutoff_us)
        got = pq.read_table(root / "out" / RETAINED_FILE).column("offset").to_pylist()
        want = _expected(tables, cutoff_us, lo, max(lo, hi))
        assert got == want
        assert written == len(want)
