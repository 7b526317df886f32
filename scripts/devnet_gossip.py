"""The gossip phase of `scripts/devnet-scale`: head announcements over shards vs one topic.

Worker side (`GossipWorker`, trio, one per worker process): hosts that can be stopped
and restarted on the same port (churn), subscriptions per mode, a schedule of
publishes run at wall-clock times, and counters (`HostStats`): deliveries per message
with their time, every gossip message the router received with the repeats it had seen
already, the messages py-libp2p's per-forwarder limit dropped; and the worker's CPU
time per mode. A mode is prepared first (dials, subscriptions, then a bounded wait for
a pubsub stream on every connection) and runs from a start time the coordinator sets
once every worker is ready. Coordinator side (`plan_phase`, `report_phase`): a seeded
plan (datasets, publishers, followers, publishes at a fixed network-wide rate, churn)
and the figures.

Modes, run one after another on the same hosts and plan (a mode's backlog on a
starved machine spills into the next one's CPU time):

* ``single``: every host on the single head topic (``/odf/heads/1.0.0``) only;
* ``shards``: every host on the shards of the datasets it publishes or follows plus
  its backbone shards, over the connections of the plan only;
* ``shards+dial``: the same, after each follower dialled the publishers of what it
  follows (what a provider lookup in the DHT gives the daemon);
* ``shards+dht``: shards with the daemon's shard links (`node.daemon.shard_links`):
  publishers provide their datasets in the DHT (again after a restart), and every
  follower, once a second, looks up in the DHT each followed dataset none of whose
  providers is in its shard topic (at once, then backing off from 2 s to 60 s) and dials
  up to 2 of them, at most 4 dials a second per host (needs ``--phases dht,gossip``).

The validator of each topic is the node's own check (`HeadRecord.from_json`: parse and
signature; on a shard, the record's shard), so receiving costs what it costs a node.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

SINGLE_TOPIC = "/odf/heads/1.0.0"
MODES = ("single", "shards", "shards+dial", "shards+dht")


def message_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class HostStats:
    """What one host saw in one mode (kept across its restarts)."""

    delivered: dict[str, float] = field(default_factory=dict)  # message key -> time
    router_in: int = 0
    router_repeats: int = 0
    rate_dropped: int = 0  # over py-libp2p's per-forwarder per-topic limit
    published: list[list[Any]] = field(default_factory=list)  # [key, dataset, time]
    skipped: int = 0
    up: list[list[float]] = field(default_factory=list)  # [from, to] wall times

    def to_dict(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "router_in": self.router_in,
            "router_repeats": self.router_repeats,
            "rate_dropped": self.rate_dropped,
            "published": self.published,
            "skipped": self.skipped,
            "up": self.up,
        }


@dataclass
class Slot:
    """One host of a worker: its key, port, the stack of its current run."""

    index: int
    key: Any
    build: Callable[[Any, tuple[str, ...]], Any]
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    stack: Any = None
    scope: trio.CancelScope | None = None
    nursery: trio.Nursery | None = None
    stats: HostStats = field(default_factory=HostStats)
    topics: set[str] = field(default_factory=set)

    @property
    def up(self) -> bool:
        return self.stack is not None

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run the host until `stop`; restartable on the same port."""
        stack = self.build(self.key, self.listen)
        with trio.CancelScope() as scope:
            self.scope = scope
            async with stack.run(), trio.open_nursery() as nursery:
                self.stack, self.nursery = stack, nursery
                addr = stack.host.get_addrs()[0]
                self.listen = (str(addr).rsplit("/p2p/", 1)[0],)
                _count_router(self)
                task_status.started()
                await trio.sleep_forever()
        self.stack, self.nursery, self.topics = None, None, set()

    def stop(self) -> None:
        if self.scope is not None:
            self.scope.cancel()

    @property
    def addr(self) -> str:
        return str(self.stack.host.get_addrs()[0])


def _count_router(slot: Slot) -> None:
    """Count every gossip message the router receives from others, and the repeats."""
    pubsub = slot.stack.pubsub
    original = pubsub.push_msg

    async def counted(forwarder: Any, msg: Any) -> None:
        if forwarder != pubsub.my_id:
            slot.stats.router_in += 1
            if pubsub._is_msg_seen(msg):
                slot.stats.router_repeats += 1
        await original(forwarder, msg)

    pubsub.push_msg = counted
    router = slot.stack.gossipsub
    check = router._check_spam_protection

    def rate_checked(peer: Any, msg: Any) -> bool:
        ok = bool(check(peer, msg))
        slot.stats.rate_dropped += not ok
        return ok

    router._check_spam_protection = rate_checked


