"""Containment of hostile input to py-libp2p 0.8.1's pubsub and built-in stream handlers.

Upstream bug worked around (py-libp2p 0.8.1; measured, see
``tests/p2p/test_pubsub_guard.py``): py-libp2p calls every inbound stream handler in the
connection's trio nursery, and the Swarm runs that nursery as a service task, so **an
exception escaping any handler fails the Swarm and stops the whole host** (every
connection, gossip, the exchange). Remote input reaches such escapes in two places of
``libp2p/pubsub/pubsub.py``:

* ``Pubsub.stream_handler`` catches only ``StreamError``, ``ParseError`` and
  ``IncompleteReadError`` around ``continuously_read_stream``: one frame with a valid
  length prefix and a garbage body makes ``RPC.ParseFromString`` raise protobuf's
  ``DecodeError``, which escapes (a ~100-byte one-message kill of any node). Any other
  exception from handling a decoded RPC (router, subscriptions, signed records)
  escapes the same way.
* ``Pubsub.push_msg`` runs as a task of the Pubsub service: with StrictSign, a message
  on a subscribed topic whose ``from`` embeds no key and whose ``key`` field is not a
  valid public key makes ``signature_validator`` raise (nacl ``ValueError``), which fails
  the Pubsub service and with it the host.

What this module does instead, in one place:

* `GuardedPubsub` (a ``Pubsub`` subclass, used by `p2p.libp2p.host.P2PHost`) reads each inbound
  pubsub stream with upstream's own loop but contains every exception: a malformed or
  oversized frame, a bad varint length prefix, an undecodable RPC or a failure while
  handling it resets *that stream only*, drops the peer from pubsub (as upstream does
  for the errors it handles), logs one line and penalises the peer in the shared
  `p2p.peers.PeerScores` (two such offences ban it; the host then disconnects it and
  resets its streams). A message that makes ``push_msg`` raise is dropped and its
  forwarder penalised the same way. Streams of banned peers are reset unread.
* Gossip floods are cut before they cost a signature check: each forwarder
  has a token bucket (`DEFAULT_GOSSIP_RATE_PER_PEER` messages/s, burst
  `DEFAULT_GOSSIP_BURST_PER_PEER`); a message over it is dropped unread and costs the
  forwarder `Offence.RATE_EXCEEDED`. A message whose libp2p signature does not verify
  costs `Offence.INVALID_MESSAGE` (upstream drops it silently, so a flood of them would
  be free). Messages forwarded by a banned peer are dropped at once. Together with the
  content validators (`p2p.libp2p.host.P2PHost.subscribe`, which penalise forwarders of invalid
  records) a flooding peer is banned, then disconnected and refused, within a second.
* `guard_stream_handlers` wraps the other handlers py-libp2p registers on the host
  (identify, identify push, ping) so that an exception ends only its stream.

Counters of what was contained are in `GuardStats` (shown in ``/api/status``).

How to remove once upstream contains handler exceptions itself (check by running
``tests/p2p/test_pubsub_guard.py`` against ``Pubsub`` instead of `GuardedPubsub`): in
``p2p/libp2p/stack.py`` build ``Pubsub(host, gossipsub, strict_signing=True)`` again, drop the
`guard_stream_handlers` call and the `GuardStats` status field, delete this module. The
tests must keep passing unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream, IPubsubRouter
from libp2p.custom_types import TProtocol
from libp2p.exceptions import ParseError
from libp2p.io.exceptions import IncompleteReadError
from libp2p.network.stream.exceptions import StreamError
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.validators import signature_validator

from p2p.libp2p.admission import TokenBucket
from p2p.peers import (
    DEFAULT_GOSSIP_BURST_PER_PEER,
    DEFAULT_GOSSIP_RATE_PER_PEER,
    Offence,
    PeerScores,
)

__all__ = [
    "DEFAULT_GOSSIP_BURST_PER_PEER",
    "DEFAULT_GOSSIP_RATE_PER_PEER",
    "MAX_PUBSUB_RPC_BYTES",
    "GossipRateLimiter",
    "GuardStats",
    "GuardedPubsub",
    "describe_exception",
    "guard_stream_handlers",
    "mark_guarded",
]

log = logging.getLogger(__name__)

#: Largest inbound pubsub RPC frame (py-libp2p's default; our payloads are at most
#: `p2p.libp2p.settings.MAX_GOSSIP_MESSAGE_BYTES`, and an RPC may batch several plus control data).
MAX_PUBSUB_RPC_BYTES: Final = 1024 * 1024
#: Forwarders whose token buckets are remembered (the fullest are forgotten first).
MAX_RATE_BUCKETS: Final = 4096
#: Longest exception text copied into a log line or a peer's offence reason.
MAX_REASON_CHARS: Final = 200

_GUARDED_ATTR: Final = "__odf_guarded__"

StreamHandler = Callable[[INetStream], Awaitable[None]]


@dataclass(slots=True)
class GuardStats:
    """What the guards contained since the `P2PHost` was created (across restarts).

    Attributes:
        malformed_streams: inbound pubsub streams reset for malformed or oversized
            frames, or for an RPC whose handling raised.
        rejected_messages: gossip messages dropped because ``push_msg`` raised on them.
        handler_failures: streams of other built-in protocols reset after their
            handler raised.
    """

    malformed_streams: int = 0
    rejected_messages: int = 0
    handler_failures: int = 0
    rate_limited: int = 0
    invalid_messages: int = 0
    banned_dropped: int = 0
    refused_connections: int = 0

    def to_dict(self) -> dict[str, int]:
        """JSON-ready counters (camelCase, as ``/api/status``)."""
        return {
            "malformedStreams": self.malformed_streams,
            "rejectedMessages": self.rejected_messages,
            "handlerFailures": self.handler_failures,
            "rateLimited": self.rate_limited,
            "invalidMessages": self.invalid_messages,
            "bannedDropped": self.banned_dropped,
            "refusedConnections": self.refused_connections,
        }


class _UpstreamRateLogFilter(logging.Filter):
    """Drops py-libp2p's one-warning-per-message "Rate limit exceeded" log records.

    A peer sending valid messages between upstream's limit and ours would otherwise
    write a warning per message; `GuardStats` and the peer's score count them instead.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Rate limit exceeded")


