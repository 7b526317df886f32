"""Durable commit of a received chain: `Dataset.append_blocks_bytes` of 2,000 blocks.

Usage: .venv/bin/python scripts/bench/append_blocks.py [--blocks 2000] [--runs 3] [--dir PATH]

The final step of every pull (`p2p.receive.commit_received`, `storage.staging.install_staged`)
appends the received blocks to a dataset with one head move. The chain here is a Seed, a
schema and watermark-only AddData blocks (built without fsync: that is not measured).
Each run appends all of it to a fresh empty dataset, as a clone does, in three ways:

- **per-block put** (the baseline, without `put_many`): each block
  through `ObjectStore.put`: temp file, fsync, rename, fsync of the directory;
- **put_many, fsync each**: `ObjectStore.put_many` where ``syncfs`` is unavailable: every
  temp file fsynced, renames, one directory fsync;
- **put_many** (now): every temp file written, one ``syncfs(2)``, renames, one directory fsync.

Before each timed append the filesystem is synced, so no run pays for another's dirty
pages. Prints the best of ``--runs`` for each and the ratios to the baseline. The disk of
a shared VM is noisy: compare figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fbs.model import AddData, DataField, DataSchema, DataTypeInt64, SetDataSchema
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from storage.dataset import Dataset
from storage.faults import FsOps
from storage.layout import DatasetLayout
from storage.object_store import DiskObjectStore
from storage.workspace import Workspace

T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")
Items = Iterable[tuple[Multihash, bytes | bytearray | memoryview]]


class NoSyncOps(FsOps):
    """Real file operations without flushes (building the source only: not crash-safe)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_path(self, path: Path) -> None:
        pass

    def fsync_dir(self, path: Path) -> None:
        pass


class NoSyncfsOps(FsOps):
    """Real file operations on a system without ``syncfs``."""

    def syncfs(self, path: Path) -> bool:
        return False


def build_raws(root: Path, blocks: int) -> list[bytes]:
    """The raw bytes of a ``blocks``-block chain, oldest first."""
    ws = Workspace.init(root, ops=NoSyncOps())
    ds = ws.create_dataset("bench")
    schema = DataSchema(fields=(DataField(name="offset", type=DataTypeInt64()),))
    ds.commit(SetDataSchema(schema=schema), expected_head=ds.head())
    for i in range(blocks - 2):
        event = AddData(new_watermark=Timestamp(T0.nanos + i * 1_000_000_000))
        ds.commit(event, expected_head=ds.head())
    raws = [raw for _h, raw, _b in ds.iter_blocks()]
    raws.reverse()
    assert len(raws) == blocks
    return raws


def _per_block_put(store: DiskObjectStore, items: Items) -> None:
    for h, data in items:
        store.put(h, data)


def timed_append(dest: Path, raws: list[bytes], ops: FsOps, per_block: bool) -> float:
    """Seconds to append ``raws`` to a fresh dataset at ``dest``."""
    ds = Dataset.create(DatasetLayout(dest, ops=ops))
    FsOps().syncfs(dest)  # start clean: nobody's dirty pages but ours are flushed
    original = vars(DiskObjectStore)["put_many"]
    if per_block:
        setattr(DiskObjectStore, "put_many", _per_block_put)  # noqa: B010 - the baseline
    try:
        t0 = time.perf_counter()
        ds.append_blocks_bytes(raws)
        elapsed = time.perf_counter() - t0
    finally:
        setattr(DiskObjectStore, "put_many", original)  # noqa: B010
    assert len(list(DatasetLayout(dest).blocks)) == len(raws)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--blocks", type=int, default=2000, help="blocks in the chain (2000)")
    ap.add_argument("--runs", type=int, default=3, help="appends per way, best reported")
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="odf-append-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        raws = build_raws(base / "source", args.blocks)
        print(f"built {args.blocks} blocks in {time.perf_counter() - t0:.1f} s", flush=True)
        ways: dict[str, tuple[FsOps, bool]] = {
            "per-block put": (FsOps(), True),
            "put_many, fsync each": (NoSyncfsOps(), False),
            "put_many": (FsOps(), False),
        }
        best = {name: float("inf") for name in ways}
        for run in range(args.runs):
            for name, (ops, per_block) in ways.items():
                dest = base / f"{name.replace(' ', '-').replace(',', '')}-{run}"
                secs = timed_append(dest, raws, ops, per_block)
                best[name] = min(best[name], secs)
                print(f"  run {run + 1}: {name:<21} {secs:7.2f} s", flush=True)
                shutil.rmtree(dest)
        baseline = best["per-block put"]
        print(f"append_blocks_bytes of {args.blocks} blocks (best of {args.runs}):")
        for name, secs in best.items():
            rate = args.blocks / secs
            print(
                f"  {name:<21} {secs:7.2f} s  {rate:8.0f} blocks/s"
                f"  {baseline / secs:6.1f}x the per-block put"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
