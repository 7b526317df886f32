"""Hostile peers against a real node: the node stays on the network under abuse.

Node A (``odf node run`` subprocess) owns a dataset; node B (another subprocess) follows
it. A hostile peer, written here (a `P2PHost` in the test process plus the raw frames
of `tests.p2p.hostile`), attacks A. For every attack, during the attack A publishes a
new head and B must replicate it within 3x the no-attack time + 10 s; afterwards A must
still run its libp2p host, A's peak RSS must have grown by at most 200 MiB over what it
used before the attack, and A's log must hold no traceback.

The attacks: random bytes on every protocol A speaks, 1,200 idle exchange streams,
oversized frames, request amplification (requests for A's largest object, aborted after
the first bytes), a forged-head gossip flood, 200 connect/disconnect cycles.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from p2p.head_record import HeadRecord
from p2p.libp2p.exchange import EXCHANGE_PROTOCOL
from p2p.libp2p.gossip import HEADS_TOPIC
from p2p.libp2p.host import GOSSIPSUB_PROTOCOLS, P2PHost
from storage.workspace import Workspace
from tests.node.test_daemon_process import Node, head_of, wait_until, write_config
from tests.p2p.hostile import flood
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

#: The RSS growth a node may show under any attack.
MAX_RSS_GROWTH = 200 << 20
#: How long each attack runs (seconds) before the replication deadline starts counting.
ATTACK_S = 6.0
PROTOCOLS = (*GOSSIPSUB_PROTOCOLS, EXCHANGE_PROTOCOL, "/ipfs/id/1.0.0", "/ipfs/ping/1.0.0")
T0 = Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")


@dataclass
class Net:
    a: Node
    b: Node
    did: DatasetId
    slices: Path
    baseline_s: float
    big_object: Multihash

    @property
    def peer(self) -> str:
        """A's peer id."""
        assert self.a.info is not None
        return self.a.info.peer_id

    def publish(self) -> Multihash:
        """A new head on A (A's watcher signs and announces it)."""
        ds = self.a.ws.get(self.did)
        add_slices(ds, self.slices / f"s{time.monotonic_ns()}", 1)
        head = ds.head()
        assert head is not None
        return head

    def replicate_s(self, timeout: float) -> float:
        """Publish on A; seconds until B holds the new head."""
        t0 = time.monotonic()
        head = self.publish()
        wait_until(lambda: head_of(self.b.ws, self.did) == head, "B to replicate", timeout)
        return time.monotonic() - t0


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"VmRSS not in /proc/{pid}/status")


class RssPeak:
    """The largest RSS of a process while this context runs (sampled every 20 ms).

    Not VmHWM: that is the peak since the process started, which earlier work (the
    first sync) may already have set.
    """

    def __init__(self, pid: int) -> None:
        self.pid, self.before, self.peak = pid, _rss(pid), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(OSError, AssertionError):
                self.peak = max(self.peak, _rss(self.pid))

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.before)


@contextlib.contextmanager
def chaos_net(tmp: Path) -> Iterator[Net]:
    """Publisher A and follower B (subprocesses) in ``tmp``, synced, baseline measured."""
    wa = new_workspace(tmp / "a")
    ds = make_dataset(wa, "chaos", tmp / "slices0", slices=3, pad=8 << 20)
    state = ds.state()
    assert state is not None
    big = max(
        (p for p in (tmp / "a").glob("**/data/*") if p.is_file()), key=lambda p: p.stat().st_size
    )
    a = Node(tmp / "a", "--config", str(write_config(tmp / "a.yaml")))
    try:
        assert a.info is not None
        new_workspace(tmp / "b")
        cfg_b = write_config(tmp / "b.yaml", follow=["all"], bootstrap=[a.info.addrs[0]])
        b = Node(tmp / "b", "--config", str(cfg_b))
        try:
            wait_until(lambda: head_of(b.ws, state.dataset_id) == state.head, "first sync")
            n = Net(a, b, state.dataset_id, tmp, 0.0, Multihash.from_multibase(big.name))
            n.baseline_s = _median([n.replicate_s(60) for _ in range(3)])
            yield n
        finally:
            b.kill()
    finally:
        a.kill()


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    with chaos_net(tmp_path_factory.mktemp("chaos")) as n:
        yield n


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


Attack = Callable[[P2PHost, Net], Coroutine[Any, Any, dict[str, Any]]]


async def hostile_run(net: Net, attack: Attack) -> dict[str, Any]:
    """Run ``attack`` from a fresh hostile host; publish on A meanwhile; measure."""
    assert net.a.info is not None
    hostile = P2PHost()
    await hostile.start()
    try:
        await hostile.connect(net.a.info.addrs[0])
        with RssPeak(net.a.proc.pid) as rss:
            task = asyncio.create_task(attack(hostile, net))
            await asyncio.sleep(1.0)  # the attack is under way
            deadline = 3 * net.baseline_s + 10.0
            took = await asyncio.to_thread(net.replicate_s, deadline)
            figures = await _finish(task)
    finally:
        await hostile.stop()
    return {**figures, "replicate_s": took, "peak_growth": rss.growth}