_UPSTREAM_RATE_FILTER: Final = _UpstreamRateLogFilter()


def _quiet_upstream_rate_log() -> None:
    upstream = logging.getLogger("libp2p.pubsub.gossipsub")
    if _UPSTREAM_RATE_FILTER not in upstream.filters:
        upstream.addFilter(_UPSTREAM_RATE_FILTER)


class GossipRateLimiter:
    """Token buckets per forwarder: ``rate`` messages/s sustained, ``burst`` at once.

    Args:
        rate: tokens added per second.
        burst: bucket size (a fresh forwarder starts full).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        rate: float = DEFAULT_GOSSIP_RATE_PER_PEER,
        burst: int = DEFAULT_GOSSIP_BURST_PER_PEER,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("gossip rate must be > 0 and burst >= 1")
        self.rate, self.burst, self._clock = rate, float(burst), clock
        self._buckets: dict[str, TokenBucket] = {}

    def allow(self, peer: str) -> bool:
        """Take one token for ``peer``; ``False`` when its bucket is empty."""
        now = self._clock()
        bucket = self._buckets.get(peer)
        if bucket is None:
            if len(self._buckets) >= MAX_RATE_BUCKETS:
                self._forget_fullest()
            bucket = self._buckets[peer] = TokenBucket(self.burst, now)
        return bucket.take(now, self.rate, self.burst)

    def forget(self, peer: str) -> None:
        """Drop ``peer``'s bucket (it disconnected)."""
        self._buckets.pop(peer, None)

    def _forget_fullest(self) -> None:
        # A full bucket carries no information: forgetting it changes nothing.
        peer = max(self._buckets, key=lambda p: self._buckets[p].tokens)
        del self._buckets[peer]


