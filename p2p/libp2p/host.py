"""`P2PHost`: py-libp2p behind an asyncio-facing adapter.

Stack (`p2p.libp2p.stack`): TCP, noise, yamux, identify, and gossipsub v1.1 with
StrictSign, every parameter from `GossipSettings`; message ids are content-addressed on
head shard topics and the standard ``from + seqno`` elsewhere (`p2p.libp2p.shards`): on
the single head topic a node that re-announces a record it replicated sends a new
message, which tells receivers about one more provider (`p2p.libp2p.gossip` suppresses
duplicates per record and origin). Topics are joined and left at run time
(`P2PHost.subscribe`, `P2PHost.unsubscribe`). Identity: a
persistent ed25519 key file (`p2p.libp2p.identity`). mDNS is off unless
`HostConfig.enable_mdns`; it only fills the peerstore and binds every interface, so tests
use bootstrap lists instead.

The host is composed of one module per concern, all in `p2p.libp2p`:

* `p2p.libp2p.bridge`: py-libp2p is trio-only and the daemon (aiohttp) is asyncio; the
  host runs ``trio.run`` in one dedicated thread that owns every libp2p object, and
  `P2PHost.run_trio` runs trio code there from asyncio without blocking a thread per call.
* `p2p.libp2p.topics`: gossip deliveries to asyncio handlers, topic validators (run in the
  trio thread), and publishing paced per topic (py-libp2p 0.8.1 drops bursts).
* `p2p.libp2p.streams`: stream handlers (run in the trio thread, guarded: a failure resets
  only its stream) and `AsyncioStream`.
* `p2p.libp2p.bootstrap`: bootstrap peers dialled once gossipsub runs, with retries.
* `p2p.libp2p.supervisor`: a host whose thread ends without `stop` restarts itself after
  `HostConfig.restart_delay_s` (with back-off): same identity, the addresses it was bound
  to (so advertised addresses stay valid), the same stream handlers and subscriptions,
  and it redials the bootstrap peers and the addresses `connect` reached. While it
  restarts, calls fail with `HostNotRunning` as when stopped; `P2PHost.status`
  (``/api/status`` → ``libp2p``) counts restarts and keeps the last reason.

Hostile input: py-libp2p 0.8.1 lets an exception from a stream handler or a pubsub task
stop the whole host (one malformed ``/meshsub`` frame did). `p2p.libp2p.pubsub_guard`
contains it: `GuardedPubsub` replaces ``Pubsub``, the other built-in handlers (identify,
ping) are wrapped by `guard_stream_handlers`, and ours by `p2p.libp2p.streams.guard_handler`;
a failure resets only its stream (and penalises the peer where the input was at fault).
Banned peers are disconnected, their new connections closed, their streams reset.

Shutdown: `stop` sets a trio event; the host's nursery is cancelled (open streams are
reset, in-flight `run_trio` calls fail with `HostNotRunning`), libp2p services and
listeners close, and the thread ends. Nothing on disk is written by this module except
a new identity file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import trio
from libp2p.abc import INetConn
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from p2p.dht.node import DhtNode
from p2p.dht.settings import DhtSettings
from p2p.errors import HostError, HostNotRunning, PeerUnavailable
from p2p.libp2p.bootstrap import RedialAddrs, dial_bootstrap, dial_list, parse_peer_addr
from p2p.libp2p.bridge import TrioThread
from p2p.libp2p.dial_errors import dial_failure_reason, forget_failed_dial
from p2p.libp2p.identity import load_or_create_identity, parse_peer_id
from p2p.libp2p.inbound import InboundStats, install_inbound_guard
from p2p.libp2p.listen_ports import check_listen_ports
from p2p.libp2p.pubsub_guard import GuardedPubsub, GuardStats
from p2p.libp2p.quiet_logs import install_log_filters
from p2p.libp2p.settings import (
    DEFAULT_BOOTSTRAP_ATTEMPTS,
    DEFAULT_BOOTSTRAP_RETRY_DELAY_S,
    DEFAULT_LISTEN_ADDRS,
    DEFAULT_RESTART_DELAY_S,
    DEFAULT_RESTART_MAX_DELAY_S,
    GOSSIPSUB_PROTOCOLS,
    MAX_GOSSIP_MESSAGE_BYTES,
    MAX_PENDING_DELIVERIES,
    GossipSettings,
    HostConfig,
)
from p2p.libp2p.stack import build_stack
from p2p.libp2p.streams import AsyncioStream, TrioStreamHandler, guard_handler
from p2p.libp2p.supervisor import HostHealth, relaunch, supervise
from p2p.libp2p.topics import (
    Deliveries,
    GossipHandler,
    GossipMessage,
    GossipValidator,
    PublishPacer,
    Subscription,
    check_payload,
    check_topic,
    require_pubsub,
    subscribe_trio,
)
from p2p.peers import PeerScores

__all__ = [
    "DEFAULT_BOOTSTRAP_ATTEMPTS",
    "DEFAULT_BOOTSTRAP_RETRY_DELAY_S",
    "DEFAULT_LISTEN_ADDRS",
    "DEFAULT_RESTART_DELAY_S",
    "DEFAULT_RESTART_MAX_DELAY_S",
    "GOSSIPSUB_PROTOCOLS",
    "MAX_GOSSIP_MESSAGE_BYTES",
    "MAX_PENDING_DELIVERIES",
    "AsyncioStream",
    "GossipHandler",
    "GossipMessage",
    "GossipSettings",
    "GossipValidator",
    "HostConfig",
    "P2PHost",
    "TrioStreamHandler",
    "parse_peer_id",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class P2PHost:
    """A libp2p host running in its own trio thread, used from asyncio.

    Args:
        config: listen addresses, bootstrap peers, identity file, gossip settings.
        key_pair: an explicit libp2p identity (overrides ``config.identity_path``).
        scores: peer scores shared with the exchange; banned peers are disconnected
            and refused by `connect`. A fresh `PeerScores` by default.
        dht: run odf's DHT (`p2p.dht`) with these settings; ``None``: no DHT.
    """

    def __init__(
        self,
        config: HostConfig | None = None,
        *,
        key_pair: KeyPair | None = None,
        scores: PeerScores | None = None,
        dht: DhtSettings | None = None,
    ) -> None:
        self.config = config or HostConfig()
        self._dht_settings = dht
        self._dht: DhtNode | None = None
        self.scores = scores or PeerScores()
        self._key_pair = key_pair
        self._stream_handlers: dict[str, TrioStreamHandler] = {}
        self.health = HostHealth()
        self._bridge = TrioThread(
            self.config.start_timeout_s, self.config.stop_timeout_s, self._record_stop
        )
        self._host: Any = None
        self._pubsub: GuardedPubsub | None = None
        self._peer_id: str | None = None
        self._pacer = PublishPacer(self.config.gossip.publish_interval_s)
        self._deliveries = Deliveries()
        #: What `p2p.libp2p.pubsub_guard` contained (hostile frames, failed handlers).
        self.guard_stats = GuardStats()
        #: Inbound connection admission (`p2p.libp2p.inbound`).
        self.inbound_stats = InboundStats()
        # Re-established by every (re)start of the trio thread.
        self._subscriptions: dict[str, Subscription] = {}
        self._redial = RedialAddrs()
        self._bound_addrs: tuple[str, ...] = ()
        self._supervisor: asyncio.Task[None] | None = None
        self._restart_reason: str | None = None
        self.scores.add_ban_listener(self._on_ban)
        install_log_filters()  # py-libp2p errors a peer provokes at will: one line each

    def __repr__(self) -> str:
        return f"P2PHost(peer_id={self._peer_id!r}, running={self.running})"

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the host is started and not stopped."""
        return self._bridge.running

    @property
    def restarts(self) -> int:
        """Restarts after an unexpected stop."""
        return self.health.restarts

    @property
    def last_stop_reason(self) -> str | None:
        """Why the host last stopped unexpectedly (one line), if it did."""
        return self.health.last_stop_reason

    @property
    def last_stop_at(self) -> float | None:
        """When (unix seconds) the host last stopped unexpectedly, if it did."""
        return self.health.last_stop_at

    @property
    def dropped_deliveries(self) -> int:
        """Gossip messages dropped because too many handlers were still running."""
        return self._deliveries.dropped

    def _record_stop(self, reason: str) -> None:
        self.health.last_stop_reason = self._restart_reason or reason
        self._restart_reason = None

    async def start(self) -> None:
        """Start the trio thread, listen, start gossipsub, then dial bootstrap peers.

        Returns once the host listens and gossipsub runs; bootstrap peers are dialled
        in the background (with retries, see `HostConfig`). From then on the host is
        supervised (restarted if it stops without `stop`, see the module docstring).

        Raises:
            HostError: already started, or libp2p failed to start (bad address, port
                in use, timeout).
            IdentityError: an unreadable or unsafe identity file.
        """
        if self._bridge.started:
            raise HostError("host already started")
        if self._key_pair is None:
            path = self.config.identity_path
            self._key_pair = (
                load_or_create_identity(path) if path is not None else create_new_key_pair()
            )
        # Before libp2p binds with SO_REUSEPORT, which would share a taken port silently.
        check_listen_ports(self.config.listen_addrs)
        self._bridge.stop_requested = False
        try:
            await self._launch(self.config.listen_addrs)
        except BaseException:
            await self.stop()
            raise
        # Restart on the ports bound now, so the addresses peers (and node.json) know
        # stay valid; port 0 would pick new ones.
        self._bound_addrs = tuple(a.rsplit("/p2p/", 1)[0] for a in self.addrs)
        if self.config.restart_on_failure:
            self._supervisor = asyncio.get_running_loop().create_task(
                self._supervise(), name="p2p-supervisor"
            )
        log.info("libp2p host %s listening on %s", self.peer_id, self.addrs)

    async def _launch(self, listen_addrs: tuple[str, ...]) -> None:
        """Start one trio thread listening on ``listen_addrs``; return once it runs.

        Raises:
            HostError: libp2p failed to start or did not start in time (the thread is
                then stopped again).
        """
        await self._bridge.launch(lambda: self._trio_main(listen_addrs))

    async def _trio_main(self, listen_addrs: tuple[str, ...]) -> None:
        """One trio run: the libp2p services, our handlers and subscriptions, until `stop`."""
        cfg = self.config
        assert self._key_pair is not None
        stack = build_stack(
            self._key_pair,
            listen_addrs,
            cfg,
            (self.scores, self.guard_stats),
            self._gate,
            self._dht_settings,
        )
        # py-libp2p 0.8.1 keeps a slot per inbound connection until the swarm stops, so
        # its listener ends up refusing every new peer: see `p2p.libp2p.inbound`.
        install_inbound_guard(stack.host, cfg.inbound, self.inbound_stats, self._refuse_inbound)
        for proto, handler in self._stream_handlers.items():
            stack.host.set_stream_handler(TProtocol(proto), self._wrap_handler(proto, handler))
        self._pacer.reset()  # trio locks and times do not outlive a run
        try:
            async with stack.run():
                async with trio.open_nursery() as nursery:
                    self._host, self._pubsub = stack.host, stack.pubsub
                    self._dht = stack.dht
                    self._peer_id = str(stack.host.get_id())
                    self._bridge.attach(nursery)
                    for sub in list(self._subscriptions.values()):  # after a restart
                        await self._subscribe_trio(sub)
                    for addr in dial_list(cfg.bootstrap, self._redial):
                        nursery.start_soon(self._dial_bootstrap, addr)
                    await self._bridge.serve_until_stopped()
                with trio.move_on_after(cfg.stop_timeout_s / 2):
                    await stack.host.close()
        except BaseException:
            # A failure skips the `host.close` above: close the connections anyway, or
            # the peers keep a half-dead one (no FIN) and never reconnect to the
            # restarted host.
            await stack.close_after_failure(cfg.stop_timeout_s / 2)
            raise

    async def _dial_bootstrap(self, addr: str) -> None:
        """Dial one bootstrap peer (trio, in the host nursery); see `dial_bootstrap`."""
        await dial_bootstrap(
            self._host, addr, me=self._peer_id, scores=self.scores, config=self.config
        )

    async def stop(self) -> None:
        """Stop the host and its supervision (idempotent); waits for the trio thread.

        Raises:
            HostError: the thread did not finish within ``config.stop_timeout_s``.
        """
        self._bridge.stop_requested = True
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not asyncio.current_task():
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await self._bridge.halt()
        self._deliveries.cancel_all()

    async def _supervise(self) -> None:
        """Restart the trio thread whenever it ends without `stop` (asyncio task)."""

        async def restart() -> None:
            await relaunch(self._launch, self._bound_addrs, self.config.listen_addrs)

        def describe() -> tuple[str | None, list[str]]:
            return self._peer_id, self.addrs

        await supervise(self._bridge, self.config, self.health, restart, describe)

    async def restart(self, reason: str) -> None:
        """End the current run so the supervisor restarts it on the bound addresses.

        The restart is the one after a crash (same identity, addresses, handlers and
        subscriptions; counted in `restarts`, ``reason`` kept as `last_stop_reason`), for
        a host that runs but no longer works (e.g. a listener that admits no new peer).

        Raises:
            HostNotRunning: the host is not running.
            HostError: the host is not supervised (``restart_on_failure`` is off), or
                its thread did not stop in time.
        """
        if not self.running:
            raise HostNotRunning("libp2p host is not running")
        if self._supervisor is None:
            raise HostError("libp2p host is not supervised: nothing would restart it")
        self._restart_reason = reason
        await self._bridge.halt()  # no stop requested: the supervisor takes over

    def status(self) -> dict[str, Any]:
        """JSON-ready health of the host (``/api/status`` → ``libp2p``).

        Keys: ``running``, ``restarts``, ``lastStopReason``, ``lastStopAt`` (unix
        seconds of the last unexpected stop), the `GuardStats` counters and ``bans``
        (peers refused right now: ``peerId``, ``reason``, ``secondsLeft``).
        """
        return {
            "running": self.running,
            "restarts": self.health.restarts,
            "lastStopReason": self.health.last_stop_reason,
            "lastStopAt": self.health.last_stop_at,
            **self.guard_stats.to_dict(),
            "inbound": self.inbound_stats.to_dict(),
            "bans": [
                {"peerId": p, "reason": why, "secondsLeft": round(left, 1)}
                for p, why, left in self.scores.bans()
            ],
        }

    async def __aenter__(self) -> P2PHost:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the bridge ---------------------------------------------------------------------

    async def run_trio(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run trio coroutine function ``afn(*args)`` in the host thread; await its result.

        Raises:
            HostNotRunning: the host is not running, or stopped during the call.
            Exception: whatever ``afn`` raises.
        """
        return await self._bridge.run_trio(afn, *args)

    def _run_sync(self, fn: Callable[[], T]) -> T:
        """Run a quick sync function in the trio thread and return its result (blocking)."""
        return self._bridge.run_sync(fn)

    # -- identity and peers -------------------------------------------------------------

    @property
    def peer_id(self) -> str:
        """This host's base58 peer id.

        Raises:
            HostNotRunning: before `start`.
        """
        if self._peer_id is None:
            raise HostNotRunning("libp2p host is not started")
        return self._peer_id

    @property
    def addrs(self) -> list[str]:
        """Full dialable multiaddrs (``.../p2p/<peer id>``) of this host."""
        if self._host is None:
            raise HostNotRunning("libp2p host is not started")
        return [str(a) for a in self._host.get_addrs()]

    @property
    def dht(self) -> DhtNode:
        """The DHT of the current run (use only from the trio thread, e.g. in `run_trio`).

        Raises:
            HostNotRunning: not started, or started without ``dht`` settings.
        """
        if self._dht is None:
            raise HostNotRunning("libp2p host is not started with a DHT")
        return self._dht

    @property
    def libp2p_host(self) -> Any:
        """The py-libp2p ``IHost`` (use only from the trio thread, e.g. in `run_trio`)."""
        if self._host is None:
            raise HostNotRunning("libp2p host is not started")
        return self._host

    def peers(self) -> list[str]:
        """Peer ids currently connected (briefly blocks the caller for a trio hop).

        Raises:
            HostNotRunning: the host is not running.
        """
        host = self.libp2p_host
        return self._run_sync(lambda: [str(p) for p in host.get_connected_peers()])

    async def connect(self, addr: str) -> str:
        """Dial ``addr`` (``/ip4/.../tcp/.../p2p/<peer id>``); returns the peer id.

        Raises:
            PeerUnavailable: malformed address, banned peer, or the dial failed or
                timed out.
            HostNotRunning: the host is not running.
        """
        info = parse_peer_addr(addr)
        peer = str(info.peer_id)
        if self.scores.is_banned(peer):
            raise PeerUnavailable(f"peer {peer} is banned")
        host, timeout = self.libp2p_host, self.config.connect_timeout_s

        async def _connect() -> None:
            forget_failed_dial(host, info.peer_id)  # callers back off themselves
            try:
                with trio.fail_after(timeout):
                    await host.connect(info)
            except trio.TooSlowError:
                raise PeerUnavailable(f"connecting to {addr} timed out") from None
            except Exception as e:
                raise PeerUnavailable(
                    f"cannot connect to {addr}: {dial_failure_reason(e)}"
                ) from None

        await self.run_trio(_connect)
        self._redial.remember(peer, addr)  # redialled after a restart
        return peer

    async def disconnect(self, peer: str) -> None:
        """Close every connection to ``peer`` (no error if there is none)."""
        pid, host = parse_peer_id(peer), self.libp2p_host

        async def _close() -> None:
            with contextlib.suppress(Exception):
                await host.disconnect(pid)

        await self.run_trio(_close)

    def _on_ban(self, peer: str, reason: str) -> None:
        # Called from any thread; schedule the disconnect in the trio thread.
        host = self._host
        if not self.running or host is None:
            return
        log.warning("dropping peer %s: %s", peer, reason)
        try:
            pid = ID.from_base58(peer)
        except Exception:
            return

        async def _close() -> None:
            with contextlib.suppress(Exception):
                await host.disconnect(pid)

        self._bridge.start_soon_threadsafe(_close)

    def _refuse_inbound(self, peer: str) -> bool:
        """Inbound guard check (trio thread): a banned peer is closed at the handshake."""
        if not self.scores.is_banned(peer):
            return False
        self.guard_stats.refused_connections += 1
        return True

    def _gate(self, conn: INetConn) -> bool:
        """Connection gate (trio thread): a banned peer's new connection is closed."""
        try:
            peer = str(conn.muxed_conn.peer_id)
        except Exception:
            return True
        if not self.scores.is_banned(peer):
            return True
        self.guard_stats.refused_connections += 1
        log.debug("refusing a connection from banned peer %s", peer)
        nursery = self._bridge.nursery

        async def _close() -> None:
            with contextlib.suppress(Exception):
                await conn.close()

        if nursery is not None:
            with contextlib.suppress(RuntimeError):
                nursery.start_soon(_close)
        return False

    # -- streams ------------------------------------------------------------------------

    def set_stream_handler(self, protocol: str, handler: TrioStreamHandler) -> None:
        """Serve ``protocol`` with trio coroutine ``handler(stream)`` (runs in the trio thread).

        The stream is closed when the handler returns; its exceptions are logged.
        Streams from banned peers are reset without calling the handler.
        """
        self._stream_handlers[protocol] = handler
        if self.running and self._host is not None:
            wrapped = self._wrap_handler(protocol, handler)
            host = self._host
            self._run_sync(lambda: host.set_stream_handler(TProtocol(protocol), wrapped))

    def _wrap_handler(self, protocol: str, handler: TrioStreamHandler) -> TrioStreamHandler:
        return guard_handler(protocol, handler, self.scores, self.guard_stats)

    async def open_stream(self, peer: str, protocol: str) -> AsyncioStream:
        """Open a stream to a connected (or known) ``peer`` speaking ``protocol``.

        Raises:
            PeerUnavailable: the peer is banned or the stream could not be opened.
        """
        stream = await self.run_trio(self.new_stream_trio, peer, protocol)
        return AsyncioStream(self, stream)

    async def new_stream_trio(self, peer: str, protocol: str) -> Any:
        """Trio-side `open_stream`: the raw ``INetStream`` (call in the trio thread).

        Raises:
            PeerUnavailable: the peer is banned or the stream could not be opened.
        """
        if self.scores.is_banned(peer):
            raise PeerUnavailable(f"peer {peer} is banned")
        pid = parse_peer_id(peer)
        try:
            with trio.fail_after(self.config.connect_timeout_s):
                return await self.libp2p_host.new_stream(pid, [TProtocol(protocol)])
        except trio.TooSlowError:
            raise PeerUnavailable(f"opening {protocol} to {peer} timed out") from None
        except Exception as e:
            raise PeerUnavailable(f"cannot open {protocol} to {peer}: {e}") from None

    # -- gossip -------------------------------------------------------------------------

    async def subscribe(
        self,
        topic: str,
        handler: GossipHandler,
        *,
        validator: GossipValidator | None = None,
        deliver_own: bool = False,
    ) -> None:
        """Subscribe to ``topic``; ``handler`` runs on this asyncio loop per message.

        The subscription is renewed when the supervisor restarts the host.

        Args:
            topic: the gossipsub topic.
            handler: asyncio coroutine function called with each `GossipMessage`.
            validator: predicate run in the trio thread before a message is delivered
                *or forwarded*; invalid messages also lower the sender's gossipsub score.
            deliver_own: also deliver messages this host published.

        Raises:
            HostError: invalid topic.
            HostNotRunning: the host is not running.
        """
        check_topic(topic)
        if not self.running or self._pubsub is None:
            raise HostNotRunning("libp2p host is not running")
        sub = Subscription(topic, handler, validator, deliver_own, asyncio.get_running_loop())
        await self.run_trio(self._subscribe_trio, sub)
        self._subscriptions[topic] = sub

    async def _subscribe_trio(self, sub: Subscription) -> None:
        """Trio side of `subscribe` (see `p2p.libp2p.topics.subscribe_trio`)."""
        pubsub, nursery, me = self._pubsub, self._bridge.nursery, self._peer_id
        if pubsub is None or nursery is None or me is None:
            raise HostNotRunning("libp2p host is not running")
        penalties = (self.scores, self.guard_stats)
        await subscribe_trio(pubsub, nursery, me, sub, self._deliveries, penalties)

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish ``data`` on ``topic`` (paced per topic, see `p2p.libp2p.topics`).

        Raises:
            HostError: invalid topic or payload larger than `MAX_GOSSIP_MESSAGE_BYTES`.
            HostNotRunning: the host is not running.
        """
        check_topic(topic)
        check_payload(data)
        pubsub = require_pubsub(self._pubsub)
        await self.run_trio(self._pacer.publish, pubsub, topic, data)

    async def unsubscribe(self, topic: str) -> None:
        """Leave ``topic`` (no error if not subscribed); its handler gets no more messages.

        Raises:
            HostNotRunning: the host is not running.
        """
        if self._subscriptions.pop(topic, None) is None:
            return
        pubsub = require_pubsub(self._pubsub)

        async def _leave() -> None:
            await pubsub.unsubscribe(topic)  # ends the drain task of the subscription
            pubsub.remove_topic_validator(topic)

        await self.run_trio(_leave)

    @property
    def topics(self) -> frozenset[str]:
        """The topics this host is subscribed to."""
        return frozenset(self._subscriptions)

    def mesh_peers(self, topic: str) -> list[str]:
        """Peers known to be subscribed to ``topic`` (for status and tests)."""
        pubsub = require_pubsub(self._pubsub)
        return self._run_sync(lambda: sorted(str(p) for p in pubsub.peer_topics.get(topic, ())))

    def topic_peers(self, topics: Iterable[str]) -> list[str]:
        """Peers known to be subscribed to any of ``topics`` (one trio hop for all)."""
        pubsub, wanted = require_pubsub(self._pubsub), tuple(topics)

        def collect() -> list[str]:
            return sorted({str(p) for t in wanted for p in pubsub.peer_topics.get(t, ())})

        return self._run_sync(collect)
