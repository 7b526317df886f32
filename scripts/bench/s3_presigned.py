"""Transfer through a node serving an S3 repository (presigned URLs) vs straight to S3.

Usage: .venv/bin/python scripts/bench/s3_presigned.py [--slices 16] [--slice-mb 4]

SeaweedFS on loopback. A dataset of ``--slices`` slices of ``--slice-mb`` MiB is:
pushed with `p2p.s3.push.push_to_s3` (straight to S3) and, to another prefix, over the
smart protocol to `odf serve`'s application (presigned ``PUT`` into ``quarantine/``,
then each upload copied aside, hashed and copied to ``data/`` by the node); cloned
with `p2p.s3.source.S3Source` (straight) and over the smart protocol from the node
(presigned ``GET``). Printed: seconds of each, their ratio, and the object requests
the node answered itself (0 expected).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aiohttp

from p2p.http.s3_repo import S3Repo
from p2p.s3.push import push_to_s3
from p2p.s3.source import S3Source
from p2p.smart_transfer.client import SmartSource, smart_push
from p2p.smart_transfer.s3_server import s3_repository_app
from p2p.sync import pull_dataset
from storage.s3.client import connect
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
from tests.p2p.sync_helpers import make_dataset, new_workspace, serve
from tests.storage.s3.seaweed import start_seaweed

TOKEN = "bench-token-0123456789"


async def _via_node(repo: S3Repo, tmp: Path, ws_src: object) -> tuple[float, float]:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with serve(s3_repository_app(repo)) as url, aiohttp.ClientSession() as s:
        t = time.perf_counter()
        await smart_push(ws_src, "bench", f"odf+{url}/bench", session=s, headers=auth)  # type: ignore[arg-type]
        push_s = time.perf_counter() - t
        t = time.perf_counter()
        async with SmartSource(f"odf+{url}/bench", s) as source:
            await pull_dataset(new_workspace(tmp / "dst-node"), source, alias="bench")
        return push_s, time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--slices", type=int, default=16)
    p.add_argument("--slice-mb", type=int, default=4)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-s3-presigned-") as tmp_s:
        tmp = Path(tmp_s)
        ws = new_workspace(tmp / "src")
        ds = make_dataset(ws, "bench", tmp / "f", slices=args.slices, pad=args.slice_mb << 20)
        mb = sum(ds.layout.data.size(h) for h in ds.layout.data.iter_hashes()) / 2**20
        server = start_seaweed(tmp / "s3")
        os.environ.update(server.env())
        try:
            run = uuid.uuid4().hex[:8]
            direct = S3Location(server.endpoint, server.bucket, f"direct-{run}/bench")
            t = time.perf_counter()
            push_to_s3(ds, direct)
            push_s = time.perf_counter() - t
            t = time.perf_counter()
            source = S3Source(S3DatasetLayout(connect(direct), direct))
            asyncio.run(pull_dataset(new_workspace(tmp / "dst"), source, alias="bench"))
            pull_s = time.perf_counter() - t
            repo_loc = S3Location(server.endpoint, server.bucket, f"node-{run}")
            repo = S3Repo(connect(repo_loc), repo_loc, token=TOKEN)
            node_push_s, node_pull_s = asyncio.run(_via_node(repo, tmp, ws))
        finally:
            server.stop()
    print(f"dataset: {args.slices} slices, {mb:.1f} MiB")
    print(
        f"push straight {push_s:.2f} s, via node {node_push_s:.2f} s: {node_push_s / push_s:.2f}x"
    )
    print(
        f"pull straight {pull_s:.2f} s, via node {node_pull_s:.2f} s: {node_pull_s / pull_s:.2f}x"
    )
    served = repo.requests["data"] + repo.requests["checkpoint"]
    print(f"object requests the node answered: {served}; requests by route: {dict(repo.requests)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
