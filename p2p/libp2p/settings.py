"""What a `p2p.libp2p.host.P2PHost` is configured with: its limits, timeouts and defaults.

Frozen values only; nothing here touches libp2p. `GossipSettings` are the gossipsub
parameters (the one place they are set: `p2p.libp2p.stack` hands each to py-libp2p) and
our own pacing and per-forwarder limits; `HostConfig` is everything a host needs to
start, restart and dial its bootstrap peers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from p2p.libp2p.inbound import InboundLimits
from p2p.libp2p.pubsub_guard import DEFAULT_GOSSIP_BURST_PER_PEER, DEFAULT_GOSSIP_RATE_PER_PEER
from p2p.libp2p.shards import SHARD_COUNT

__all__ = [
    "BOOTSTRAP_MAX_DELAY_S",
    "DEFAULT_BOOTSTRAP_ATTEMPTS",
    "DEFAULT_BOOTSTRAP_RETRY_DELAY_S",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_LISTEN_ADDRS",
    "DEFAULT_RESTART_DELAY_S",
    "DEFAULT_RESTART_MAX_DELAY_S",
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "GOSSIPSUB_PROTOCOLS",
    "MAX_GOSSIP_MESSAGE_BYTES",
    "MAX_PENDING_DELIVERIES",
    "MAX_REDIAL_ADDRS",
    "MAX_TOPIC_LEN",
    "RESTART_STABLE_AFTER_S",
    "GossipSettings",
    "HostConfig",
    "ScoreSettings",
]

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


@dataclass(frozen=True, slots=True)
class ScoreSettings:
    """Gossipsub v1.1 peer scoring as py-libp2p 0.8.1 implements it (its thresholds
    default to minus infinity, i.e. off).

    Only penalties count: invalid messages (P4: a message a topic validator refused,
    which includes a valid record not worth forwarding, so its weight is low and it
    decays fast) and misbehaviour (P5: py-libp2p's spam protection adds 5 per message
    over its per-topic rate, GRAFT and IHAVE/IWANT floods add more). No reward for time
    in mesh or deliveries (P1-P3) and no IP-colocation penalty (P7): every peer of a
    loopback devnet shares one address. Bans are `p2p.peers.PeerScores`' job; these
    thresholds only stop gossiping with (``gossip``), accepting publishes from
    (``publish``) and reading RPCs of (``graylist``) a peer while its score is low.

    Attributes:
        invalid_weight / invalid_cap / invalid_decay: P4 per topic, decay per heartbeat
            (0.5: a peer forwarding ``r`` refused messages a second settles near ``-2r``).
        behaviour_weight / behaviour_decay: P5, counted above a threshold of 0.
        gossip_threshold / publish_threshold / graylist_threshold: score gates.
        accept_px_threshold: peer exchange is off (``do_px`` False); kept finite anyway.
    """

    invalid_weight: float = 1.0
    invalid_cap: float = 100.0
    invalid_decay: float = 0.5
    behaviour_weight: float = 1.0
    behaviour_decay: float = 0.9
    gossip_threshold: float = -25.0
    publish_threshold: float = -50.0
    graylist_threshold: float = -100.0
    accept_px_threshold: float = 0.0


@dataclass(frozen=True, slots=True)
class GossipSettings:
    """Every gossipsub parameter of a host, explicit (defaults: the spec's, 1 s heartbeat).

    py-libp2p's own defaults differ where it matters: a 120 s heartbeat, an "adaptive"
    mode that stretches it to 30-60 s on a network it judges unhealthy (slowing mesh
    repair under churn), 100 topics per remote peer (below `SHARD_COUNT`), scoring off.

    Attributes:
        protocols: gossipsub protocol ids offered, preferred first.
        degree / degree_low / degree_high: mesh degree D, D_lo, D_hi (6/4/12).
        heartbeat_interval_s: mesh maintenance period (1 s).
        adaptive_gossip: off, so the heartbeat stays at ``heartbeat_interval_s``.
        fanout_ttl_s / gossip_window / gossip_history: 60 s, 3 and 5 heartbeats.
        seen_ttl_s: how long a message id is remembered as seen (2 min).
        max_subscriptions_per_peer: topics one remote peer may announce: every shard
            plus the single head topic, attestations and room to spare.
        eclipse_protection / min_mesh_diversity_ips: py-libp2p grafts peers of other IP
            addresses when a mesh has fewer than this many (a no-op on loopback).
        spam_protection: py-libp2p's per-peer per-topic rate limit.
        max_messages_per_topic_per_second: the limit when spam protection is on.
        score: peer-score weights and thresholds (`ScoreSettings`).
        publish_interval_s: minimum spacing of our own publishes on one topic, kept
            below the receivers' rate limit and the 32-entry outbound queues.
        rate_per_peer / burst_per_peer: messages per second (sustained / burst) one
            forwarder may send before its messages are dropped unread and it is
            penalised (`p2p.libp2p.pubsub_guard.GossipRateLimiter`).
        legacy_topic: head records also go on, and are taken from, the single head topic
            of nodes without shards (`p2p.libp2p.gossip.HEADS_TOPIC`); on for one release.
    """

    protocols: tuple[str, ...] = GOSSIPSUB_PROTOCOLS
    degree: int = 6
    degree_low: int = 4
    degree_high: int = 12
    heartbeat_interval_s: int = 1
    adaptive_gossip: bool = False
    fanout_ttl_s: int = 60
    gossip_window: int = 3
    gossip_history: int = 5
    seen_ttl_s: int = 120
    max_subscriptions_per_peer: int = SHARD_COUNT + 64
    eclipse_protection: bool = True
    min_mesh_diversity_ips: int = 3
    spam_protection: bool = True
    max_messages_per_topic_per_second: float = 10.0
    score: ScoreSettings = field(default_factory=ScoreSettings)
    publish_interval_s: float = 0.125
    rate_per_peer: float = DEFAULT_GOSSIP_RATE_PER_PEER
    burst_per_peer: int = DEFAULT_GOSSIP_BURST_PER_PEER
    legacy_topic: bool = True


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
        inbound: bounds of inbound connection upgrades (`p2p.libp2p.inbound`).
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
    inbound: InboundLimits = field(default_factory=InboundLimits)
