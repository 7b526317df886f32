"""The daemon's libp2p host (`node.daemon.service`): built from the node config.

Identity in ``.odf/p2p/identity.key``; gossip limits from the config; odf's DHT
(`p2p.dht`) on unless ``dht: false`` (`node.daemon.config` says why it is on by default).
"""

from __future__ import annotations

from typing import Final

from node.daemon.config import NodeConfig
from p2p.dht.settings import DhtSettings
from p2p.libp2p.host import GossipSettings, HostConfig, P2PHost
from p2p.peers import PeerScores
from storage.workspace import Workspace

__all__ = ["DAEMON_DHT_SETTINGS", "IDENTITY_FILE", "make_host"]

#: Identity key file, relative to the workspace root (``.odf/``).
IDENTITY_FILE: Final = "p2p/identity.key"
#: The daemon's DHT: a whole lookup ends within 20 s, so ``odf pull did:...`` (which
#: waits 30 s for the running node's answer) hears the outcome.
DAEMON_DHT_SETTINGS: Final = DhtSettings(lookup_timeout_s=20.0, query_timeout_s=5.0)


def make_host(workspace: Workspace, config: NodeConfig, scores: PeerScores) -> P2PHost:
    """The libp2p host of ``config``, its identity kept in the workspace."""
    gossip = GossipSettings(
        rate_per_peer=config.gossip_rate_per_peer, burst_per_peer=config.gossip_burst_per_peer
    )
    return P2PHost(
        HostConfig(
            listen_addrs=config.listen,
            gossip=gossip,
            # Dialled by `WatchRound.dial_bootstrap` once gossipsub runs: py-libp2p 0.8.1
            # dials `bootstrap` inside host.run, before the pubsub service exists, and the
            # pubsub notifee then fails the whole host.
            identity_path=workspace.root / IDENTITY_FILE,
            enable_mdns=config.mdns,
        ),
        scores=scores,
        dht=DAEMON_DHT_SETTINGS if config.dht else None,
    )