class _ResetWatch:
    """Delegates to a stream and remembers whether ``reset`` was called on it.

    Upstream's read loop handles an over-limit length prefix itself (reset, return), so
    this is how `GuardedPubsub` learns of that offence without copying the loop.
    """

    def __init__(self, stream: INetStream) -> None:
        self._stream = stream
        self.was_reset = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def reset(self) -> None:
        self.was_reset = True
        await self._stream.reset()


class GuardedPubsub(Pubsub):
    """``Pubsub`` whose inbound streams and message pushes cannot stop the host.

    Args:
        host / router / **kwargs: as ``Pubsub`` (``max_inbound_rpc_size`` defaults to
            `MAX_PUBSUB_RPC_BYTES`).
        scores: where offences are recorded (the host's shared `PeerScores`).
        stats: counters updated by the guard.
        limiter: per-forwarder gossip rate (default: `GossipRateLimiter` defaults).
    """

    def __init__(
        self,
        host: IHost,
        router: IPubsubRouter,
        *,
        scores: PeerScores,
        stats: GuardStats,
        limiter: GossipRateLimiter | None = None,
        max_inbound_rpc_size: int = MAX_PUBSUB_RPC_BYTES,
        **kwargs: Any,
    ) -> None:
        self.scores = scores
        self.stats = stats
        self.limiter = limiter or GossipRateLimiter()
        _quiet_upstream_rate_log()
        super().__init__(host, router, max_inbound_rpc_size=max_inbound_rpc_size, **kwargs)

    async def stream_handler(self, stream: INetStream) -> None:
        """Read one inbound pubsub stream; any failure ends only this stream.

        Replaces upstream's ``stream_handler`` (same read loop, every exception caught).
        """
        peer_id = stream.muxed_conn.peer_id
        peer = str(peer_id)
        if self.scores.is_banned(peer):
            with contextlib.suppress(Exception):
                await stream.reset()
            return
        watched = _ResetWatch(stream)
        offence: Offence | None = None
        try:
            await self.continuously_read_stream(watched)  # type: ignore[arg-type]
        except (StreamError, IncompleteReadError) as e:
            # The peer went away mid-frame: not an offence (upstream's handling).
            log.debug("pubsub stream of %s ended: %r", peer, e)
        except ParseError as e:
            offence, reason = Offence.PROTOCOL_ERROR, f"bad length prefix ({describe_exception(e)})"
        except DecodeError as e:
            offence, reason = Offence.PROTOCOL_ERROR, f"undecodable RPC ({describe_exception(e)})"
        except Exception as e:  # whatever handling a decoded RPC raised
            offence = Offence.PROTOCOL_ERROR
            reason = f"RPC handling failed ({describe_exception(e)})"
        else:
            if not watched.was_reset:
                return  # EOF or the service stopping: a clean end
            offence = Offence.LIMIT_EXCEEDED
            reason = f"RPC frame over {self.max_inbound_rpc_size} bytes"
        with contextlib.suppress(Exception):
            await stream.reset()
        self._forget_peer(peer_id)
        if offence is not None:
            self.stats.malformed_streams += 1
            log.warning("pubsub: reset stream from %s: %s", peer, reason)
            self.scores.penalise(peer, offence, f"pubsub: {reason}")

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        """Upstream ``push_msg`` behind the flood gates (see the module docstring).

        A message it raises on is dropped and its forwarder penalised.
        """
        if msg_forwarder != self.my_id and not self._admit(str(msg_forwarder), msg):
            return
        try:
            await super().push_msg(msg_forwarder, msg)
        except Exception as e:
            peer, reason = str(msg_forwarder), f"unverifiable message ({describe_exception(e)})"
            self.stats.rejected_messages += 1
            log.warning("pubsub: dropped message forwarded by %s: %s", peer, reason)
            self.scores.penalise(peer, Offence.PROTOCOL_ERROR, f"pubsub: {reason}")

    def _admit(self, peer: str, msg: rpc_pb2.Message) -> bool:
        """The cheap checks, cheapest first: ban, rate, libp2p signature."""
        if self.scores.is_banned(peer):
            self.stats.banned_dropped += 1
            return False
        if not self.limiter.allow(peer):
            self.stats.rate_limited += 1
            self._penalise_quietly(peer, Offence.RATE_EXCEEDED, "gossip over the per-peer rate")
            return False
        if self.strict_signing and not _signature_ok(msg):
            self.stats.invalid_messages += 1
            self._penalise_quietly(peer, Offence.INVALID_MESSAGE, "bad gossip signature")
            return False
        return True

    def _penalise_quietly(self, peer: str, offence: Offence, reason: str) -> None:
        # One log line per message would let a flood fill the log; the ban (logged by
        # the host) and the counters say what happened.
        self.scores.penalise(peer, offence, f"pubsub: {reason}", quiet=True)

    def _forget_peer(self, peer_id: ID) -> None:
        # As upstream after a failed read: forget the peer's pubsub state (it is re-added
        # if it stays connected and is not banned).
        try:
            self._handle_dead_peer(peer_id)
        except Exception as e:
            log.debug("pubsub: forgetting %s failed: %r", peer_id, e)


