"""Hostile-peer benchmark: what each attack costs a real node, and whether new peers get in.

Usage: .venv/bin/python scripts/bench/chaos.py [--only NAME ...] [--repeat N] [--attack-s S]

The setup is that of ``tests/node/test_chaos.py``: node A (``odf node run`` subprocess)
owns a dataset, node B (subprocess) follows it, hostile hosts in this process attack A
while A publishes a new head. Each attack runs ``--repeat`` times (default 3). Printed
per run, with the no-attack baseline measured in the same run:

- probes of A's listener as a *new* peer meets it: a fresh TCP connection (from
  127.0.0.3, another machine as far as A can tell) must bring the multistream-select
  header within 1 s; every second during the attack, then ten times in the 10 s after;
- time for B to replicate the head published during the attack, and its ratio to the
  baseline (target: <= 3x + 10 s);
- A's peak RSS growth over its RSS before the attack (target: <= 200 MiB);
- A's CPU seconds, what A's gates counted, tracebacks added to A's log;
- the attacker's own figures.

A run is OK when every probe after the attack answered, B met the deadline, RSS stayed
within bounds, A still runs and its log gained no traceback. Probes *during* an attack
are reported, not judged (a listener may shed load for a moment).

Attacks (besides ``tests/node/test_chaos.py``'s random bytes, idle streams and gossip
flood): ``churn`` (200 connect/subscribe/disconnect cycles, 16 at a time),
``oversized-frames`` and ``garbage`` (a 4 GiB length prefix, or a truncated exchange
request, from a fresh identity that reconnects after each drop), ``amplification``
(requests for A's largest object over 32 streams of one peer, each aborted after its
first bytes), ``half-open`` (200 TCP connections from 127.0.0.2 that never handshake,
reopened when closed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

# This directory holds ``multihash.py`` (another benchmark), which would shadow the
# ``multihash`` package libp2p imports: drop it from the path, add the repository root.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parents[1]))

from p2p.libp2p.exchange import EXCHANGE_PROTOCOL  # noqa: E402
from p2p.libp2p.gossip import HEADS_TOPIC  # noqa: E402
from p2p.libp2p.host import P2PHost  # noqa: E402
from p2p.libp2p.probe import ProbeResult, probe_listener, tcp_endpoint  # noqa: E402
from tests.node.test_chaos import (  # noqa: E402
    MAX_RSS_GROWTH,
    Net,
    RssPeak,
    chaos_net,
    gossip_flood,
    idle_streams,
    random_bytes,
)

Attack = Callable[[P2PHost, Net, float], Coroutine[Any, Any, dict[str, Any]]]

#: Where probes and half-open connections come from (distinct remote addresses for A).
PROBE_IP = "127.0.0.3"
FLOOD_IP = "127.0.0.2"
PROBE_TIMEOUT_S = 1.0
AFTER_PROBES = 10

_COUNTERS = (
    ("libp2p", ("rateLimited", "invalidMessages", "bannedDropped", "refusedConnections")),
    ("libp2p", ("malformedStreams", "handlerFailures")),
    ("exchange", ("streamsRefused", "idleClosed", "busy", "abortedDownloads")),
)


# -- attacks -------------------------------------------------------------------------------


async def churn(hostile: P2PHost, net: Net, seconds: float) -> dict[str, Any]:
    """200 connect/subscribe/disconnect cycles, 16 hosts at once (each subscribed)."""
    assert net.a.info is not None
    addr, cycles, failed = net.a.info.addrs[0], 0, 0
    hosts = [hostile, *[P2PHost() for _ in range(15)]]

    async def nop(_msg: object) -> None:
        return None

    async def run(h: P2PHost, n: int) -> None:
        nonlocal cycles, failed
        for _ in range(n):
            try:
                await h.connect(addr)
                await asyncio.sleep(0.05)  # the subscription reaches A
                await h.disconnect(net.peer)
                cycles += 1
            except Exception:
                failed += 1

    try:
        for h in hosts[1:]:
            await h.start()
        for h in hosts:
            with contextlib.suppress(Exception):
                await h.subscribe(HEADS_TOPIC, nop)
        await asyncio.gather(*(run(h, 200 // len(hosts) + 1) for h in hosts))
    finally:
        for h in hosts[1:]:
            await h.stop()
    return {"cycles": cycles, "failed": failed}


async def _reconnecting(
    net: Net, seconds: float, payload: Callable[[], list[bytes]], parallel: int = 4
) -> dict[str, Any]:
    """Fresh identities send ``payload`` on the exchange, wait for the drop, reconnect."""
    assert net.a.info is not None
    addr, end = net.a.info.addrs[0], time.monotonic() + seconds
    sent, dropped, refused = 0, 0, 0

    async def one() -> None:
        nonlocal sent, dropped, refused
        async with P2PHost() as h:
            try:
                await h.connect(addr)
                stream = await h.open_stream(net.peer, EXCHANGE_PROTOCOL)
            except Exception:
                refused += 1
                return
            with contextlib.suppress(Exception):
                for chunk in payload():
                    await stream.write(chunk)
                    sent += 1
                await stream.close_write()
                async with asyncio.timeout(5):
                    while await stream.read():
                        pass
            dropped += 1

    async def loop() -> None:
        while time.monotonic() < end:
            await one()

    await asyncio.gather(*(loop() for _ in range(parallel)))
    return {"frames": sent, "dropped": dropped, "refused": refused}


async def oversized_frames(hostile: P2PHost, net: Net, seconds: float) -> dict[str, Any]:
    return await _reconnecting(
        net, seconds, lambda: [struct.pack(">IB", 0xFFFFFFF0, 1), b"\0" * 65536]
    )


async def garbage(hostile: P2PHost, net: Net, seconds: float) -> dict[str, Any]:
    # A request header announcing 200 bytes of JSON, then 7 of them and the end.
    return await _reconnecting(net, seconds, lambda: [struct.pack(">IB", 200, 1) + b'{"op":'])


async def amplification(hostile: P2PHost, net: Net, seconds: float) -> dict[str, Any]:
    import json

    body = json.dumps(
        {
            "op": "object",
            "dataset": net.did.to_did_odf(),
            "kind": "data",
            "hash": net.big_object.to_multibase(),
        }
    ).encode()
    req = struct.pack(">IB", len(body), 1) + body
    n, got, end = 0, 0, time.monotonic() + seconds

    async def one() -> None:
        nonlocal n, got
        try:
            stream = await hostile.open_stream(net.peer, EXCHANGE_PROTOCOL)
            await stream.write(req)
            got += len(await stream.read(65536))
            await stream.close()
        except Exception:
            await asyncio.sleep(0.05)
        n += 1

    while time.monotonic() < end:
        await asyncio.gather(*(one() for _ in range(32)))
    return {"requests": n, "bytes": got}


async def half_open(hostile: P2PHost, net: Net, seconds: float) -> dict[str, Any]:
    """200 TCP connections from another address that never handshake, kept at 200."""
    assert net.a.info is not None
    ip, port = tcp_endpoint(net.a.info.addrs[0])
    opened, end = 0, time.monotonic() + seconds

    async def hold() -> None:
        nonlocal opened
        while time.monotonic() < end:
            try:
                reader, writer = await asyncio.open_connection(ip, port, local_addr=(FLOOD_IP, 0))
            except OSError:
                await asyncio.sleep(0.1)
                continue
            opened += 1
            with contextlib.suppress(Exception):
                async with asyncio.timeout(max(0.1, end - time.monotonic())):
                    while await reader.read(4096):
                        pass  # never answer; wait until A drops us
            writer.close()

    await asyncio.gather(*(hold() for _ in range(200)))
    return {"connections": opened}


def _fixed(attack: Callable[[P2PHost, Net], Coroutine[Any, Any, dict[str, Any]]]) -> Attack:
    async def run(hostile: P2PHost, net: Net, seconds: float) -> dict[str, Any]:
        return await attack(hostile, net)

    return run


ATTACKS: dict[str, Attack] = {
    "random-bytes": _fixed(random_bytes),
    "idle-streams": _fixed(idle_streams),
    "oversized-frames": oversized_frames,
    "garbage": garbage,
    "amplification": amplification,
    "gossip-flood": _fixed(gossip_flood),
    "churn": churn,
    "half-open": half_open,
}


# -- measuring -----------------------------------------------------------------------------


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _counters(status: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for section, names in _COUNTERS:
        for name in names:
            out[name] = float(status.get(section, {}).get(name, 0))
    out["bans"] = float(len(status.get("libp2p", {}).get("bans", [])))
    return out


async def _probe(net: Net) -> ProbeResult:
    assert net.a.info is not None
    ip, port = tcp_endpoint(net.a.info.addrs[0])
    return await probe_listener(ip, port, timeout=PROBE_TIMEOUT_S, local_ip=PROBE_IP)


async def _probe_every_second(net: Net, results: list[ProbeResult]) -> None:
    while True:
        t0 = time.monotonic()
        results.append(await _probe(net))
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))


async def _attack_once(net: Net, attack: Attack, seconds: float) -> dict[str, Any]:
    """One attack from a fresh hostile host; A publishes 1 s in; probes during and after."""
    assert net.a.info is not None
    hostile = P2PHost()
    await hostile.start()
    during: list[ProbeResult] = []
    try:
        with contextlib.suppress(Exception):  # a dead listener is what the probes report
            await hostile.connect(net.a.info.addrs[0])
        prober = asyncio.create_task(_probe_every_second(net, during))
        with RssPeak(net.a.proc.pid) as rss:
            task = asyncio.create_task(attack(hostile, net, seconds))
            await asyncio.sleep(1.0)
            deadline = 3 * net.baseline_s + 10.0
            try:
                took = await asyncio.to_thread(net.replicate_s, deadline)
            except AssertionError:
                took = float("inf")
            figures = await _finish(task, seconds)
        prober.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await prober
    finally:
        await hostile.stop()
    after = []
    for _ in range(AFTER_PROBES):
        after.append(await _probe(net))
        await asyncio.sleep(1.0)
    return {**figures, "replicate_s": took, "growth": rss.growth, "during": during, "after": after}


async def _finish(task: asyncio.Task[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The attack's own figures (its failure is a figure too, not the verdict)."""
    try:
        async with asyncio.timeout(seconds + 60):
            return await task
    except Exception as e:
        task.cancel()
        return {"attack_error": repr(e)}


