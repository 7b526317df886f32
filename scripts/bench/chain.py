"""Metadata chain benchmark: append+validate, replay and decode throughput on a long chain.

Usage: .venv/bin/python scripts/bench/chain.py [--blocks 100000] [--durable 300] [--dir PATH]

The chain is Seed, SetDataSchema, SetInfo, then AddData blocks with realistic fields
(new_data with distinct logical hashes and contiguous offsets, a checkpoint every 10
blocks, watermark, source state). Data objects are not real Parquet files: every
AddData names one small data object (and one small checkpoint object) stored once,
so the commit's object checks run but 100k files are not written. Validation does
not care whether physical hashes repeat.

Fsync: building 100k blocks with four fsyncs each would measure the disk, not our
code. The long chain is therefore built through an `FsOps` whose fsync/fsync_dir are
no-ops (same files, same renames); the durable rate (real fsyncs) is measured
separately on ``--durable`` commits of a fresh dataset.

Figures printed (all measured in this run):

- append+validate blocks/s for the first and the last 1k blocks of the chain, and
  their ratio (≈ 1 means append cost does not grow with chain length);
- durable commits/s (real fsyncs) vs the no-fsync rate;
- pure `validate_append` blocks/s (in-memory replay) vs the append rate;
- decode blocks/s vs a raw SHA3-256 of the same bytes (ratio);
- opening the dataset without the state cache (one full scan + replay) vs with it.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fbs.codec import decode_block
from fbs.did import DatasetId
from fbs.model import (
    AddData,
    Checkpoint,
    DataField,
    DataSchema,
    DatasetKind,
    DataSlice,
    DataTypeInt32,
    DataTypeInt64,
    DataTypeOption,
    DataTypeString,
    DataTypeTimestamp,
    OffsetInterval,
    Seed,
    SetDataSchema,
    SetInfo,
    SourceState,
)
from fbs.multiformats import ARROW0_SHA3_256, Multihash
from fbs.timestamp import Timestamp
from storage.chain import ChainState, validate_append
from storage.dataset import Dataset
from storage.faults import FsOps
from storage.layout import DatasetLayout

WINDOW = 1000
T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")
DATA = b"PAR1" + b"\0" * 1020 + b"PAR1"
CKPT = b"checkpoint-bytes"


class NoSyncOps(FsOps):
    """Real file operations without fsync (benchmark only: not crash-safe)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: Path) -> None:
        pass


SCHEMA = SetDataSchema(
    schema=DataSchema(
        fields=(
            DataField(name="offset", type=DataTypeInt64()),
            DataField(name="op", type=DataTypeInt32()),
            DataField(name="system_time", type=DataTypeTimestamp()),
            DataField(name="event_time", type=DataTypeTimestamp()),
            DataField(name="city", type=DataTypeString()),
            DataField(name="population", type=DataTypeOption(inner=DataTypeInt64())),
        )
    )
)


def add_data(state: ChainState, i: int) -> AddData:
    """The i-th AddData after ``state``: 100 records, checkpoint every 10th block."""
    start = 0 if state.last_offset is None else state.last_offset + 1
    cp = Checkpoint(physical_hash=Multihash.sha3_256(CKPT), size=len(CKPT)) if i % 10 == 0 else None
    return AddData(
        prev_checkpoint=state.last_checkpoint,
        prev_offset=state.last_offset,
        new_data=DataSlice(
            logical_hash=Multihash(
                ARROW0_SHA3_256, hashlib.sha3_256(i.to_bytes(8, "little")).digest()
            ),
            physical_hash=Multihash.sha3_256(DATA),
            offset_interval=OffsetInterval(start=start, end=start + 99),
            size=len(DATA),
        ),
        new_checkpoint=cp,
        new_watermark=Timestamp(T0.nanos + i * 10**9),
        new_source_state=SourceState(source_name="default", kind="odf/etag", value=f"etag-{i}"),
    )


def new_dataset(root: Path, ops: FsOps) -> Dataset:
    layout = DatasetLayout(root / "ds", ops=ops)
    ds = Dataset.create(layout, state_cache=root / "cache" / "state.json")
    ds.layout.data.put(Multihash.sha3_256(DATA), DATA)
    ds.layout.checkpoints.put(Multihash.sha3_256(CKPT), CKPT)
    t = T0
    head = ds.commit(
        Seed(dataset_id=DatasetId.new_seeded(b"bench"), dataset_kind=DatasetKind.Root),
        system_time=t,
        expected_head=None,
    ).new_head
    head = ds.commit(SCHEMA, system_time=t, expected_head=head).new_head
    ds.commit(
        SetInfo(description="bench chain", keywords=("a", "b")), system_time=t, expected_head=head
    )
    return ds


