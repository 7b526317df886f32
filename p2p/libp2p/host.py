"""`P2PHost`: py-libp2p behind an asyncio-facing adapter.

Stack: TCP, noise, yamux (py-libp2p defaults; mplex is 4-5x slower), identify, and
gossipsub v1.1 (``/meshsub/1.1.0`` with ``/meshsub/1.0.0`` fallback, the standard ids,
so go/js/rust peers interoperate). StrictSign is on (as js-libp2p's default) and message
ids are the standard ``from + seqno``: when another node re-announces a record it
replicated, that is a new message, which tells receivers about one more provider
(`p2p.libp2p.gossip` suppresses duplicates per record and origin). Identity: a persistent
ed25519 key file (`p2p.libp2p.identity`). mDNS is off unless `HostConfig.enable_mdns`; it only
fills the peerstore and binds every interface, so tests use bootstrap lists instead.

Bridge (trio <-> asyncio): py-libp2p is trio-only and the daemon (aiohttp) is asyncio.
The host runs ``trio.run`` in **one dedicated thread per host**; that thread owns every
libp2p object. asyncio code talks to it through two primitives:

* `P2PHost.run_trio` (``await host.run_trio(afn, *args)``): the coroutine function is
  started in a nursery of the trio thread (``TrioToken.run_sync_soon``, thread-safe
  and non-blocking), and its result or exception resolves an asyncio future through
  ``loop.call_soon_threadsafe``. No thread is blocked per call (unlike
  ``asyncio.to_thread(trio.from_thread.run, ...)``, which would pin an executor thread
  for the duration of each transfer). Cancelling the awaiting asyncio task cancels the
  trio side through its `trio.CancelScope`.
* gossip deliveries flow the other way: a trio task drains each subscription as soon
  as messages arrive (py-libp2p subscription channels hold only 32 messages and drop the
  rest) and hands them to the asyncio loop with ``call_soon_threadsafe``; asyncio-side
  handlers run as tasks, at most `MAX_PENDING_DELIVERIES` at a time (more are dropped
  and logged).

Stream handlers (`set_stream_handler`) and topic validators run *in the trio thread*:
they must be trio code and must not touch asyncio objects.

Gossip caveats of py-libp2p 0.8.1 handled here: its spam protection drops more than
`GossipSettings.max_messages_per_topic_per_second` messages per peer and topic, and
the per-peer outbound queue holds 32 RPCs, so `publish` paces itself per topic
(`GossipSettings.publish_interval_s`); the publisher's own subscription receives its
own messages, which are filtered out unless ``deliver_own=True``; reads at end of
stream raise ``StreamEOF`` instead of returning ``b""`` (`AsyncioStream.read` maps it
to ``b""``).

Hostile input: py-libp2p 0.8.1 lets an exception from a stream handler or a pubsub
task stop the whole host (one malformed ``/meshsub`` frame did). `p2p.libp2p.pubsub_guard`
contains it: `GuardedPubsub` replaces ``Pubsub``, the other built-in handlers (identify,
ping) are wrapped by `guard_stream_handlers`, and ours by `P2PHost._wrap_handler`; a
failure resets only its stream (and penalises the peer where the input was at fault).

Supervision: should the trio thread end anyway without `stop` (an escape not contained
above), the host restarts itself after `HostConfig.restart_delay_s` (doubled after each
restart that did not stay up `RESTART_STABLE_AFTER_S`, at most
`HostConfig.restart_max_delay_s`): same identity, the addresses it was bound to (so
advertised addresses stay valid), the same stream handlers and subscriptions, and it
redials the bootstrap peers and the addresses `connect` reached. One log line says why
it stopped; `P2PHost.status` (``/api/status`` → ``libp2p``) counts restarts and keeps
the last reason. While it restarts, calls fail with `HostNotRunning` as when stopped.

Shutdown: `stop` sets a trio event; the host's nursery is cancelled (open streams are
reset, in-flight `run_trio` calls fail with `HostNotRunning`), libp2p services and
listeners close, and the thread ends. Nothing on disk is written by this module except
a new identity file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import multiaddr  # type: ignore[import-untyped]
import trio
from libp2p import new_host
from libp2p.abc import INetConn, INetStream, INetwork, INotifee
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.tools.anyio_service import background_trio_service

from p2p.errors import HostError, HostNotRunning, InvalidGossip, PeerUnavailable, TransferError
from p2p.libp2p.identity import load_or_create_identity
from p2p.libp2p.listen_ports import check_listen_ports
from p2p.libp2p.pubsub_guard import (
    DEFAULT_GOSSIP_BURST_PER_PEER,
    DEFAULT_GOSSIP_RATE_PER_PEER,
    GossipRateLimiter,
    GuardedPubsub,
    GuardStats,
    describe_exception,
    guard_stream_handlers,
    mark_guarded,
)
from p2p.peers import Offence, PeerScores

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

#: Listen on loopback only unless configured otherwise.
DEFAULT_LISTEN_ADDRS: Final = ("/ip4/127.0.0.1/tcp/0",)
#: Gossipsub protocol ids offered, preferred first (v1.1 with v1.0 fallback).
GOSSIPSUB_PROTOCOLS: Final = ("/meshsub/1.1.0", "/meshsub/1.0.0")
#: Largest payload `publish` sends (head records are < 1 KiB).
MAX_GOSSIP_MESSAGE_BYTES: Final = 64 * 1024
#: Gossip messages handed to asyncio handlers and not finished yet; more are dropped.
MAX_PENDING_DELIVERIES: Final = 256
#: Longest topic name accepted.
MAX_TOPIC_LEN: Final = 256
#: Default timeouts (seconds).
DEFAULT_START_TIMEOUT_S: Final = 30.0
DEFAULT_STOP_TIMEOUT_S: Final = 10.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 15.0
#: Dial attempts per bootstrap peer (the peer may still be starting) and the delay
#: before the first retry (doubled after each failure, at most `BOOTSTRAP_MAX_DELAY_S`).
DEFAULT_BOOTSTRAP_ATTEMPTS: Final = 5
DEFAULT_BOOTSTRAP_RETRY_DELAY_S: Final = 0.5
BOOTSTRAP_MAX_DELAY_S: Final = 8.0
#: Delay before restarting a host that stopped unexpectedly, doubled after each restart
#: that did not stay up `RESTART_STABLE_AFTER_S`, at most the max (seconds).
DEFAULT_RESTART_DELAY_S: Final = 1.0
DEFAULT_RESTART_MAX_DELAY_S: Final = 60.0
RESTART_STABLE_AFTER_S: Final = 60.0
#: Addresses reached by `P2PHost.connect` remembered for redialling after a restart.
MAX_REDIAL_ADDRS: Final = 64

GossipHandler = Callable[["GossipMessage"], Coroutine[Any, Any, None]]
"""asyncio-side handler of received gossip messages."""
GossipValidator = Callable[["GossipMessage"], bool]
"""Trio-thread predicate; ``False`` drops the message (it is not forwarded)."""
TrioStreamHandler = Callable[[Any], Awaitable[None]]
"""Trio coroutine function called with each inbound ``INetStream`` of a protocol."""


@dataclass(frozen=True, slots=True)
class GossipSettings:
    """Gossipsub parameters (defaults: the go-libp2p ones, 1 s heartbeat).

    Attributes:
        protocols: gossipsub protocol ids offered, preferred first.
        degree / degree_low / degree_high: mesh degree D, D_lo, D_hi.
        heartbeat_interval_s: mesh maintenance period.
        spam_protection: py-libp2p's per-peer per-topic rate limit.
        max_messages_per_topic_per_second: the limit when spam protection is on.
        publish_interval_s: minimum spacing of our own publishes on one topic, kept
            below the receivers' rate limit and the 32-entry outbound queues.
        rate_per_peer / burst_per_peer: messages per second (sustained / burst) one
            forwarder may send before its messages are dropped unread and it is
            penalised (`p2p.libp2p.pubsub_guard.GossipRateLimiter`).
    """

    protocols: tuple[str, ...] = GOSSIPSUB_PROTOCOLS
    degree: int = 6
    degree_low: int = 4
    degree_high: int = 12
    heartbeat_interval_s: int = 1
    spam_protection: bool = True
    max_messages_per_topic_per_second: float = 10.0
    publish_interval_s: float = 0.125
    rate_per_peer: float = DEFAULT_GOSSIP_RATE_PER_PEER
    burst_per_peer: int = DEFAULT_GOSSIP_BURST_PER_PEER


@dataclass(frozen=True, slots=True)
class HostConfig:
    """How to run a `P2PHost`.

    Attributes:
        listen_addrs: multiaddrs to listen on (port 0 picks a free port).
        bootstrap: ``/ip4/.../tcp/.../p2p/<peer id>`` addresses dialled once the host
            and gossipsub run (in the background, in parallel, with retries).
        identity_path: persistent key file (created 0600 on first start); ``None``
            uses a fresh ephemeral identity.
        enable_mdns: LAN discovery (binds all interfaces; off by default).
        gossip: gossipsub parameters.
        start_timeout_s / stop_timeout_s / connect_timeout_s: bounds of those calls.
        bootstrap_attempts / bootstrap_retry_delay_s: dials per bootstrap peer and the
            first back-off delay.
        restart_on_failure: restart the host when it stops without `P2PHost.stop`.
        restart_delay_s / restart_max_delay_s: first and largest delay before a restart.
    """

    listen_addrs: tuple[str, ...] = DEFAULT_LISTEN_ADDRS
    bootstrap: tuple[str, ...] = ()
    identity_path: Path | None = None
    enable_mdns: bool = False
    gossip: GossipSettings = field(default_factory=GossipSettings)
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    bootstrap_attempts: int = DEFAULT_BOOTSTRAP_ATTEMPTS
    bootstrap_retry_delay_s: float = DEFAULT_BOOTSTRAP_RETRY_DELAY_S
    restart_on_failure: bool = True
    restart_delay_s: float = DEFAULT_RESTART_DELAY_S
    restart_max_delay_s: float = DEFAULT_RESTART_MAX_DELAY_S


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


def parse_peer_id(text: str) -> ID:
    """Parse a base58 peer id.

    Raises:
        PeerUnavailable: ``text`` is not a peer id.
    """
    try:
        return ID.from_base58(text)
    except Exception:  # base58 / multihash errors of assorted types
        raise PeerUnavailable(f"invalid peer id {text!r}") from None


class _Call:
    """One `P2PHost.run_trio` call: its trio cancel scope (created unbound up front)."""

    __slots__ = ("scope",)

    def __init__(self) -> None:
        self.scope = trio.CancelScope()


class AsyncioStream:
    """An asyncio-facing view of a libp2p stream (each call hops to the trio thread).

    Prefer trio-level code (`P2PHost.run_trio`) for bulk transfers: each call here
    costs a thread hop.
    """

    def __init__(self, host: P2PHost, stream: Any) -> None:
        self._host = host
        self.stream = stream

    @property
    def peer_id(self) -> str:
        """The remote peer."""
        return str(self.stream.muxed_conn.peer_id)

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end of the stream.

        Raises:
            TransferError: the stream was reset or failed.
        """

        async def _read() -> bytes:
            try:
                return bytes(await self.stream.read(n))
            except StreamEOF:
                return b""
            except Exception as e:
                raise TransferError(f"stream read failed: {e}") from None

        return await self._host.run_trio(_read)

    async def write(self, data: bytes) -> None:
        """Write ``data``.

        Raises:
            TransferError: the stream is closed, reset or failed.
        """

        async def _write() -> None:
            try:
                await self.stream.write(data)
            except Exception as e:
                raise TransferError(f"stream write failed: {e}") from None

        await self._host.run_trio(_write)

    async def close_write(self) -> None:
        """Half-close: the peer reads EOF after the bytes written so far."""

        async def _close() -> None:
            with contextlib.suppress(Exception):
                await self.stream.close_write()

        await self._host.run_trio(_close)

    async def close(self) -> None:
        """Close both directions (errors of an already-dead stream are ignored)."""

        async def _close() -> None:
            with contextlib.suppress(Exception):
                await self.stream.close()

        with contextlib.suppress(HostNotRunning):
            await self._host.run_trio(_close)