async def _finish(task: asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
    """The attack's own figures (its failure is a figure too, not the verdict)."""
    try:
        async with asyncio.timeout(ATTACK_S + 60):
            return await task
    except Exception as e:
        task.cancel()
        return {"attack_error": repr(e)}


def _assert_healthy(net: Net, figures: dict[str, Any], what: str) -> None:
    assert net.a.proc.poll() is None, f"A died under {what}: {net.a.log()}"
    status = net.a.status()
    assert status["libp2p"]["running"], f"A's host stopped under {what}: {status['libp2p']}"
    assert figures["peak_growth"] <= MAX_RSS_GROWTH, (what, figures)
    log = net.a.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"traceback in A's log after {what}"


# -- attacks -------------------------------------------------------------------------------


async def random_bytes(hostile: P2PHost, net: Net) -> dict[str, Any]:
    # A fresh identity per protocol: the first offences ban the sender, and every
    # protocol must be tried.
    rng = random.Random(18)
    sent = 0
    for proto in PROTOCOLS:
        async with _fresh_host(net) as h:
            for _ in range(3):
                with contextlib.suppress(Exception):
                    stream = await h.open_stream(net.peer, proto)
                    await stream.write(rng.randbytes(rng.choice((1, 7, 100, 4000))))
                    await stream.close()
                    sent += 1
    return {"streams": sent, "protocols": len(PROTOCOLS)}


@contextlib.asynccontextmanager
async def _fresh_host(net: Net) -> AsyncIterator[P2PHost]:
    assert net.a.info is not None
    h = P2PHost()
    await h.start()
    try:
        await h.connect(net.a.info.addrs[0])
        yield h
    finally:
        await h.stop()


async def idle_streams(hostile: P2PHost, net: Net) -> dict[str, Any]:
    streams = []
    for _ in range(1200):
        try:
            streams.append(await hostile.open_stream(net.peer, EXCHANGE_PROTOCOL))
        except Exception:
            break
    await asyncio.sleep(ATTACK_S)
    for s in streams:
        with contextlib.suppress(Exception):
            await s.close()
    return {"opened": len(streams)}


async def oversized_frames(hostile: P2PHost, net: Net) -> dict[str, Any]:
    refused = 0
    end = time.monotonic() + ATTACK_S
    while time.monotonic() < end:
        try:
            stream = await hostile.open_stream(net.peer, EXCHANGE_PROTOCOL)
        except Exception:
            break  # banned: the point of the exercise
        with contextlib.suppress(Exception):
            await stream.write(struct.pack(">IB", 0xFFFFFFF0, 1))
            for _ in range(64):  # 4 MiB after a header the node must refuse at once
                await stream.write(b"\0" * 65536)
        refused += 1
        with contextlib.suppress(Exception):
            await stream.close()
    return {"streams": refused}


def _request(obj: dict[str, Any]) -> bytes:
    import json

    body = json.dumps(obj).encode()
    return struct.pack(">IB", len(body), 1) + body


async def amplification(hostile: P2PHost, net: Net) -> dict[str, Any]:
    req = _request(
        {
            "op": "object",
            "dataset": net.did.to_did_odf(),
            "kind": "data",
            "hash": net.big_object.to_multibase(),
        }
    )
    n, got = 0, 0
    end = time.monotonic() + ATTACK_S

    async def one() -> None:
        nonlocal n, got
        try:
            stream = await hostile.open_stream(net.peer, EXCHANGE_PROTOCOL)
            await stream.write(req)
            got += len(await stream.read(65536))
            await stream.close()  # abort after the first bytes
        except Exception:
            await asyncio.sleep(0.05)
        n += 1

    while time.monotonic() < end:
        await asyncio.gather(*(one() for _ in range(16)))
    return {"requests": n, "bytes": got}


async def gossip_flood(hostile: P2PHost, net: Net) -> dict[str, Any]:
    key = KeyPair.generate()

    def forged(i: int) -> bytes:
        head = Multihash.sha3_256(b"forged %d" % i)
        return HeadRecord(key.dataset_id, head, i + 1, T0, b"\0" * 64).to_json()

    result = await flood(hostile, net.peer, HEADS_TOPIC, forged, seconds=ATTACK_S, rate=1500)
    return {"sent": result.sent, "cut_off": result.cut_off}


async def churn(hostile: P2PHost, net: Net) -> dict[str, Any]:
    """200 connect/disconnect cycles: 4 hosts at once, 50 each (one is too slow alone)."""
    assert net.a.info is not None
    addr = net.a.info.addrs[0]
    cycles = 0

    async def cycle_50(h: P2PHost) -> None:
        nonlocal cycles
        for _ in range(50):
            with contextlib.suppress(Exception):
                await h.disconnect(net.peer)
                await h.connect(addr)
                cycles += 1

    hosts = [hostile, *[P2PHost() for _ in range(3)]]
    for h in hosts[1:]:
        await h.start()
    try:
        await asyncio.gather(*(cycle_50(h) for h in hosts))
    finally:
        for h in hosts[1:]:
            await h.stop()
    return {"cycles": cycles}


ATTACKS: dict[str, Attack] = {
    "random-bytes": random_bytes,
    "idle-streams": idle_streams,
    "oversized-frames": oversized_frames,
    "amplification": amplification,
    "gossip-flood": gossip_flood,
    "churn": churn,
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_node_stays_on_the_network_under_attack(net: Net, name: str) -> None:
    figures = asyncio.run(hostile_run(net, ATTACKS[name]))
    _assert_healthy(net, figures, name)
    assert figures["replicate_s"] <= 3 * net.baseline_s + 10.0, (name, figures)


def test_a_still_serves_after_every_attack(net: Net, tmp_path: Path) -> None:
    # Runs last in this module: after all attacks, a fresh follower clones A.
    ws = Workspace.init(tmp_path / "c")
    assert ws is not None
    assert net.replicate_s(3 * net.baseline_s + 10.0) > 0
