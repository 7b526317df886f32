"""libp2p object exchange benchmark: verified transfer vs a bare py-libp2p stream.

Usage: .venv/bin/python scripts/bench/sync_libp2p.py [--mb 100] [--runs 3] [--dir PATH]

Two `P2PHost` s in this process (each runs trio in its own thread, as in the daemon),
connected over TCP on 127.0.0.1 (noise + yamux). Measured in the same run, alternating:

- **bare**: a stream handler writes the N MB from memory in 1 MiB writes and closes;
  the client reads to EOF and counts bytes (no framing, no hashing, no file);
- **exchange**: `ExchangeClient.get_object` of the same N MB object from a workspace
  over ``/odf/exchange/1.0.0``: framing and limits, SHA3-256 of every byte, written to a
  quarantine file, fsync, rename into place (the whole verified path);
- **sha3**: SHA3-256 of the same bytes in memory (the hashing ceiling).

Figures: MiB/s of each (best of ``--runs``), and the ratio exchange / bare, best and
median (target >= 0.8). Both hosts share the machine with whatever else runs:
use several runs on a busy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This directory holds ``multihash.py`` (another benchmark), which would shadow the
# ``multihash`` package libp2p imports: drop it from the path, add the repository root.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parents[1]))

from libp2p.network.stream.exceptions import StreamEOF  # noqa: E402

from fbs.multiformats import Multihash  # noqa: E402
from p2p.libp2p.exchange import ExchangeClient, ExchangeServer  # noqa: E402
from p2p.libp2p.host import P2PHost  # noqa: E402
from storage.workspace import Workspace  # noqa: E402

BARE = "/odf/bench-bare/1.0.0"
WRITE = 2**20


async def run(mb: int, runs: int, root: Path) -> None:
    size = mb * 2**20
    data = os.urandom(size)
    h = Multihash.sha3_256(data)
    ws = Workspace.init(root / "server")
    ds = ws.create_dataset("bench/data")
    ds.layout.data.put(h, data)
    state = ds.state()
    assert state is not None
    did = state.dataset_id

    async def bare_handler(stream: Any) -> None:
        view = memoryview(data)
        for i in range(0, size, WRITE):
            await stream.write(bytes(view[i : i + WRITE]))
        await stream.close()

    server, client_host = P2PHost(), P2PHost()
    server.set_stream_handler(BARE, bare_handler)
    ExchangeServer(ws).register(server)
    async with server, client_host:
        await client_host.connect(server.addrs[0])
        client = ExchangeClient(client_host)

        async def bare_fetch() -> int:
            stream = await client_host.new_stream_trio(server.peer_id, BARE)
            got = 0
            while True:
                try:
                    got += len(await stream.read(WRITE))
                except StreamEOF:
                    break
            await stream.close()
            return got

        bare_s, ex_s = [], []
        for i in range(runs):
            t = time.perf_counter()
            got = await client_host.run_trio(bare_fetch)
            bare_s.append(time.perf_counter() - t)
            assert got == size, f"bare transfer got {got} of {size} bytes"
            dest = root / "client" / f"run{i}" / h.to_multibase()
            t = time.perf_counter()
            n = await client_host.run_trio(client.get_object, server.peer_id, did, "data", h, dest)
            ex_s.append(time.perf_counter() - t)
            assert n == size and dest.stat().st_size == size
            shutil.rmtree(dest.parent)
    t = time.perf_counter()
    hashlib.sha3_256(data).digest()
    sha_s = time.perf_counter() - t

    def rate(s: float) -> float:
        return size / 2**20 / s

    bare, ex = rate(min(bare_s)), rate(min(ex_s))
    print(f"transfer of {mb} MiB, best of {runs} (two hosts, one process, TCP loopback)")
    print(
        f"  bare py-libp2p stream : {bare:8.1f} MiB/s  runs {[round(rate(s), 1) for s in bare_s]}"
    )
    print(f"  exchange, verified    : {ex:8.1f} MiB/s  runs {[round(rate(s), 1) for s in ex_s]}")
    print(f"  sha3-256 in memory    : {rate(sha_s):8.1f} MiB/s")
    med = statistics.median(bare_s) / statistics.median(ex_s)
    print(f"ratio exchange / bare   : {ex / bare:.2f} best, {med:.2f} median  (target >= 0.8)")


def main() -> None:
    """Parse arguments and run the benchmark."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=100, help="MiB to transfer (default 100)")
    p.add_argument("--runs", type=int, default=3, help="runs of each (default 3)")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="odf-bench-p2p-", dir=args.dir))
    try:
        asyncio.run(run(args.mb, args.runs, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
