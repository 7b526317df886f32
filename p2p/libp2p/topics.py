"""Gossip topics of a `p2p.libp2p.host.P2PHost`: deliveries to asyncio, validators, pacing.

Deliveries flow from the trio thread to asyncio: a trio task drains each subscription as
soon as messages arrive (py-libp2p subscription channels hold only 32 messages and drop
the rest) and hands them to the asyncio loop with ``call_soon_threadsafe``; asyncio-side
handlers run as tasks, at most `MAX_PENDING_DELIVERIES` at a time (`Deliveries`: more are
dropped and logged). The publisher's own subscription receives its own messages, which
are filtered out unless the subscription asked for them.

A validator runs in the trio thread before a message is delivered *or forwarded*; one
that raises `InvalidGossip` penalises the forwarder (honest nodes validate before they
forward).

Publishing is paced per topic (`PublishPacer`): py-libp2p 0.8.1's spam protection drops
more than `GossipSettings.max_messages_per_topic_per_second` messages per peer and topic,
and the per-peer outbound queue holds 32 RPCs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2

from p2p.errors import HostError, HostNotRunning, InvalidGossip
from p2p.libp2p.pubsub_guard import GuardedPubsub, GuardStats
from p2p.libp2p.settings import MAX_GOSSIP_MESSAGE_BYTES, MAX_PENDING_DELIVERIES, MAX_TOPIC_LEN
from p2p.peers import Offence, PeerScores

__all__ = [
    "Deliveries",
    "GossipHandler",
    "GossipMessage",
    "GossipValidator",
    "PublishPacer",
    "Subscription",
    "check_payload",
    "check_topic",
    "require_pubsub",
    "subscribe_trio",
    "to_message",
]

log = logging.getLogger(__name__)

GossipHandler = Callable[["GossipMessage"], Coroutine[Any, Any, None]]
"""asyncio-side handler of received gossip messages."""
GossipValidator = Callable[["GossipMessage"], bool]
"""Trio-thread predicate; ``False`` drops the message (it is not forwarded)."""


@dataclass(frozen=True, slots=True)
class GossipMessage:
    """A gossip message as delivered to handlers and validators.

    Attributes:
        topic: the topic it was received on.
        data: the payload.
        origin: base58 peer id of the publisher (signed by it: StrictSign).
        from_self: whether this host published it.
    """

    topic: str
    data: bytes
    origin: str
    from_self: bool


@dataclass(frozen=True, slots=True)
class Subscription:
    """What `P2PHost.subscribe` was asked, kept to renew it after a restart."""

    topic: str
    handler: GossipHandler
    validator: GossipValidator | None
    deliver_own: bool
    loop: asyncio.AbstractEventLoop


class Deliveries:
    """Gossip handler tasks on the asyncio loop, at most `MAX_PENDING_DELIVERIES` at once."""

    def __init__(self) -> None:
        self.pending: set[asyncio.Task[None]] = set()
        #: Messages dropped because the queue was full.
        self.dropped = 0

    def deliver(self, sub: Subscription, msg: GossipMessage) -> None:
        """Start ``sub``'s handler on ``msg`` (runs on the asyncio loop)."""
        if len(self.pending) >= MAX_PENDING_DELIVERIES:
            self.dropped += 1
            log.warning("gossip delivery queue full; dropped a message on %s", sub.topic)
            return
        task = sub.loop.create_task(sub.handler(msg))
        self.pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("gossip handler failed", exc_info=task.exception())

    def cancel_all(self) -> None:
        """Cancel every handler still running (the host stops)."""
        for task in list(self.pending):
            task.cancel()


