"""What the daemon reports about itself (`node.daemon.service`): ``/api/status`` and ``/api/peers``.

`DaemonStatus` reads the parts' live state on every call; it keeps none of its own.
With content routing on, ``/api/status`` has ``dht`` (routing-table size, datasets
provided, lookups, the providers each lookup found) and every ``/api/peers`` row says
whether the peer is in the DHT routing table (``inRoutingTable``; peers only there are
listed too) and which datasets it was found providing (``provides``, DIDs).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fbs.did import DatasetId
from fbs.errors import OdfError
from node.daemon.attest import AttestationService
from node.daemon.follow import FollowList
from node.daemon.heads import HeadWatcher
from node.daemon.liveness import ListenerLiveness
from node.daemon.log import dataset_fields
from node.daemon.pulls import PeerView, PullScheduler
from node.daemon.routing import ContentRouting
from node.daemon.validation import ValidationFeed
from p2p.libp2p.exchange import ExchangeServer
from p2p.libp2p.gossip import HeadGossip
from p2p.libp2p.host import P2PHost
from p2p.peers import PeerScores

__all__ = ["DaemonStatus"]


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """The daemon's parts that ``/api/status`` and ``/api/peers`` report on."""

    host: P2PHost
    scores: PeerScores
    peers: PeerView
    follows: FollowList
    watcher: HeadWatcher
    gossip: HeadGossip
    server: ExchangeServer
    pulls: PullScheduler
    attest: AttestationService
    validation: ValidationFeed
    #: The HTTP base URL (``""`` until the server is bound).
    http_url: Callable[[], str]
    #: The listener's self-probe (`node.daemon.liveness`).
    liveness: ListenerLiveness | None = None
    #: Content routing over the DHT (``None``: off).
    routing: ContentRouting | None = None

    def peers_info(self) -> list[dict[str, Any]]:
        """``/api/peers``: connected peers and every scored one."""
        standings = {s.peer: s for s in self.scores.snapshot()}
        table = frozenset() if self.routing is None else self.routing.routing_peers()
        provides = {} if self.routing is None else self.routing.providers_of()
        rows = []
        for peer in sorted(set(self.peers.connected) | set(standings) | table):
            s = standings.get(peer)
            rows.append(
                {
                    "peerId": peer,
                    "connected": peer in self.peers.connected,
                    "subscribed": peer in self.peers.subscribed,
                    "score": s.score if s else 0.0,
                    "banned": bool(s and s.banned_until is not None),
                    "offences": s.offences if s else 0,
                    "lastReason": s.last_reason if s else None,
                    "inRoutingTable": peer in table,
                    "provides": provides.get(peer, []),
                }
            )
        return rows

    def status_info(self) -> dict[str, Any]:
        """Live fields of ``/api/status``."""
        running = self.host.running
        worker = self.validation.worker
        policy = self.attest.policy
        return {
            "peerId": self.host.peer_id if running else None,
            "addrs": self.host.addrs if running else [],
            "httpUrl": self.http_url(),
            "pid": os.getpid(),
            "peers": len(self.peers.connected),
            "topicPeers": len(self.peers.subscribed),
            "follow": self.follows.entries,
            "followAll": self.follows.all,
            "followNames": self.follow_names(),
            "pulls": self.pulls.pulls_in_progress(),
            "recentPulls": [r.to_dict() for r in self.pulls.history],
            "networkHeads": len(self.pulls.known),
            "announced": self.watcher.announced,
            "dht": {"enabled": False} if self.routing is None else self.routing.status(),
            "gossip": {
                "rejected": self.gossip.rejected,
                "duplicates": self.gossip.duplicates,
                "droppedDeliveries": self.host.dropped_deliveries,
            },
            # Supervised restarts, last unexpected stop, hostile input contained.
            "libp2p": self.host.status(),
            # The last self-probe of the listener (`node.daemon.liveness`).
            "listener": None if self.liveness is None else self.liveness.status(),
            # Per-peer admission of the object exchange (`p2p.libp2p.admission`).
            "exchange": {
                "served": self.server.served_requests,
                "inFlight": self.server.admission.in_flight,
                **self.server.admission.stats.to_dict(),
                "queue": self.server.fair.stats.to_dict(),
            },
            "attestations": self.attest.counters(),
            "validator": None if worker is None else worker.status(),
            "disputes": self.attest.disputes,
            "refused": self.attest.refused_json(),
            "policy": {
                "refuseDisputed": policy.refuse_disputed,
                "confirmations": policy.confirmations,
            },
        }

    def follow_names(self) -> dict[str, str]:
        """The aliases of followed datasets held here, by the DID followed."""
        out: dict[str, str] = {}
        for entry in self.follows.entries:
            if not entry.startswith("did:"):
                continue
            with contextlib.suppress(OdfError):
                alias = dataset_fields(self.follows.ws, DatasetId.from_did(entry))["alias"]
                if alias:
                    out[entry] = alias
        return out
