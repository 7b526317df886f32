"""Push to and pull from an S3 repository (SeaweedFS on loopback) vs hashing the same bytes.

Usage: .venv/bin/python scripts/bench/s3_transfer.py [--slices 16] [--slice-mb 4]
       [--blocks 500]

A dataset with ``--slices`` slices of ``--slice-mb`` MiB, then ``--blocks`` small
``AddData`` blocks (one row each) is pushed with `p2p.s3.push.push_to_s3` and cloned
into a fresh workspace with `p2p.sync.pull_dataset` over `p2p.s3.source.S3Source`
(every block and object hashed, fsync'd, renamed into place). Baseline: SHA3-256 of
the same object bytes in memory (a verified transfer must hash every byte). Printed:
seconds, MB/s, and the ratio baseline/transfer (1.0 = as fast as hashing alone).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from p2p.s3.push import push_to_s3
from p2p.s3.source import S3Source
from p2p.sync import pull_dataset
from storage.s3.client import connect
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace
from tests.storage.s3.seaweed import start_seaweed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--slices", type=int, default=16)
    p.add_argument("--slice-mb", type=int, default=4)
    p.add_argument("--blocks", type=int, default=500)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-s3-transfer-") as tmp_s:
        tmp = Path(tmp_s)
        ws = new_workspace(tmp / "src")
        ds = make_dataset(ws, "bench", tmp / "f", slices=args.slices, pad=args.slice_mb << 20)
        add_slices(ds, tmp / "g", args.blocks, rows=1)
        objects = [ds.layout.data.get(h) for h in ds.layout.data.iter_hashes()]
        total = sum(len(o) for o in objects)
        t = time.perf_counter()
        for o in objects:
            hashlib.sha3_256(o).digest()
        sha3_s = time.perf_counter() - t
        server = start_seaweed(tmp / "s3")
        os.environ.update(server.env())
        try:
            loc = S3Location(server.endpoint, server.bucket, f"bench-{uuid.uuid4().hex[:8]}/ds")
            t = time.perf_counter()
            pushed = push_to_s3(ds, loc)
            push_s = time.perf_counter() - t
            source = S3Source(S3DatasetLayout(connect(loc), loc))
            t = time.perf_counter()
            pulled = asyncio.run(pull_dataset(new_workspace(tmp / "dst"), source, alias="bench"))
            pull_s = time.perf_counter() - t
        finally:
            server.stop()
    mb = total / 2**20
    print(f"dataset: {pushed.blocks_pushed} blocks, {len(objects)} slices, {mb:.1f} MiB")
    print(f"sha3 of the slices: {sha3_s:.2f} s ({mb / sha3_s:.0f} MiB/s)")
    print(f"push: {push_s:.2f} s ({mb / push_s:.0f} MiB/s), ratio {sha3_s / push_s:.2f}")
    print(
        f"pull: {pull_s:.2f} s ({mb / pull_s:.0f} MiB/s), ratio {sha3_s / pull_s:.2f}; "
        f"{pulled.blocks_fetched} blocks, {pulled.objects_fetched} objects"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