def _signature_ok(msg: rpc_pb2.Message) -> bool:
    try:
        return bool(signature_validator(msg))
    except Exception:  # a malformed key: nacl raises instead of answering
        return False


def guard_stream_handlers(host: IHost, stats: GuardStats) -> list[str]:
    """Wrap every stream handler registered on ``host`` so an exception ends only its stream.

    Handlers already guarded (`GuardedPubsub.stream_handler`, or a second call) are
    left as they are. Call after every py-libp2p service has registered its handlers
    and before the host runs.

    Returns:
        The protocols whose handlers were wrapped now.
    """
    wrapped: list[str] = []
    handlers = host.get_mux().handlers
    for protocol, handler in list(handlers.items()):
        if protocol is None or handler is None or _is_guarded(handler):
            continue
        host.set_stream_handler(TProtocol(protocol), _guard(str(protocol), handler, stats))
        wrapped.append(str(protocol))
    return wrapped


def _is_guarded(handler: Any) -> bool:
    if getattr(handler, _GUARDED_ATTR, False):
        return True
    return isinstance(getattr(handler, "__self__", None), GuardedPubsub)


def _guard(protocol: str, handler: StreamHandler, stats: GuardStats) -> StreamHandler:
    async def guarded(stream: INetStream) -> None:
        try:
            await handler(stream)
        except Exception as e:
            # Not penalised: a bug of ours or of py-libp2p may be the cause, and an
            # honest peer must not be banned for it. Containment is what matters here.
            stats.handler_failures += 1
            peer = _peer_of(stream)
            why = describe_exception(e)
            log.warning("%s handler failed for peer %s: %s; stream reset", protocol, peer, why)
            log.debug("%s handler failure", protocol, exc_info=True)
            with contextlib.suppress(Exception):
                await stream.reset()

    setattr(guarded, _GUARDED_ATTR, True)
    return guarded


def mark_guarded(handler: StreamHandler) -> StreamHandler:
    """Mark ``handler`` as containing its own exceptions (`guard_stream_handlers` skips it)."""
    setattr(handler, _GUARDED_ATTR, True)
    return handler


def _peer_of(stream: Any) -> str:
    try:
        return str(stream.muxed_conn.peer_id)
    except Exception:
        return "?"


def describe_exception(e: BaseException) -> str:
    """``Type: message`` of ``e``, one line, at most `MAX_REASON_CHARS`; leaf of a group."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."