def _validator(topic: str) -> Callable[[Any, Any], bool]:
    from p2p.head_record import HeadRecord
    from p2p.libp2p.shards import is_shard_topic, topic_for

    def check(forwarder: Any, msg: Any) -> bool:
        try:
            record = HeadRecord.from_json(bytes(msg.data))
        except Exception:
            return False
        return not is_shard_topic(topic) or topic_for(record.dataset_id) == topic

    return check


async def subscribe(slot: Slot, topic: str) -> None:
    if topic in slot.topics or slot.stack is None or slot.nursery is None:
        return
    pubsub = slot.stack.pubsub
    pubsub.set_topic_validator(topic, _validator(topic), False)
    sub = await pubsub.subscribe(topic)
    slot.topics.add(topic)

    async def drain() -> None:
        async for msg in sub:
            key = message_key(bytes(msg.data))
            slot.stats.delivered.setdefault(key, time.time())

    slot.nursery.start_soon(drain)


def topics_of(slot: Slot, mode: str, datasets: list[Any], epoch: int) -> set[str]:
    from libp2p.peer.id import ID

    from p2p.libp2p.shards import backbone_shards, wanted_topics

    if mode == "single":
        return {SINGLE_TOPIC}
    me = ID.from_base58(str(slot.stack.host.get_id())).to_bytes()
    return set(wanted_topics(datasets, backbone_shards(me, epoch)))


async def dial(slot: Slot, addrs: list[str], failed: list[int]) -> None:
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from multiaddr import Multiaddr

    async def one(addr: str) -> None:
        try:
            with trio.fail_after(20):
                await slot.stack.host.connect(info_from_p2p_addr(Multiaddr(addr)))
        except Exception:
            failed[0] += 1

    async with trio.open_nursery() as n:
        for addr in addrs:
            if slot.stack is not None:
                n.start_soon(one, addr)