def append_many(ds: Dataset, n: int) -> tuple[list[float], list[float]]:
    """Append n AddData blocks; returns wall and CPU seconds of each WINDOW-block window."""
    state = ds.state()
    assert state is not None
    walls: list[float] = []
    cpus: list[float] = []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(n):
        t = Timestamp(T0.nanos + i * 10**9)
        state = ds.commit(add_data(state, i), system_time=t, expected_head=state.head).state
        if (i + 1) % WINDOW == 0:
            wall, cpu = time.perf_counter(), time.process_time()
            walls.append(wall - wall0)
            cpus.append(cpu - cpu0)
            wall0, cpu0 = wall, cpu
    return walls, cpus


def report(label: str, value: str) -> None:
    """Print one aligned result line."""
    print(f"{label:<27}: {value}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--blocks", type=int, default=100_000, help="AddData blocks in the long chain")
    ap.add_argument("--durable", type=int, default=300, help="commits timed with real fsync")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    n = max(args.blocks, 2 * WINDOW)
    work = Path(tempfile.mkdtemp(prefix="odf-chain-bench-", dir=args.dir))
    try:
        # 1. Long chain, no fsync.
        ds = new_dataset(work / "long", NoSyncOps())
        t = time.perf_counter()
        windows, cpus = append_many(ds, n)
        total = time.perf_counter() - t
        first, last = WINDOW / windows[0], WINDOW / windows[-1]
        cfirst, clast = WINDOW / cpus[0], WINDOW / cpus[-1]
        report("chain length", f"{n + 3} blocks")
        report("append+validate, no fsync", f"{n / total:10.0f} blocks/s overall")
        report("  first 1k (wall)", f"{first:10.0f} blocks/s")
        report("  last 1k (wall)", f"{last:10.0f} blocks/s  (last/first = {last / first:.2f})")
        report("  first 1k (CPU)", f"{cfirst:10.0f} blocks/s")
        report("  last 1k (CPU)", f"{clast:10.0f} blocks/s  (last/first = {clast / cfirst:.2f})")

        # 2. Durable commits on a fresh dataset.
        durable = new_dataset(work / "durable", FsOps())
        dstate = durable.state()
        assert dstate is not None
        t = time.perf_counter()
        for i in range(args.durable):
            ts = Timestamp(T0.nanos + i * 10**9)
            dstate = durable.commit(
                add_data(dstate, i), system_time=ts, expected_head=dstate.head
            ).state
        d_rate = args.durable / (time.perf_counter() - t)
        ratio = d_rate / (n / total)
        report("durable commits (fsync)", f"{d_rate:10.0f} blocks/s  (vs no fsync: {ratio:.2f}x)")

        # 3. Read the chain back: raw bytes, decode vs sha3 baseline, pure validation.
        t = time.perf_counter()
        raws = [(h, raw) for h, raw, _ in ds.iter_blocks()]
        walk = time.perf_counter() - t
        raws.reverse()
        t = time.perf_counter()
        for _, raw in raws:
            hashlib.sha3_256(raw).digest()
        sha = time.perf_counter() - t
        t = time.perf_counter()
        decoded = [(h, decode_block(raw)) for h, raw in raws]
        dec = time.perf_counter() - t
        t = time.perf_counter()
        state: ChainState | None = None
        for h, block in decoded:
            state = validate_append(state, block, h)
        val = time.perf_counter() - t
        m = len(raws)
        avg = sum(len(r) for _, r in raws) / m
        report("block size", f"{avg:10.0f} bytes average")
        report("sha3-256 baseline", f"{m / sha:10.0f} blocks/s")
        report("decode", f"{m / dec:10.0f} blocks/s  (decode/sha3 = {sha / dec:.3f})")
        vs = (m / val) / (n / total)
        report("validate_append (memory)", f"{m / val:10.0f} blocks/s  ({vs:.1f}x the append rate)")
        report("walk head->seed (disk)", f"{m / walk:10.0f} blocks/s  (read + hash check + decode)")

        # 4. Open: full replay vs state cache.
        cache = work / "long" / "cache" / "state.json"
        t = time.perf_counter()
        cold = Dataset(DatasetLayout(work / "long" / "ds"), state_cache=None).state()
        cold_s = time.perf_counter() - t
        t = time.perf_counter()
        warm = Dataset(DatasetLayout(work / "long" / "ds"), state_cache=cache).state()
        warm_s = time.perf_counter() - t
        assert cold == warm == state
        report("open, no cache (replay)", f"{cold_s * 1000:10.1f} ms")
        report("open, state cache", f"{warm_s * 1000:10.1f} ms  ({cold_s / warm_s:.0f}x faster)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
