"""Verified pull over HTTP vs the SHA3-256 hashing rate of the same bytes.

Usage: .venv/bin/python scripts/bench/sync_http.py [--mb 200] [--slice-mb 16] [--runs 2]

A source workspace gets one dataset with ``--mb`` MB of data in AddData slices of
``--slice-mb`` MB (random bytes: the chain checks sizes and physical hashes, not
Parquet content). A node serving it (`node.http.api`) runs in a *separate process*,
as a real peer would, on 127.0.0.1. The pull (`p2p.sync.pull_dataset` through
`p2p.http.source.HttpSource`: batched blocks, hash-before-parse, chain validation,
objects streamed to quarantine files, hashed while received, fsynced, renamed) goes
into a fresh workspace each run.

Figures (all measured in this run, best of ``--runs``):

- SHA3-256 of the same bytes from memory (the limit: every received byte is hashed);
- bare HTTP download of the same objects without hashing or fsync (transport limit);
- verified pull MB/s and its ratio to the hashing rate (target >= 0.6).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from fbs.model import AddData, DataSlice, OffsetInterval, SetDataSchema  # noqa: E402
from fbs.multiformats import ARROW0_SHA3_256, Multihash  # noqa: E402
from p2p.http.source import HttpSource, dataset_base_url  # noqa: E402
from p2p.sync import pull_dataset  # noqa: E402
from storage.workspace import Workspace  # noqa: E402

MB = 1_000_000

SERVER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from aiohttp import web
from node.http.api import create_app
from storage.workspace import Workspace

async def main():
    ws = Workspace.open({ws!r})
    runner = web.AppRunner(create_app(ws))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def build_source(root: Path, total_mb: int, slice_mb: int) -> tuple[Workspace, list[Path]]:
    from fbs.model import DataField, DataSchema, DataTypeInt64

    ws = Workspace.init(root)
    ds = ws.create_dataset("bench")
    ds.commit(
        SetDataSchema(schema=DataSchema(fields=(DataField(name="offset", type=DataTypeInt64()),))),
        expected_head=ds.head(),
    )
    files: list[Path] = []
    remaining = total_mb * MB
    offset = 0
    i = 0
    while remaining > 0:
        size = min(slice_mb * MB, remaining)
        path = root / f"slice-{i}.bin"
        path.write_bytes(os.urandom(size))
        digest = hashlib.sha3_256(path.read_bytes()).digest()
        rows = 1000
        event = AddData(
            prev_offset=offset - 1 if offset else None,
            new_data=DataSlice(
                logical_hash=Multihash(ARROW0_SHA3_256, digest),
                physical_hash=Multihash.sha3_256(path.read_bytes()),
                offset_interval=OffsetInterval(start=offset, end=offset + rows - 1),
                size=size,
            ),
        )
        ds.commit(event, expected_head=ds.head(), data_file=path)
        path.unlink()
        files.append(ds.layout.data.path_of(event.new_data.physical_hash))  # type: ignore[union-attr]
        offset += rows
        remaining -= size
        i += 1
    return ws, files


def hash_rate(files: list[Path]) -> tuple[float, int]:
    datas = [f.read_bytes() for f in files]
    total = sum(len(d) for d in datas)
    t0 = time.perf_counter()
    for d in datas:
        hashlib.sha3_256(d).digest()
    return total / (time.perf_counter() - t0) / MB, total


async def bare_download(base: str, files: list[Path]) -> float:
    total = 0
    async with aiohttp.ClientSession(read_bufsize=4 << 20) as s:
        t0 = time.perf_counter()

        async def one(name: str) -> int:
            n = 0
            async with s.get(f"{base}data/{name}") as r:
                async for chunk in r.content.iter_chunked(1 << 20):
                    n += len(chunk)
            return n

        sizes = await asyncio.gather(*(one(f.name) for f in files))
        total = sum(sizes)
        return total / (time.perf_counter() - t0) / MB


async def verified_pull(base: str, dest_root: Path) -> tuple[float, int]:
    ws = Workspace.init(dest_root)
    async with aiohttp.ClientSession(read_bufsize=4 << 20) as s:
        src = HttpSource(base, s)
        t0 = time.perf_counter()
        record = await src.get_head_record()
        result = await pull_dataset(ws, src, alias="bench", head_record=record)
        elapsed = time.perf_counter() - t0
    return result.bytes_fetched / elapsed / MB, result.bytes_fetched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="dataset size in MB (default 200)")
    ap.add_argument("--slice-mb", type=int, default=16, help="slice size in MB (default 16)")
    ap.add_argument("--runs", type=int, default=2, help="pull runs, best is reported")
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-sync-http-", dir=args.dir))
    server = None
    try:
        print(f"building a {args.mb} MB dataset in {args.slice_mb} MB slices ...", flush=True)
        src_ws, files = build_source(scratch / "src", args.mb, args.slice_mb)
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER.format(root=str(ROOT), ws=str(src_ws.root))],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        port = int(server.stdout.readline())
        base = dataset_base_url(f"http://127.0.0.1:{port}", "bench")

        sha_rates = [hash_rate(files)[0] for _ in range(max(2, args.runs))]
        sha = max(sha_rates)
        bare = max(asyncio.run(bare_download(base, files)) for _ in range(args.runs))
        pulls = []
        for i in range(args.runs):
            dest = scratch / f"dst{i}"
            rate, nbytes = asyncio.run(verified_pull(base, dest))
            pulls.append(rate)
            shutil.rmtree(dest)
        pull = max(pulls)
        print(f"bytes per pull:               {nbytes / MB:.1f} MB in {len(files)} slices")
        print(
            f"SHA3-256 in memory:           {sha:8.1f} MB/s  (runs: "
            f"{', '.join(f'{r:.0f}' for r in sha_rates)})"
        )
        print(f"bare HTTP download:           {bare:8.1f} MB/s")
        print(
            f"verified pull over HTTP:      {pull:8.1f} MB/s  (runs: "
            f"{', '.join(f'{r:.0f}' for r in pulls)})"
        )
        ratio = pull / sha
        verdict = "OK" if ratio >= 0.6 else "BELOW TARGET"
        print(f"ratio pull / SHA3-256:        {ratio:8.2f}  (target >= 0.60: {verdict})")
        print(f"ratio pull / bare download:   {pull / bare:8.2f}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
