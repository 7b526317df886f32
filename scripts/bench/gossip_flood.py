"""Gossip flood benchmark: a node's own head gets out while a peer floods it.

Usage: .venv/bin/python scripts/bench/gossip_flood.py [--rate 1500] [--seconds 3] [--runs 5]

Line M - B - C of real `P2PHost` s over loopback TCP in this process (each runs trio in
its own thread, as in the daemon). B is the node under attack, C an honest peer, M a
hostile peer writing pubsub frames straight onto a ``/meshsub`` stream at ``--rate``
messages/s (`tests.p2p.hostile`). Measured in the same run:

- **baseline**: B announces a fresh signed head record, time until C delivers it
  (median of ``--runs``);
- under each attack, started 0.2 s before B announces: **forged** head records (valid
  libp2p signature, head-record signature that does not verify), **replayed** valid
  records (only the rate gate can stop them), **unsigned** messages (bad libp2p
  signature). A new hostile identity each run (a banned one would be refused at once).

Printed per attack: announcement latency (median, worst) and the ratio to the baseline,
messages M wrote before B cut it off, how long that took, what B's gates counted, and
whether B banned M. Target: own head announced within 1 s under a
1,500 msg/s flood.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# This directory holds ``multihash.py`` (another benchmark), which would shadow the
# ``multihash`` package libp2p imports: drop it from the path, add the repository root.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parents[1]))

from fbs.keys import KeyPair  # noqa: E402
from fbs.multiformats import Multihash  # noqa: E402
from fbs.timestamp import Timestamp  # noqa: E402
from p2p.head_record import HeadRecord, sign_head  # noqa: E402
from p2p.libp2p.gossip import HeadGossip  # noqa: E402
from p2p.libp2p.host import P2PHost  # noqa: E402
from tests.p2p.hostile import FloodResult, flood  # noqa: E402

TOPIC = "/odf/heads/bench-flood"
T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")


def _forged(key: KeyPair) -> Callable[[int], bytes]:
    def make(n: int) -> bytes:
        head = Multihash.sha3_256(b"forged %d" % n)
        return HeadRecord(key.dataset_id, head, n + 1, T0, b"\x00" * 64).to_json()

    return make


def _replayed(key: KeyPair) -> Callable[[int], bytes]:
    data = sign_head(key, Multihash.sha3_256(b"replayed"), 7, T0).to_json()
    return lambda _n: data


class Line:
    """B and C connected, gossiping head records on `TOPIC`."""

    def __init__(self) -> None:
        self.node, self.honest = P2PHost(), P2PHost()
        self.got: dict[bytes, float] = {}
        self.gossip: HeadGossip | None = None

    async def start(self) -> None:
        await self.node.start()
        await self.honest.start()

        async def on_c(record: HeadRecord, _origin: str) -> None:
            self.got.setdefault(record.to_json(), time.perf_counter())

        async def on_b(_record: HeadRecord, _origin: str) -> None:
            return None

        self.gossip = HeadGossip(self.node, on_b, topic=TOPIC)
        await self.gossip.start()
        await HeadGossip(self.honest, on_c, topic=TOPIC).start()
        await self.node.connect(self.honest.addrs[0])
        while self.node.peer_id not in self.honest.mesh_peers(TOPIC):
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        await self.honest.stop()
        await self.node.stop()

    async def announce_latency(self, seq: int) -> float:
        """B announces a fresh record; seconds until C delivers it."""
        assert self.gossip is not None
        record = sign_head(KeyPair.generate(), Multihash.sha3_256(b"own %d" % seq), seq, T0)
        t0 = time.perf_counter()
        await self.gossip.announce(record)
        key = record.to_json()
        async with asyncio.timeout(60):
            while key not in self.got:
                await asyncio.sleep(0.002)
        return self.got[key] - t0


def _knobs(args: argparse.Namespace) -> dict[str, float]:
    return {"seconds": args.seconds, "rate": args.rate}


async def _attacked(
    line: Line, payload: Callable[[int], bytes], args: argparse.Namespace, seq: int, sign: bool
) -> tuple[float, FloodResult, bool]:
    hostile = P2PHost()
    await hostile.start()
    try:
        await hostile.connect(line.node.addrs[0])
        task = asyncio.create_task(
            flood(
                hostile,
                line.node.peer_id,
                TOPIC,
                payload,
                seconds=args.seconds,
                rate=args.rate,
                sign=sign,
            )
        )
        await asyncio.sleep(0.2)
        latency = await line.announce_latency(seq)
        result = await task
        return latency, result, line.node.scores.is_banned(hostile.peer_id)
    finally:
        await hostile.stop()


async def main(args: argparse.Namespace) -> None:
    line = Line()
    await line.start()
    try:
        base = []
        for i in range(1, args.runs + 1):
            await asyncio.sleep(0.3)  # past B's own publish pacing, as in the attacked runs
            base.append(await line.announce_latency(i))
        b = statistics.median(base)
        print(f"baseline: own head announced in {b * 1000:.1f} ms median ({args.runs} runs)")
        print(f"attacks at {args.rate:.0f} msg/s for up to {args.seconds} s, new attacker per run:")
        seq = 1000
        attacks = (
            ("forged", _forged, True),
            ("replayed", _replayed, True),
            ("unsigned", _forged, False),
        )
        for name, make, sign in attacks:
            before = dict(line.node.guard_stats.to_dict())
            lat, sent, cut, banned = [], [], [], 0
            for _ in range(args.runs):
                seq += 1
                latency, result, was_banned = await _attacked(
                    line, make(KeyPair.generate()), args, seq, sign
                )
                lat.append(latency)
                sent.append(result.sent)
                cut.append(result.seconds if result.cut_off else float("inf"))
                banned += was_banned
            after = line.node.guard_stats.to_dict()
            delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
            m = statistics.median(lat)
            print(
                f"  {name:9s} own head in {m * 1000:7.1f} ms median, {max(lat) * 1000:7.1f} ms "
                f"worst (ratio to baseline {m / b:5.1f}); attacker wrote "
                f"{statistics.median(sent):.0f} msgs, cut off after "
                f"{statistics.median(cut) * 1000:.0f} ms; banned {banned}/{args.runs}; "
                f"B counted {delta}"
            )
        print(f"node still running: {line.node.running}; restarts: {line.node.restarts}")
    finally:
        await line.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1500.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