class GossipWorker:
    """The slots of one worker process and the gossip phase commands."""

    def __init__(self, slots: list[Slot], nursery: trio.Nursery) -> None:
        self.slots, self.nursery = slots, nursery
        self.links: dict[int, list[str]] = {}
        self._pending: tuple[dict[str, Any], dict[int, list[Any]], int] = ({}, {}, 0)
        #: The shard-link keepers of a ``shards+dht`` mode (cancelled at its end).
        self._links_scope = trio.CancelScope()
        self._provides: dict[int, list[Any]] = {}

    def slot(self, index: int) -> Slot:
        return next(s for s in self.slots if s.index == index)

    async def prepare(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Set one mode up: dial, subscribe, wait for pubsub on every connection.

        Connections whose pubsub stream has not opened (py-libp2p opens it after
        identify, which times out on a starved loop) carry no gossip: the wait is
        bounded by ``ready_s`` and what is missing then is reported.
        """
        from fbs.did import DatasetId
        from p2p.libp2p.shards import current_epoch

        mode, epoch = cmd["mode"], current_epoch(time.time())
        datasets = {int(i): DatasetId.from_did(d) for i, d in cmd["datasets"].items()}
        mine = {int(h): [datasets[d] for d in ds] for h, ds in cmd["interest"].items()}
        failed = [0]
        async with trio.open_nursery() as n:
            for h, addrs in cmd.get("dial", {}).items():
                n.start_soon(dial, self.slot(int(h)), addrs, failed)
        for s in self.slots:
            await self._resubscribe(s, topics_of(s, mode, mine[s.index], epoch))
        if mode == "shards+dht":
            await self._start_links(cmd, datasets)
        started = time.monotonic()
        with trio.move_on_after(cmd["ready_s"]):
            while self._pubsub_ready()[1] < self._pubsub_ready()[0]:
                await trio.sleep(0.2)
        self._pending = (cmd, mine, epoch)
        conns, ready = self._pubsub_ready()
        waited = time.monotonic() - started
        return {"conns": conns, "pubsub": ready, "failed_dials": failed[0], "waited": waited}

    def _pubsub_ready(self) -> tuple[int, int]:
        """Connections of the running hosts, and those with a pubsub stream."""
        up = [s.stack for s in self.slots if s.up]
        conns = sum(len(st.host.get_connected_peers()) for st in up)
        return conns, sum(len(st.pubsub.peers) for st in up)

    async def run(self, start_at: float) -> dict[str, Any]:
        """Run the prepared mode from ``start_at``: publishes and churn; then report."""
        cmd, mine, epoch = self._pending
        mode = cmd["mode"]
        for s in self.slots:
            s.stats = HostStats(up=[[time.time(), 0.0]] if s.up else [])
        cpu = time.process_time()
        async with trio.open_nursery() as n:
            for at, *event in cmd["publish"]:
                n.start_soon(self._publish, mode, [start_at + at, *event])
            for down, up, host in cmd["churn"]:
                n.start_soon(self._churn, mode, [start_at + down, start_at + up, host], mine, epoch)
        await trio.sleep(max(0.0, start_at + cmd["end_s"] - time.time()))
        self._links_scope.cancel()
        cpu = time.process_time() - cpu
        out = {}
        for s in self.slots:
            if s.stats.up and s.stats.up[-1][1] == 0.0:
                s.stats.up[-1][1] = time.time()
            out[str(s.index)] = s.stats.to_dict()
        return {"hosts": out, "cpu_s": cpu}

    async def _resubscribe(self, slot: Slot, topics: set[str]) -> None:
        """Join ``topics`` and leave the others: a topic left and joined again within
        gossipsub's back-off (10 s after an unsubscribe) gets no mesh meanwhile."""
        if slot.stack is None:
            return
        for topic in sorted(slot.topics - topics):
            await slot.stack.pubsub.unsubscribe(topic)
            slot.stack.pubsub.remove_topic_validator(topic)
            slot.topics.discard(topic)
        for topic in sorted(topics - slot.topics):
            await subscribe(slot, topic)

    async def _publish(self, mode: str, event: list[Any]) -> None:
        from fbs.keys import KeyPair
        from fbs.multiformats import Multihash
        from fbs.timestamp import Timestamp
        from p2p.head_record import sign_head
        from p2p.libp2p.shards import topic_for

        at, host, dataset, seed, seq = event
        await trio.sleep(max(0.0, at - time.time()))
        slot = self.slot(host)
        key = KeyPair(bytes.fromhex(seed))
        record = sign_head(key, Multihash.sha3_256(f"{seed}/{seq}".encode()), seq, Timestamp(0))
        data = record.to_json()
        if slot.stack is None:
            slot.stats.skipped += 1
            return
        topic = SINGLE_TOPIC if mode == "single" else topic_for(record.dataset_id)
        slot.stats.published.append([message_key(data), dataset, time.time()])
        try:
            await slot.stack.pubsub.publish(topic, data)
        except Exception:
            slot.stats.skipped += 1

    async def _churn(
        self, mode: str, event: list[Any], mine: dict[int, list[Any]], epoch: int
    ) -> None:
        down_at, up_at, host = event
        slot = self.slot(host)
        await trio.sleep(max(0.0, down_at - time.time()))
        slot.stop()
        if slot.stats.up:
            slot.stats.up[-1][1] = time.time()
        await trio.sleep(max(0.0, up_at - time.time()))
        await self.nursery.start(slot.run)
        slot.stats.up.append([time.time(), 0.0])
        # As the daemon would: its bootstrap peers, and the providers of what it follows
        # (the DHT's answer); the peers that had dialled it do not redial it.
        providers = self._pending[0].get("dial", {}).get(str(host), [])
        await dial(slot, self.links.get(host, []) + providers, [0])
        await self._resubscribe(slot, topics_of(slot, mode, mine[host], epoch))
        if mode == "shards+dht":
            await _provide(slot, self._provides.get(host, []))

    async def _start_links(self, cmd: dict[str, Any], datasets: dict[int, Any]) -> None:
        """Provide the published datasets; start one link keeper per host."""
        self._links_scope = trio.CancelScope()
        self._provides = {int(h): [datasets[d] for d in ds] for h, ds in cmd["provides"].items()}
        follows = {int(h): [datasets[d] for d in ds] for h, ds in cmd["follows"].items()}
        async with trio.open_nursery() as n:
            for s in self.slots:
                n.start_soon(_provide, s, self._provides.get(s.index, []))

        async def keepers() -> None:
            with self._links_scope:
                async with trio.open_nursery() as n:
                    for s in self.slots:
                        n.start_soon(_keep_links, s, follows.get(s.index, []))

        self.nursery.start_soon(keepers)


async def _provide(slot: Slot, dids: list[Any]) -> None:
    if slot.stack is None or slot.stack.dht is None:
        return
    with trio.move_on_after(60):
        async with trio.open_nursery() as n:
            for did in dids:
                n.start_soon(slot.stack.dht.provide, did)


async def _keep_links(slot: Slot, follows: list[Any]) -> None:
    """The daemon's shard-link rule for one host (see the module docstring)."""
    from p2p.libp2p.shards import topic_for

    providers: dict[Any, set[str]] = {d: set() for d in follows}
    next_at = {d: 0.0 for d in follows}
    delay = {d: 2.0 for d in follows}
    while True:
        await trio.sleep(1.0)
        stack = slot.stack
        if stack is None or stack.dht is None:
            continue
        budget = [4]
        for did in follows:
            peers = {str(p) for p in stack.pubsub.peer_topics.get(topic_for(did), ())}
            if peers & providers[did]:
                next_at[did], delay[did] = 0.0, 2.0
                continue
            if next_at[did] > time.monotonic() or budget[0] <= 0:
                continue
            next_at[did] = time.monotonic() + delay[did]
            delay[did] = min(60.0, delay[did] * 2)
            found = []
            with trio.move_on_after(30), contextlib.suppress(Exception):
                found = await stack.dht.find_providers(did)
            me = str(stack.host.get_id())
            found = [p for p in found if str(p.peer_id) != me][:2]
            providers[did] |= {str(p.peer_id) for p in found}
            for info in found:
                if info.peer_id in stack.host.get_connected_peers() or budget[0] <= 0:
                    continue
                budget[0] -= 1
                with trio.move_on_after(20), contextlib.suppress(Exception):
                    await stack.host.connect(info)


# -- coordinator ------------------------------------------------------------------------


@dataclass(frozen=True)
class PhasePlan:
    """A seeded gossip plan shared by every mode."""

    datasets: dict[int, str]  # index -> DID
    seeds: dict[int, str]  # index -> key seed (hex)
    publisher: dict[int, int]  # dataset -> host
    follows: dict[int, list[int]]  # host -> datasets
    events: list[tuple[float, int]]  # (offset s, dataset)
    churn: list[tuple[float, float, int]]  # (down offset, up offset, host)
    duration_s: float


def plan_phase(
    hosts: int,
    n_datasets: int,
    follows: int,
    heads: int,
    rate: float,
    churn: int,
    rng: random.Random,
) -> PhasePlan:
    from fbs.keys import KeyPair

    seeds = {d: rng.randbytes(32).hex() for d in range(n_datasets)}
    dids = {d: KeyPair(bytes.fromhex(s)).dataset_id.to_did_odf() for d, s in seeds.items()}
    publisher = {d: rng.randrange(hosts) for d in range(n_datasets)}
    following = {
        h: rng.sample([d for d in range(n_datasets) if publisher[d] != h], follows)
        for h in range(hosts)
    }
    duration = heads / rate
    events = [(i / rate, rng.randrange(n_datasets)) for i in range(heads)]
    churned = rng.sample(range(hosts), min(churn, hosts))
    downs = []
    for h in churned:
        down = rng.uniform(0.1, 0.5) * duration
        downs.append((down, down + rng.uniform(0.1, 0.3) * duration, h))
    return PhasePlan(dids, seeds, publisher, following, events, downs, duration)


def worker_command(
    plan: PhasePlan,
    mode: str,
    first: int,
    count: int,
    settle_s: float,
    addrs: list[str],
    seq_base: int,
    ready_s: float,
) -> dict[str, Any]:
    """The ``gossip-prepare`` command of the worker holding hosts first..first+count-1."""
    mine = range(first, first + count)
    interest = {
        h: sorted(set(plan.follows[h]) | {d for d, p in plan.publisher.items() if p == h})
        for h in mine
    }
    publish = []
    for i, (offset, d) in enumerate(plan.events):
        if plan.publisher[d] in mine:
            publish.append([offset, plan.publisher[d], d, plan.seeds[d], seq_base + i])
    churn = [[a, b, h] for a, b, h in plan.churn if h in mine]
    dial = {}
    if mode == "shards+dial":
        dial = {h: sorted({addrs[plan.publisher[d]] for d in plan.follows[h]}) for h in mine}
    provides = {h: sorted(d for d, p in plan.publisher.items() if p == h) for h in mine}
    return {
        "cmd": "gossip-prepare",
        "mode": mode,
        "provides": provides,
        "follows": {h: sorted(plan.follows[h]) for h in mine},
        "datasets": plan.datasets,
        "interest": interest,
        "publish": publish,
        "churn": churn,
        "dial": dial,
        "end_s": plan.duration_s + settle_s,
        "ready_s": ready_s,
    }


def _up_since(up: list[list[float]], t: float) -> bool:
    """Whether the host was up at ``t`` and stayed up to the end of the mode."""
    return bool(up) and up[-1][0] <= t


def report_phase(
    plan: PhasePlan, mode: str, ready: list[dict[str, Any]], replies: list[dict[str, Any]]
) -> dict[str, Any]:
    """Delivery ratio to followers, latency, repeats, messages per host."""
    hosts = {int(h): st for r in replies for h, st in r["hosts"].items()}
    followers: dict[int, list[int]] = {}
    for h, ds in plan.follows.items():
        for d in ds:
            followers.setdefault(d, []).append(h)
    expected = delivered = extra = 0
    latencies = []
    for st in hosts.values():
        for key, d, t in st["published"]:
            for f in followers.get(d, []):
                if not _up_since(hosts[f]["up"], t):
                    continue
                expected += 1
                got = hosts[f]["delivered"].get(key)
                if got is not None:
                    delivered += 1
                    latencies.append(got - t)
    keys_of = {key: d for st in hosts.values() for key, d, _ in st["published"]}
    for h, st in hosts.items():
        wanted = set(plan.follows[h]) | {d for d, p in plan.publisher.items() if p == h}
        extra += sum(1 for k in st["delivered"] if k in keys_of and keys_of[k] not in wanted)
    router_in = [st["router_in"] for st in hosts.values()]
    repeats = sum(st["router_repeats"] for st in hosts.values())
    first = sum(router_in) - repeats
    return {
        "mode": mode,
        "published": sum(len(st["published"]) for st in hosts.values()),
        "skipped": sum(st["skipped"] for st in hosts.values()),
        "expected": expected,
        "delivered": delivered,
        "ratio": delivered / expected if expected else float("nan"),
        "p50": _pct(latencies, 0.5),
        "p95": _pct(latencies, 0.95),
        "repeats_per_message": repeats / first if first else float("nan"),
        "router_in_mean": statistics.mean(router_in),
        "router_in_max": max(router_in),
        "non_followed_deliveries": extra,
        "rate_dropped": sum(st["rate_dropped"] for st in hosts.values()),
        "cpu_s": sum(r["cpu_s"] for r in replies),
        "failed_dials": sum(r["failed_dials"] for r in ready),
        "connections": sum(r["conns"] for r in ready),
        "pubsub_peers": sum(r["pubsub"] for r in ready),
        "ready_wait_s": max(r["waited"] for r in ready),
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def print_report(rows: list[dict[str, Any]]) -> None:
    print(
        "mode         published  delivered/expected  ratio   p50 s  p95 s  "
        "repeats/msg  recv/host mean max  non-followed  rate-dropped  conns pubsub"
    )
    for r in rows:
        print(
            f"{r['mode']:<12} {r['published']:>9}  {r['delivered']:>8}/{r['expected']:<9} "
            f"{r['ratio']:>6.3f}  {r['p50']:>5.2f}  {r['p95']:>5.2f}  "
            f"{r['repeats_per_message']:>11.2f}  {r['router_in_mean']:>9.0f} "
            f"{r['router_in_max']:>4}  {r['non_followed_deliveries']:>12}  "
            f"{r['rate_dropped']:>12}  {r['cpu_s']:>5.1f}  "
            f"{r['connections']:>5} {r['pubsub_peers']:>6}"
        )
