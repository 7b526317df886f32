"""The py-libp2p services of one trio run of a `p2p.libp2p.host.P2PHost`.

Stack: TCP, noise, yamux (py-libp2p defaults; mplex is 4-5x slower), identify, and
gossipsub v1.1 (``/meshsub/1.1.0`` with ``/meshsub/1.0.0`` fallback, the standard ids,
so go/js/rust peers interoperate) behind `GuardedPubsub` (StrictSign on, as js-libp2p's
default; message ids by `p2p.libp2p.shards.gossip_message_id`), every gossipsub
parameter taken from `p2p.libp2p.settings.GossipSettings`, and optionally odf's
Kademlia DHT (`p2p.dht.node.DhtNode`, ``/odf/kad/1.0.0``). Everything here runs in the
host's trio thread.

`Libp2pStack.run` runs the services until its block ends; a run that fails skips
py-libp2p's own close, so `Libp2pStack.close_after_failure` closes every connection the
run made (`ConnTracker`): otherwise peers keep a half-dead one (no FIN) and never
reconnect to the restarted host.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import multiaddr  # type: ignore[import-untyped]
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.score import ScoreParams, TopicScoreParams
from libp2p.tools.anyio_service import background_trio_service

from p2p.dht.node import DhtNode
from p2p.dht.settings import DhtSettings
from p2p.errors import HostError
from p2p.libp2p.pubsub_guard import (
    GossipRateLimiter,
    GuardedPubsub,
    GuardStats,
    guard_stream_handlers,
)
from p2p.libp2p.settings import GossipSettings, HostConfig, ScoreSettings
from p2p.libp2p.shards import gossip_message_id
from p2p.peers import PeerScores

__all__ = ["ConnTracker", "Libp2pStack", "build_stack"]


class ConnTracker(INotifee):
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
class Libp2pStack:
    """A py-libp2p host, its gossipsub router and guarded pubsub, not running yet."""

    host: IHost
    gossipsub: GossipSub
    pubsub: GuardedPubsub
    tracker: ConnTracker
    listen: tuple[multiaddr.Multiaddr, ...]
    dht: DhtNode | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Listen and run the services; the block starts once pubsub is ready."""
        async with (
            self.host.run(listen_addrs=list(self.listen)),
            background_trio_service(self.pubsub),
            background_trio_service(self.gossipsub),
        ):
            await self.pubsub.wait_until_ready()
            if self.dht is None:
                yield
                return
            async with self.dht.run():
                yield

    async def close_after_failure(self, timeout_s: float) -> None:
        """Close the host and every connection the run made (shielded: it is cancelled)."""
        with trio.CancelScope(shield=True), trio.move_on_after(timeout_s):
            with contextlib.suppress(Exception):
                await self.host.close()
            # The swarm's failure forgot its connections without closing them.
            for conn in list(self.tracker.conns):
                with contextlib.suppress(Exception):
                    await conn.muxed_conn.close()


def build_stack(
    key_pair: KeyPair,
    listen_addrs: tuple[str, ...],
    config: HostConfig,
    guard: tuple[PeerScores, GuardStats],
    gate: Callable[[INetConn], bool],
    dht: DhtSettings | None = None,
) -> Libp2pStack:
    """The services of one run, with hostile-input containment in place.

    ``guard``: the peer scores and counters `p2p.libp2p.pubsub_guard` reports to (one
    malformed frame must end one stream, not the host); ``gate``: see `ConnTracker`;
    ``dht``: run odf's DHT (`p2p.dht`) on the host with these settings (``None``: no DHT).

    Raises:
        HostError: an invalid listen address.
    """
    try:
        listen = tuple(multiaddr.Multiaddr(a) for a in listen_addrs)
    except Exception as e:
        raise HostError(f"invalid listen address: {e}") from None
    host = new_host(
        key_pair=key_pair,
        listen_addrs=list(listen),
        enable_mDNS=config.enable_mdns,
        muxer_preference="YAMUX",
    )
    gs = config.gossip
    gossipsub = _gossipsub(gs)
    scores, stats = guard
    pubsub = GuardedPubsub(
        host,
        gossipsub,
        strict_signing=True,
        scores=scores,
        stats=stats,
        limiter=GossipRateLimiter(gs.rate_per_peer, gs.burst_per_peer),
        msg_id_constructor=gossip_message_id,
        seen_ttl=gs.seen_ttl_s,
        max_subscriptions_per_peer=gs.max_subscriptions_per_peer,
    )
    # Built before the guard, so its ``/odf/kad`` handler is wrapped with the others.
    node = DhtNode(host, dht) if dht is not None else None
    guard_stream_handlers(host, stats)
    tracker = ConnTracker(gate)
    host.get_network().register_notifee(tracker)
    return Libp2pStack(host, gossipsub, pubsub, tracker, listen, node)


def _gossipsub(gs: GossipSettings) -> GossipSub:
    """The router with every parameter of ``gs`` (py-libp2p's defaults differ)."""
    return GossipSub(
        protocols=[TProtocol(p) for p in gs.protocols],
        degree=gs.degree,
        degree_low=gs.degree_low,
        degree_high=gs.degree_high,
        time_to_live=gs.fanout_ttl_s,
        gossip_window=gs.gossip_window,
        gossip_history=gs.gossip_history,
        heartbeat_initial_delay=0.1,
        heartbeat_interval=gs.heartbeat_interval_s,
        do_px=False,
        score_params=_score_params(gs.score),
        adaptive_gossip_enabled=gs.adaptive_gossip,
        spam_protection_enabled=gs.spam_protection,
        max_messages_per_topic_per_second=gs.max_messages_per_topic_per_second,
        eclipse_protection_enabled=gs.eclipse_protection,
        min_mesh_diversity_ips=gs.min_mesh_diversity_ips,
    )


def _score_params(sc: ScoreSettings) -> ScoreParams:
    """py-libp2p's score parameters for ``sc`` (P1-P3, P6, P7 weigh nothing)."""
    return ScoreParams(
        p4_invalid_messages=TopicScoreParams(sc.invalid_weight, sc.invalid_cap, sc.invalid_decay),
        p5_behavior_penalty_weight=sc.behaviour_weight,
        p5_behavior_penalty_decay=sc.behaviour_decay,
        p5_behavior_penalty_threshold=0.0,
        p7_ip_colocation_weight=0.0,
        publish_threshold=sc.publish_threshold,
        gossip_threshold=sc.gossip_threshold,
        graylist_threshold=sc.graylist_threshold,
        accept_px_threshold=sc.accept_px_threshold,
    )
