"""Pull over the Smart Transfer Protocol vs the Simple Transfer Protocol, same node.

Usage: .venv/bin/python scripts/bench/smart_transfer.py [--blocks 2000] [--slices 500]
       [--slice-kb 4] [--runs 2] [--latency-ms N] [--objects-parallel N]

A source workspace gets one dataset of ``--blocks`` blocks (Seed, schema, ``--slices``
AddData blocks with a data slice of ``--slice-kb`` KB of random bytes each, the rest
watermark-only AddData blocks, spread between them). A node serving it
(`node.http.api`) runs in a *separate process* on 127.0.0.1. Each pull is a verified
clone into a fresh workspace (`p2p.sync.pull_dataset`: hash before parse, chain rules,
objects quarantined, hashed, fsynced, adopted, one head move), through:

- **simple**: the ODF Simple Transfer Protocol as kamu's client speaks it, one
  ``GET blocks/{hash}`` per block, then ``GET data/{hash}`` per object
  (`p2p.http.source.HttpSource` with the batched endpoint switched off);
- **simple+batch**: the same with odf-node's batched-blocks extension
  (``GET blocks?head=…``; a kamu server does not have it);
- **smart**: ``odf+http://…`` (`p2p.smart_transfer.client.SmartSource`): one WebSocket
  exchange for every block (a gzip tar batch) and the download URLs, objects by GET.

Prints, best of ``--runs`` per protocol, the whole pull and its *transfer* part (the
pull less the final commit, `p2p.receive.commit_received`, which writes every block
durably and is the same code and cost whatever the protocol), and the ratios simple /
smart (target: >= 5x); every pull's line has the client's CPU seconds (user,
system). ``--latency-ms`` delays every HTTP request on the
server (a WebSocket only at its upgrade: its three round trips are not delayed), as a
network round trip would: the simple protocol pays it once per block. Every protocol
downloads ``--objects-parallel`` objects at once; the filesystem is synced before
each pull (untimed), so no pull pays for the flushes of what ran before it, and every
other run goes through the protocols in the reverse order.

Every pull's destination is kept until the end of the invocation, not removed after
the pull: on ext4 without a journal (this project's machines) the kernel's inode
allocator skips every inode freed in the last minute (``recently_deleted``; longer
while its inode table is not written back), one lookup each, so creating a file in a
block group where thousands were just freed costs a scan over them. Removing the
previous pull's 2,500 files made the next pull's creations cost 2-2.5 s of kernel
CPU instead of 0.2-0.4 s, varying with how many removals preceded it (an order
effect, not a protocol cost). The load average is printed at the start and the end.

The node keeps a smart pull's answer for the next client of the same head
(`p2p.smart_transfer.plan_cache`), so only the first smart pull pays for reading and
packing the chain. Every run starts a new node process and pulls twice over the smart
protocol, one pull after the other: the first (``smart, first``: the node reads and
packs the chain) and the second (``smart``: it answers from its cache), each best of
``--runs`` like the other protocols, with its ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

import p2p.sync  # noqa: E402
from fbs.model import (  # noqa: E402
    AddData,
    DataField,
    DataSchema,
    DataSlice,
    DataTypeInt64,
    OffsetInterval,
    SetDataSchema,
)
from fbs.multiformats import Multihash  # noqa: E402
from fbs.timestamp import Timestamp  # noqa: E402
from p2p.http.source import HttpSource  # noqa: E402
from p2p.smart_transfer.client import SmartSource  # noqa: E402
from p2p.sync import DEFAULT_OBJECTS_PER_SOURCE, ObjectSource, pull_dataset  # noqa: E402
from storage.dataset import PendingEvent  # noqa: E402
from storage.workspace import Workspace  # noqa: E402

SERVER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from aiohttp import web
from node.http.api import HttpApiConfig, create_app
from storage.workspace import Workspace

@web.middleware
async def latency(request, handler):
    await asyncio.sleep({latency_s!r})
    return await handler(request)

async def main():
    ws = Workspace.open({ws!r})
    app = create_app(ws, config=HttpApiConfig(token="bench-token-bench-token-bench"))
    if {latency_s!r}:
        app.middlewares.insert(0, latency)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def build_source(root: Path, blocks: int, slices: int, slice_kb: int) -> Workspace:
    """The benchmark dataset: ``blocks`` blocks of which ``slices`` carry a data slice.

    The AddData blocks are committed together (one head move): a commit per block would
    replace ``refs/head`` 2,000 times, and the 2,000 inodes that frees slow down every
    file creation nearby for the next minute (see the module docstring), i.e. the first
    pulls. The slices' source files stay until the scratch directory goes.
    """
    ws = Workspace.init(root)
    ds = ws.create_dataset("bench")
    schema = DataSchema(fields=(DataField(name="offset", type=DataTypeInt64()),))
    ds.commit(SetDataSchema(schema=schema), expected_head=ds.head())
    others = blocks - 2 - slices
    assert others >= 0, "--blocks must be at least --slices + 2"
    t0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")
    (root / "slices").mkdir()
    events: list[PendingEvent] = []
    offset, made = 0, 0
    for i in range(slices + others):
        # Slices spread evenly over the chain, watermark-only blocks between them.
        with_data = made < slices and (i * slices) // (slices + others) >= made
        when = Timestamp(t0.nanos + i * 1_000_000_000)
        if with_data:
            data = os.urandom(slice_kb * 1024)
            path = root / "slices" / f"{made}.bin"
            path.write_bytes(data)
            rows = 100
            event = AddData(
                prev_offset=offset - 1 if offset else None,
                new_data=DataSlice(
                    logical_hash=Multihash.sha3_256(b"logical" + data[:64]),
                    physical_hash=Multihash.sha3_256(data),
                    offset_interval=OffsetInterval(start=offset, end=offset + rows - 1),
                    size=len(data),
                ),
                new_watermark=when,
            )
            events.append(PendingEvent(event, data_file=path))
            offset += rows
            made += 1
        else:
            event = AddData(prev_offset=offset - 1 if offset else None, new_watermark=when)
            events.append(PendingEvent(event))
    ds.commit_events(events, expected_head=ds.head())
    state = ds.state()
    assert state is not None and state.sequence_number == blocks - 1, state
    return ws


COMMIT_SECONDS: list[float] = []


def _timed_commit(*args: Any, **kw: Any) -> None:
    t0 = time.perf_counter()
    try:
        _COMMIT(*args, **kw)
    finally:
        COMMIT_SECONDS.append(time.perf_counter() - t0)


_COMMIT = vars(p2p.sync)["commit_received"]
vars(p2p.sync)["commit_received"] = _timed_commit  # measure the commit inside pull_dataset


async def timed_pull(
    make: Callable[[aiohttp.ClientSession], ObjectSource], dest: Path, objects_parallel: int
) -> tuple[float, float, str]:
    """Seconds for a verified clone into a fresh workspace at ``dest``, of its commit, and
    the client's CPU seconds (user, system: a pull slowed by the kernel shows here)."""
    ws = Workspace.init(dest)
    # Every pull starts with nothing dirty on the filesystem (the previous pull's
    # removal, the build): otherwise its flushes pay for what ran before it.
    os.sync()
    COMMIT_SECONDS.clear()
    async with aiohttp.ClientSession() as s:
        src = make(s)
        t0, cpu0 = time.perf_counter(), os.times()
        try:
            record = await src.get_head_record()  # type: ignore[attr-defined]
            result = await pull_dataset(
                ws, src, alias="bench", head_record=record, objects_per_source=objects_parallel
            )
        finally:
            if isinstance(src, SmartSource):
                await src.aclose()
        elapsed, cpu1 = time.perf_counter() - t0, os.times()
    assert result.created and result.blocks_fetched > 0
    cpu = f"cpu {cpu1.user - cpu0.user:.2f} user, {cpu1.system - cpu0.system:.2f} sys"
    return elapsed, sum(COMMIT_SECONDS), cpu