class P2PHost:
    """A libp2p host running in its own trio thread, used from asyncio.

    Args:
        config: listen addresses, bootstrap peers, identity file, gossip settings.
        key_pair: an explicit libp2p identity (overrides ``config.identity_path``).
        scores: peer scores shared with the exchange; banned peers are disconnected
            and refused by `connect`. A fresh `PeerScores` by default.
    """

    def __init__(
        self,
        config: HostConfig | None = None,
        *,
        key_pair: KeyPair | None = None,
        scores: PeerScores | None = None,
    ) -> None:
        self.config = config or HostConfig()
        self.scores = scores or PeerScores()
        self._key_pair = key_pair
        self._stream_handlers: dict[str, TrioStreamHandler] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop_event: trio.Event | None = None
        self._finished: asyncio.Event | None = None
        self._host: Any = None
        self._pubsub: GuardedPubsub | None = None
        self._peer_id: str | None = None
        self._running = False
        self._stop_requested = False
        self._publish_locks: dict[str, trio.Lock] = {}
        self._last_publish: dict[str, float] = {}
        self._pending_deliveries: set[asyncio.Task[None]] = set()
        self.dropped_deliveries = 0
        #: What `p2p.libp2p.pubsub_guard` contained (hostile frames, failed handlers).
        self.guard_stats = GuardStats()
        # Re-established by every (re)start of the trio thread.
        self._subscriptions: dict[str, _Subscription] = {}
        self._redial: OrderedDict[str, str] = OrderedDict()  # peer id -> address
        self._bound_addrs: tuple[str, ...] = ()
        self._supervisor: asyncio.Task[None] | None = None
        self._up_since = 0.0
        #: Restarts after an unexpected stop, and why / when (wall clock) it last stopped.
        self.restarts = 0
        self.last_stop_reason: str | None = None
        self.last_stop_at: float | None = None
        self.scores.add_ban_listener(self._on_ban)

    def __repr__(self) -> str:
        return f"P2PHost(peer_id={self._peer_id!r}, running={self._running})"

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the host is started and not stopped."""
        return self._running

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
        if self._thread is not None:
            raise HostError("host already started")
        if self._key_pair is None:
            path = self.config.identity_path
            self._key_pair = (
                load_or_create_identity(path) if path is not None else create_new_key_pair()
            )
        # Before libp2p binds with SO_REUSEPORT, which would share a taken port silently.
        check_listen_ports(self.config.listen_addrs)
        self._loop = asyncio.get_running_loop()
        self._stop_requested = False
        try:
            await self._launch(self.config.listen_addrs)
        except BaseException:
            await self.stop()
            raise
        # Restart on the ports bound now, so the addresses peers (and node.json) know
        # stay valid; port 0 would pick new ones.
        self._bound_addrs = tuple(a.rsplit("/p2p/", 1)[0] for a in self.addrs)
        if self.config.restart_on_failure:
            self._supervisor = self._loop.create_task(self._supervise(), name="p2p-supervisor")
        log.info("libp2p host %s listening on %s", self.peer_id, self.addrs)

    async def _launch(self, listen_addrs: tuple[str, ...]) -> None:
        """Start one trio thread listening on ``listen_addrs``; return once it runs.

        Raises:
            HostError: libp2p failed to start or did not start in time (the thread is
                then stopped again).
        """
        assert self._loop is not None
        self._finished = asyncio.Event()
        started: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(
            target=self._thread_main,
            args=(started, listen_addrs, self._finished),
            name="p2p-trio",
            daemon=True,
        )
        self._thread.start()
        try:
            await asyncio.wait_for(asyncio.shield(started), self.config.start_timeout_s)
        except TimeoutError:
            await self._halt()
            raise HostError(
                f"libp2p host did not start in {self.config.start_timeout_s} s"
            ) from None
        except BaseException:
            await self._halt()
            raise
        self._up_since = time.monotonic()

    def _thread_main(
        self, started: asyncio.Future[None], listen_addrs: tuple[str, ...], finished: asyncio.Event
    ) -> None:
        loop = self._loop
        assert loop is not None
        try:
            trio.run(self._trio_main, started, listen_addrs)
        except BaseException as e:
            log.debug("libp2p trio thread ended with %r", e)
            if not self._stop_requested:
                self.last_stop_reason = describe_exception(e)
            err = e if isinstance(e, HostError) else HostError(f"libp2p host failed: {e!r}")
            loop.call_soon_threadsafe(_set_exception_if_pending, started, err)
        else:
            if not self._stop_requested:
                self.last_stop_reason = "the libp2p services ended without an error"
        finally:
            self._running = False
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(finished.set)

    async def _trio_main(
        self, started: asyncio.Future[None], listen_addrs: tuple[str, ...]
    ) -> None:
        cfg = self.config
        gs = cfg.gossip
        try:
            listen = [multiaddr.Multiaddr(a) for a in listen_addrs]
        except Exception as e:
            raise HostError(f"invalid listen address: {e}") from None
        # Bootstrap peers are *not* handed to py-libp2p: 0.8.1 dials them inside
        # ``host.run`` before the pubsub service runs, and the pubsub notifee of the new
        # connection then fails the whole host ('Pubsub' object has no attribute
        # '_manager'). `_dial_bootstrap` dials them once gossipsub is ready instead.
        host = new_host(
            key_pair=self._key_pair,
            listen_addrs=listen,
            enable_mDNS=cfg.enable_mdns,
            muxer_preference="YAMUX",
        )
        gossipsub = GossipSub(
            protocols=[TProtocol(p) for p in gs.protocols],
            degree=gs.degree,
            degree_low=gs.degree_low,
            degree_high=gs.degree_high,
            heartbeat_initial_delay=0.1,
            heartbeat_interval=gs.heartbeat_interval_s,
            spam_protection_enabled=gs.spam_protection,
            max_messages_per_topic_per_second=gs.max_messages_per_topic_per_second,
        )
        # Hostile-input containment (see `p2p.libp2p.pubsub_guard`): one malformed frame must
        # end one stream, not the host.
        pubsub = GuardedPubsub(
            host,
            gossipsub,
            strict_signing=True,
            scores=self.scores,
            stats=self.guard_stats,
            limiter=GossipRateLimiter(gs.rate_per_peer, gs.burst_per_peer),
        )
        guard_stream_handlers(host, self.guard_stats)
        tracker = _ConnTracker(self._gate)
        host.get_network().register_notifee(tracker)
        for proto, handler in self._stream_handlers.items():
            host.set_stream_handler(TProtocol(proto), self._wrap_handler(proto, handler))
        # Per trio run: locks and `trio.current_time` values do not outlive it.
        self._publish_locks, self._last_publish = {}, {}
        self._stop_event = trio.Event()
        try:
            async with (
                host.run(listen_addrs=listen),
                background_trio_service(pubsub),
                background_trio_service(gossipsub),
            ):
                await pubsub.wait_until_ready()
                async with trio.open_nursery() as nursery:
                    self._host, self._pubsub, self._nursery = host, pubsub, nursery
                    self._token = trio.lowlevel.current_trio_token()
                    self._peer_id = str(host.get_id())
                    # A `stop` that came while this thread was starting saw no token yet.
                    if self._stop_requested:
                        self._stop_event.set()
                    for sub in list(self._subscriptions.values()):  # after a restart
                        await self._subscribe_trio(sub)
                    self._running = True
                    for addr in dict.fromkeys([*cfg.bootstrap, *self._redial.values()]):
                        nursery.start_soon(self._dial_bootstrap, addr)
                    assert self._loop is not None
                    self._loop.call_soon_threadsafe(_set_result_if_pending, started, None)
                    await self._stop_event.wait()
                    self._running = False
                    nursery.cancel_scope.cancel()
                with trio.move_on_after(self.config.stop_timeout_s / 2):
                    await host.close()
        except BaseException:
            # A failure skips the `host.close` above: close the connections anyway, or
            # the peers keep a half-dead one (no FIN) and never reconnect to the
            # restarted host. Shielded: the run is being cancelled.
            with trio.CancelScope(shield=True), trio.move_on_after(cfg.stop_timeout_s / 2):
                with contextlib.suppress(Exception):
                    await host.close()
                # The swarm's failure forgot its connections without closing them.
                for conn in list(tracker.conns):
                    with contextlib.suppress(Exception):
                        await conn.muxed_conn.close()
            raise

    async def _dial_bootstrap(self, addr: str) -> None:
        """Dial one bootstrap peer (trio, in the host nursery), retrying with back-off.

        Failures are logged, never raised: a missing bootstrap peer must not stop the
        host. Our own address and peers already connected are skipped.
        """
        cfg, host = self.config, self._host
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        except Exception as e:
            log.warning("ignoring invalid bootstrap address %r: %s", addr, e)
            return
        if str(info.peer_id) == self._peer_id or self.scores.is_banned(str(info.peer_id)):
            return
        delay = cfg.bootstrap_retry_delay_s
        for attempt in range(1, max(1, cfg.bootstrap_attempts) + 1):
            if info.peer_id in host.get_connected_peers():
                return
            try:
                with trio.fail_after(cfg.connect_timeout_s):
                    await host.connect(info)
            except Exception as e:  # dial errors of assorted types, TooSlowError
                log.info("bootstrap dial %d of %s failed: %r", attempt, addr, e)
            else:
                log.info("connected to bootstrap peer %s", info.peer_id)
                return
            if attempt < cfg.bootstrap_attempts:
                await trio.sleep(delay)
                delay = min(delay * 2, BOOTSTRAP_MAX_DELAY_S)
        log.warning("bootstrap peer %s unreachable after %d attempts", addr, attempt)

    async def stop(self) -> None:
        """Stop the host and its supervision (idempotent); waits for the trio thread.

        Raises:
            HostError: the thread did not finish within ``config.stop_timeout_s``.
        """
        self._stop_requested = True
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not asyncio.current_task():
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await self._halt()
        for task in list(self._pending_deliveries):
            task.cancel()

    async def _halt(self) -> None:
        """Stop the current trio thread, if any, and wait for it to end."""
        thread, token, event = self._thread, self._token, self._stop_event
        if thread is None:
            return
        self._running = False
        if token is not None and event is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(event.set)
        assert self._finished is not None
        try:
            await asyncio.wait_for(self._finished.wait(), self.config.stop_timeout_s)
        except TimeoutError:
            raise HostError(f"libp2p host did not stop in {self.config.stop_timeout_s} s") from None
        await asyncio.to_thread(thread.join, self.config.stop_timeout_s)
        self._token = None

    async def _supervise(self) -> None:
        """Restart the trio thread whenever it ends without `stop` (asyncio task)."""
        cfg = self.config
        delay = cfg.restart_delay_s
        while True:
            assert self._finished is not None
            await self._finished.wait()
            if self._stop_requested:
                return
            if time.monotonic() - self._up_since >= RESTART_STABLE_AFTER_S:
                delay = cfg.restart_delay_s  # it had been up a while: not a crash loop
            self.last_stop_at = time.time()
            log.warning(
                "libp2p host %s stopped unexpectedly (%s); restarting in %.1f s",
                self._peer_id,
                self.last_stop_reason,
                delay,
            )
            with contextlib.suppress(HostError):
                await self._halt()  # the thread has ended; join it
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.restart_max_delay_s)
            try:  # `stop` cancels this task, so no stop request can be pending here
                await self._relaunch()
            except HostError as e:
                # `_finished` is set again: the next round logs this and backs off.
                self.last_stop_reason = f"restart failed: {e}"
                continue
            self.restarts += 1
            log.info("libp2p host %s restarted on %s", self._peer_id, self.addrs)

    async def _relaunch(self) -> None:
        """Start a new trio thread on the bound ports, else on the configured addresses."""
        try:
            await self._launch(self._bound_addrs or self.config.listen_addrs)
        except HostError:
            if not self._bound_addrs or self._bound_addrs == self.config.listen_addrs:
                raise
            log.info(
                "libp2p host: cannot rebind %s; using %s",
                self._bound_addrs,
                self.config.listen_addrs,
            )
            await self._launch(self.config.listen_addrs)

    def status(self) -> dict[str, Any]:
        """JSON-ready health of the host (``/api/status`` → ``libp2p``).

        Keys: ``running``, ``restarts``, ``lastStopReason``, ``lastStopAt`` (unix
        seconds of the last unexpected stop), the `GuardStats` counters and ``bans``
        (peers refused right now: ``peerId``, ``reason``, ``secondsLeft``).
        """
        return {
            "running": self._running,
            "restarts": self.restarts,
            "lastStopReason": self.last_stop_reason,
            "lastStopAt": self.last_stop_at,
            **self.guard_stats.to_dict(),
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
        token, nursery, loop = self._token, self._nursery, asyncio.get_running_loop()
        if not self._running or token is None or nursery is None:
            raise HostNotRunning("libp2p host is not running")
        fut: asyncio.Future[T] = loop.create_future()
        call = _Call()

        async def runner() -> None:
            try:
                with call.scope:
                    result = await afn(*args)
                if call.scope.cancelled_caught:
                    raise HostNotRunning("call cancelled")
            except Exception as e:
                loop.call_soon_threadsafe(_set_exception_if_pending, fut, e)
            except BaseException:  # trio.Cancelled: the host is shutting down
                loop.call_soon_threadsafe(
                    _set_exception_if_pending, fut, HostNotRunning("libp2p host stopped")
                )
                raise
            else:
                loop.call_soon_threadsafe(_set_result_if_pending, fut, result)

        def spawn() -> None:
            try:
                nursery.start_soon(runner)
            except RuntimeError:  # nursery closed: the host is stopping
                loop.call_soon_threadsafe(
                    _set_exception_if_pending, fut, HostNotRunning("libp2p host stopped")
                )

        try:
            token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            raise HostNotRunning("libp2p host stopped") from None
        try:
            return await fut
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(call.scope.cancel)
            raise

    def _run_sync(self, fn: Callable[[], T]) -> T:
        """Run a quick sync function in the trio thread and return its result (blocking)."""
        token = self._token
        if not self._running or token is None:
            raise HostNotRunning("libp2p host is not running")
        try:
            return trio.from_thread.run_sync(fn, trio_token=token)
        except trio.RunFinishedError:
            raise HostNotRunning("libp2p host stopped") from None

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
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        except Exception as e:
            raise PeerUnavailable(f"invalid peer address {addr!r}: {e}") from None
        peer = str(info.peer_id)
        if self.scores.is_banned(peer):
            raise PeerUnavailable(f"peer {peer} is banned")
        host, timeout = self.libp2p_host, self.config.connect_timeout_s

        async def _connect() -> None:
            try:
                with trio.fail_after(timeout):
                    await host.connect(info)
            except trio.TooSlowError:
                raise PeerUnavailable(f"connecting to {addr} timed out") from None
            except Exception as e:
                raise PeerUnavailable(f"cannot connect to {addr}: {e}") from None

        await self.run_trio(_connect)
        # Redialled after a restart (bounded; the most recent addresses win).
        self._redial.pop(peer, None)
        self._redial[peer] = addr
        while len(self._redial) > MAX_REDIAL_ADDRS:
            self._redial.popitem(last=False)
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
        token, nursery, host = self._token, self._nursery, self._host
        if not self._running or token is None or nursery is None or host is None:
            return
        log.warning("dropping peer %s: %s", peer, reason)
        try:
            pid = ID.from_base58(peer)
        except Exception:
            return

        async def _close() -> None:
            with contextlib.suppress(Exception):
                await host.disconnect(pid)

        def spawn() -> None:
            with contextlib.suppress(RuntimeError):
                nursery.start_soon(_close)

        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(spawn)

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
        nursery = self._nursery

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
        if self._running and self._host is not None:
            wrapped = self._wrap_handler(protocol, handler)
            host = self._host
            self._run_sync(lambda: host.set_stream_handler(TProtocol(protocol), wrapped))

    def _wrap_handler(self, protocol: str, handler: TrioStreamHandler) -> TrioStreamHandler:
        scores = self.scores

        async def wrapped(stream: Any) -> None:
            # py-libp2p runs handlers in the connection's nursery: an exception escaping
            # here would stop the whole host (see `p2p.libp2p.pubsub_guard`).
            try:
                peer = str(stream.muxed_conn.peer_id)
                if scores.is_banned(peer):
                    with contextlib.suppress(Exception):
                        await stream.reset()
                    return
                await handler(stream)
            except Exception as e:
                # One line (a peer may provoke this at will); the traceback at debug.
                self.guard_stats.handler_failures += 1
                log.warning("handler of %s failed: %s", protocol, describe_exception(e))
                log.debug("handler of %s failed", protocol, exc_info=True)
                with contextlib.suppress(Exception):
                    await stream.reset()
            finally:
                with contextlib.suppress(Exception):
                    await stream.close()

        return mark_guarded(wrapped)

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
        _check_topic(topic)
        if not self._running or self._pubsub is None:
            raise HostNotRunning("libp2p host is not running")
        sub = _Subscription(topic, handler, validator, deliver_own, asyncio.get_running_loop())
        await self.run_trio(self._subscribe_trio, sub)
        self._subscriptions[topic] = sub

    async def _subscribe_trio(self, sub: _Subscription) -> None:
        """Trio side of `subscribe`: set the validator, subscribe, drain in the nursery."""
        pubsub, nursery, me = self._pubsub, self._nursery, self._peer_id
        if pubsub is None or nursery is None or me is None:
            raise HostNotRunning("libp2p host is not running")
        topic, handler, validator, loop = sub.topic, sub.handler, sub.validator, sub.loop

        def deliver(msg: GossipMessage) -> None:  # runs on the asyncio loop
            if len(self._pending_deliveries) >= MAX_PENDING_DELIVERIES:
                self.dropped_deliveries += 1
                log.warning("gossip delivery queue full; dropped a message on %s", topic)
                return
            task = loop.create_task(handler(msg))
            self._pending_deliveries.add(task)
            task.add_done_callback(self._delivery_done)

        async def drain(subscription: Any) -> None:
            async for raw in subscription:
                msg = _to_message(topic, raw, me)
                if msg.from_self and not sub.deliver_own:
                    continue
                try:
                    loop.call_soon_threadsafe(deliver, msg)
                except RuntimeError:  # the asyncio loop is closed: nobody to deliver to
                    return

        if validator is not None:

            def check(forwarder: ID, msg: rpc_pb2.Message) -> bool:
                try:
                    return validator(_to_message(topic, msg, me))
                except InvalidGossip as e:
                    # Honest nodes validate before forwarding: the forwarder is at fault.
                    if str(forwarder) != me:
                        self.guard_stats.invalid_messages += 1
                        reason = f"invalid message on {topic}: {e}"
                        self.scores.penalise(
                            str(forwarder), Offence.INVALID_MESSAGE, reason, quiet=True
                        )
                    return False
                except Exception:
                    log.exception("gossip validator for %s failed", topic)
                    return False

            pubsub.set_topic_validator(topic, check, False)
        subscription = await pubsub.subscribe(topic)
        nursery.start_soon(drain, subscription)

    def _delivery_done(self, task: asyncio.Task[None]) -> None:
        self._pending_deliveries.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("gossip handler failed", exc_info=task.exception())

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish ``data`` on ``topic`` (paced per topic, see the module docstring).

        Raises:
            HostError: invalid topic or payload larger than `MAX_GOSSIP_MESSAGE_BYTES`.
            HostNotRunning: the host is not running.
        """
        _check_topic(topic)
        if not isinstance(data, bytes) or len(data) > MAX_GOSSIP_MESSAGE_BYTES:
            raise HostError(f"gossip payload must be bytes of at most {MAX_GOSSIP_MESSAGE_BYTES}")
        pubsub, interval = self._pubsub, self.config.gossip.publish_interval_s
        if pubsub is None:
            raise HostNotRunning("libp2p host is not running")

        async def _publish() -> None:
            lock = self._publish_locks.setdefault(topic, trio.Lock())
            async with lock:
                wait = self._last_publish.get(topic, -1e9) + interval - trio.current_time()
                if wait > 0:
                    await trio.sleep(wait)
                await pubsub.publish(topic, data)
                self._last_publish[topic] = trio.current_time()

        await self.run_trio(_publish)

    def mesh_peers(self, topic: str) -> list[str]:
        """Peers known to be subscribed to ``topic`` (for status and tests)."""
        pubsub = self._pubsub
        if pubsub is None:
            raise HostNotRunning("libp2p host is not running")
        return self._run_sync(lambda: sorted(str(p) for p in pubsub.peer_topics.get(topic, ())))


