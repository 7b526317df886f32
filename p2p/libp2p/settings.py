"""What a `p2p.libp2p.host.P2PHost` is configured with: its limits, timeouts and defaults.

Frozen values only; nothing here touches libp2p. `GossipSettings` are the gossipsub
parameters and our own pacing and per-forwarder limits; `HostConfig` is everything a
host needs to start, restart and dial its bootstrap peers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from p2p.libp2p.inbound import InboundLimits
from p2p.libp2p.pubsub_guard import DEFAULT_GOSSIP_BURST_PER_PEER, DEFAULT_GOSSIP_RATE_PER_PEER

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