def _simple(base: str) -> Callable[[aiohttp.ClientSession], ObjectSource]:
    def make(s: aiohttp.ClientSession) -> ObjectSource:
        src = HttpSource(base, s)
        src.batch_supported = False  # kamu's simple protocol: one GET per block
        return src

    return make


class _Node:
    """The node serving the source workspace, in its own process (`SERVER`)."""

    def __init__(self, latency_ms: float) -> None:
        self.latency_s = latency_ms / 1000
        self.proc: subprocess.Popen[str] | None = None

    def restart(self, ws_root: Path) -> str:
        """Stop the running node (if any), start a new one; its dataset base URL."""
        self.stop()
        code = SERVER.format(root=str(ROOT), ws=str(ws_root), latency_s=self.latency_s)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        port = int(self.proc.stdout.readline())
        return f"http://127.0.0.1:{port}/bench/"

    def stop(self) -> None:
        """Stop the node process, if running."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.terminate()
            proc.wait(10)


def _batched(base: str) -> Callable[[aiohttp.ClientSession], ObjectSource]:
    return lambda s: HttpSource(base, s)


def _smart(base: str) -> Callable[[aiohttp.ClientSession], ObjectSource]:
    return lambda s: SmartSource("odf+" + base, s)


def _load() -> str:
    """The 1-minute load average (the bench is noisy on a shared machine)."""
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--blocks", type=int, default=2000, help="blocks in the chain (2000)")
    ap.add_argument("--slices", type=int, default=500, help="data slices (500)")
    ap.add_argument("--slice-kb", type=int, default=4, help="KB per slice (4)")
    ap.add_argument("--runs", type=int, default=2, help="pulls per protocol, best reported")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="server delay per request")
    ap.add_argument(
        "--objects-parallel",
        type=int,
        default=DEFAULT_OBJECTS_PER_SOURCE,
        help="parallel object downloads of every protocol (odf pull's default; kamu's "
        "simple-protocol client uses 10)",
    )
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = ap.parse_args()
    load0 = _load()
    scratch = Path(tempfile.mkdtemp(prefix="bench-smart-", dir=args.dir))
    node = _Node(args.latency_ms)
    try:
        print(f"building {args.blocks} blocks, {args.slices} slices of {args.slice_kb} KB ...")
        t0 = time.perf_counter()
        src_ws = build_source(scratch / "src", args.blocks, args.slices, args.slice_kb)
        print(f"  built in {time.perf_counter() - t0:.1f} s", flush=True)
        best: dict[str, float] = {}
        transfer: dict[str, float] = {}
        for run in range(args.runs):
            # A new node process per run: its plan cache is empty, so every run has a
            # first smart pull (the node packs the chain) and a second one (it does not).
            base = node.restart(src_ws.root)
            protocols: dict[str, Callable[[aiohttp.ClientSession], ObjectSource]] = {
                "simple": _simple(base),
                "simple+batch": _batched(base),
                "smart": _smart(base),
            }
            # Every other run in the reverse order: no protocol always follows the same one.
            order = list(protocols.items())
            for name, make in order if run % 2 == 0 else reversed(order):
                for label in ("smart, first", "smart") if name == "smart" else (name,):
                    dest = scratch / f"dst-{label.replace(', ', '-')}-{run}"
                    secs, commit, cpu = asyncio.run(timed_pull(make, dest, args.objects_parallel))
                    best[label] = min(best.get(label, secs), secs)
                    transfer[label] = min(transfer.get(label, secs - commit), secs - commit)
                    print(
                        f"  run {run + 1}: {label:<13} {secs:7.2f} s  "
                        f"(commit {commit:.2f} s, {cpu})",
                        flush=True,
                    )
                    # `dest` stays until the end (module docstring: removed inodes).
        print(
            f"pull of {args.blocks} blocks / {args.slices} slices, latency "
            f"{args.latency_ms:g} ms, {args.objects_parallel} parallel object downloads "
            f"(best of {args.runs}):"
        )
        print(f"  {'protocol':<13} {'pull':>8} {'transfer':>9}")
        for name, secs in best.items():
            print(f"  {name:<13} {secs:7.2f} s {transfer[name]:8.2f} s")
        for other, smart in (
            ("simple", "smart"),
            ("simple+batch", "smart"),
            ("simple", "smart, first"),
        ):
            whole = best[other] / best[smart]
            part = transfer[other] / transfer[smart]
            print(f"ratio {other} / {smart}: pull {whole:5.1f}x, transfer {part:5.1f}x")
        verdict = "OK" if best["simple"] / best["smart"] >= 5 else "BELOW TARGET"
        print(f"target (simple / smart pull >= 5x): {verdict}")
        print(f"load average: {load0} at the start, {_load()} at the end")
    finally:
        node.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