class PublishPacer:
    """Spaces our own publishes on one topic at least ``interval_s`` apart (trio thread).

    Locks and `trio.current_time` values do not outlive a trio run: `reset` at the start
    of each.
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._locks: dict[str, trio.Lock] = {}
        self._last: dict[str, float] = {}

    def reset(self) -> None:
        """Forget the previous run's locks and times."""
        self._locks, self._last = {}, {}

    async def publish(self, pubsub: GuardedPubsub, topic: str, data: bytes) -> None:
        """Publish ``data`` on ``topic`` once ``interval_s`` has passed since the last one."""
        async with self._locks.setdefault(topic, trio.Lock()):
            wait = self._last.get(topic, -1e9) + self.interval_s - trio.current_time()
            if wait > 0:
                await trio.sleep(wait)
            await pubsub.publish(topic, data)
            self._last[topic] = trio.current_time()


async def subscribe_trio(
    pubsub: GuardedPubsub,
    nursery: trio.Nursery,
    me: str,
    sub: Subscription,
    deliveries: Deliveries,
    penalties: tuple[PeerScores, GuardStats],
) -> None:
    """Trio side of `P2PHost.subscribe`: set the validator, subscribe, drain in ``nursery``.

    ``penalties``: the scores a forwarder of an invalid message is penalised in, and the
    counters that count it.
    """
    topic, loop = sub.topic, sub.loop

    async def drain(subscription: Any) -> None:
        async for raw in subscription:
            msg = to_message(topic, raw, me)
            if msg.from_self and not sub.deliver_own:
                continue
            try:
                loop.call_soon_threadsafe(deliveries.deliver, sub, msg)
            except RuntimeError:  # the asyncio loop is closed: nobody to deliver to
                return

    if sub.validator is not None:
        check = _topic_validator(topic, sub.validator, me, *penalties)
        pubsub.set_topic_validator(topic, check, False)
    subscription = await pubsub.subscribe(topic)
    nursery.start_soon(drain, subscription)


def _topic_validator(
    topic: str, validator: GossipValidator, me: str, scores: PeerScores, stats: GuardStats
) -> Callable[[ID, rpc_pb2.Message], bool]:
    """``validator`` as py-libp2p calls it, penalising forwarders of invalid messages."""

    def check(forwarder: ID, msg: rpc_pb2.Message) -> bool:
        try:
            return validator(to_message(topic, msg, me))
        except InvalidGossip as e:
            # Honest nodes validate before forwarding: the forwarder is at fault.
            if str(forwarder) != me:
                stats.invalid_messages += 1
                reason = f"invalid message on {topic}: {e}"
                scores.penalise(str(forwarder), Offence.INVALID_MESSAGE, reason, quiet=True)
            return False
        except Exception:
            log.exception("gossip validator for %s failed", topic)
            return False

    return check


def to_message(topic: str, msg: rpc_pb2.Message, me: str) -> GossipMessage:
    """A received gossipsub message as a `GossipMessage` (origin ``""``: unreadable)."""
    try:
        origin = str(ID(bytes(msg.from_id)))
    except Exception:
        origin = ""
    return GossipMessage(topic=topic, data=bytes(msg.data), origin=origin, from_self=origin == me)


def check_topic(topic: object) -> None:
    """Refuse a topic that is not a non-empty str of at most `MAX_TOPIC_LEN` characters.

    Raises:
        HostError: it is not.
    """
    if not isinstance(topic, str) or not 0 < len(topic) <= MAX_TOPIC_LEN:
        raise HostError(f"topic must be a non-empty str of at most {MAX_TOPIC_LEN} characters")


def check_payload(data: object) -> None:
    """Refuse a payload that is not bytes of at most `MAX_GOSSIP_MESSAGE_BYTES`.

    Raises:
        HostError: it is not.
    """
    if not isinstance(data, bytes) or len(data) > MAX_GOSSIP_MESSAGE_BYTES:
        raise HostError(f"gossip payload must be bytes of at most {MAX_GOSSIP_MESSAGE_BYTES}")


def require_pubsub(pubsub: GuardedPubsub | None) -> GuardedPubsub:
    """``pubsub`` when the host runs one.

    Raises:
        HostNotRunning: it does not.
    """
    if pubsub is None:
        raise HostNotRunning("libp2p host is not running")
    return pubsub