class _ConnTracker(INotifee):
    """The connections of one trio run, to close them after a failure (trio thread).

    Args:
        gate: called with each new connection; ``False`` means "refuse it" (the
            connection is then closed and not tracked).
    """

    def __init__(self, gate: Callable[[INetConn], bool]) -> None:
        self.conns: set[INetConn] = set()
        self._gate = gate

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        if self._gate(conn):
            self.conns.add(conn)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self.conns.discard(conn)

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None


@dataclass(frozen=True, slots=True)
class _Subscription:
    """What `P2PHost.subscribe` was asked, kept to renew it after a restart."""

    topic: str
    handler: GossipHandler
    validator: GossipValidator | None
    deliver_own: bool
    loop: asyncio.AbstractEventLoop


def _to_message(topic: str, msg: rpc_pb2.Message, me: str) -> GossipMessage:
    try:
        origin = str(ID(bytes(msg.from_id)))
    except Exception:
        origin = ""
    return GossipMessage(topic=topic, data=bytes(msg.data), origin=origin, from_self=origin == me)


def _check_topic(topic: object) -> None:
    if not isinstance(topic, str) or not 0 < len(topic) <= MAX_TOPIC_LEN:
        raise HostError(f"topic must be a non-empty str of at most {MAX_TOPIC_LEN} characters")


def _set_result_if_pending(fut: asyncio.Future[T], value: T) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception_if_pending(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