def _probes(results: list[ProbeResult]) -> str:
    ok = sum(r.ok for r in results)
    worst = next((r.error for r in results if not r.ok), None)
    return f"{ok}/{len(results)}" + (f" (first failure: {worst})" if worst else "")


def _run(net: Net, name: str, seconds: float) -> bool:
    pid = net.a.proc.pid
    before, cpu0 = _counters(net.a.status()), _cpu_s(pid)
    tracebacks0 = net.a.log_path.read_text(errors="replace").count("Traceback")
    figures = asyncio.run(_attack_once(net, ATTACKS[name], seconds))
    cpu = _cpu_s(pid) - cpu0
    alive = net.a.proc.poll() is None
    after = _counters(net.a.status()) if alive else before
    delta = {k: int(after[k] - before[k]) for k in after if after[k] != before[k]}
    log = net.a.log_path.read_text(errors="replace")
    tracebacks = log.count("Traceback") - tracebacks0
    took, growth = figures.pop("replicate_s"), figures.pop("growth")
    during, post = figures.pop("during"), figures.pop("after")
    limit = 3 * net.baseline_s + 10
    ok = (
        took <= limit
        and growth <= MAX_RSS_GROWTH
        and alive
        and tracebacks == 0
        and all(r.ok for r in post)
    )
    print(
        f"{name:17s} probes during {_probes(during)}, after {_probes(post)}; "
        f"replicated in {took:6.2f} s ({took / net.baseline_s:5.1f}x baseline, "
        f"limit {limit:.1f} s); peak RSS +{growth / 2**20:6.1f} MiB; CPU {cpu:5.2f} s; "
        f"tracebacks +{tracebacks}; node counted {delta}; attacker {figures}  "
        f"{'OK' if ok else 'FAIL'}",
        flush=True,
    )
    if tracebacks:
        last = log[log.rindex("Traceback") :].splitlines()[:12]
        print("  last traceback in A's log:", *last, sep="\n    ")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(ATTACKS), default=list(ATTACKS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--attack-s", type=float, default=15.0)
    args = parser.parse_args()
    # The attackers' own py-libp2p errors (refused dials, reset streams) are expected.
    logging.disable(logging.ERROR)
    results: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="odf-chaos-") as tmp, chaos_net(Path(tmp)) as net:
        print(f"baseline: B replicates a new head of A in {net.baseline_s:.2f} s (median of 3)")
        print(f"probe before any attack: {asyncio.run(_probe(net))}", flush=True)
        for name in args.only:
            for _ in range(args.repeat):
                results.append(_run(net, name, args.attack_s))
        log = net.a.log_path.read_text(errors="replace")
        print(
            f"A still running: {net.a.proc.poll() is None}; tracebacks in A's log: "
            f"{log.count('Traceback')}; runs OK: {sum(results)}/{len(results)}"
        )


if __name__ == "__main__":
    main()
