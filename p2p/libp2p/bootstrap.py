"""Dialling the peers a `p2p.libp2p.host.P2PHost` starts with, and again after a restart.

Bootstrap peers are *not* handed to py-libp2p: 0.8.1 dials them inside ``host.run``
before the pubsub service runs, and the pubsub notifee of the new connection then fails
the whole host ('Pubsub' object has no attribute '_manager'). `dial_bootstrap` dials them
once gossipsub is ready instead, in the background, with retries (the peer may still be
starting; py-libp2p's own 60 s refusal to redial a peer that failed is cleared first,
`p2p.libp2p.dial_errors`). `RedialAddrs` remembers the addresses `P2PHost.connect` reached, so a
restarted host dials them too.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import multiaddr  # type: ignore[import-untyped]
import trio
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

from p2p.errors import PeerUnavailable
from p2p.libp2p.dial_errors import dial_failure_reason, forget_failed_dial
from p2p.libp2p.settings import BOOTSTRAP_MAX_DELAY_S, MAX_REDIAL_ADDRS, HostConfig
from p2p.peers import PeerScores

__all__ = ["RedialAddrs", "dial_bootstrap", "dial_list", "parse_peer_addr"]

log = logging.getLogger(__name__)


def parse_peer_addr(addr: str) -> PeerInfo:
    """The peer id and address of ``/ip4/.../tcp/.../p2p/<peer id>``.

    Raises:
        PeerUnavailable: a malformed address.
    """
    try:
        return info_from_p2p_addr(multiaddr.Multiaddr(addr))
    except Exception as e:  # multiaddr / peer id errors of assorted types
        raise PeerUnavailable(f"invalid peer address {addr!r}: {e}") from None


async def dial_bootstrap(
    host: Any, addr: str, *, me: str | None, scores: PeerScores, config: HostConfig
) -> None:
    """Dial one bootstrap peer (trio, in the host's nursery), retrying with back-off.

    ``host`` is the py-libp2p ``IHost``, ``me`` this host's peer id. Failures are logged,
    never raised: a missing bootstrap peer must not stop the host. Our own address,
    banned peers and peers already connected are skipped.
    """
    try:
        info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
    except Exception as e:
        log.warning("ignoring invalid bootstrap address %r: %s", addr, e)
        return
    if str(info.peer_id) == me or scores.is_banned(str(info.peer_id)):
        return
    delay, reason = config.bootstrap_retry_delay_s, "not dialled"
    for attempt in range(1, max(1, config.bootstrap_attempts) + 1):
        if info.peer_id in host.get_connected_peers():
            return
        forget_failed_dial(host, info.peer_id)  # the back-off here is ours
        try:
            with trio.fail_after(config.connect_timeout_s):
                await host.connect(info)
        except Exception as e:  # dial errors of assorted types, TooSlowError
            reason = dial_failure_reason(e)
            log.debug("bootstrap dial %d of %s failed: %s", attempt, addr, reason)
        else:
            log.info("connected to bootstrap peer %s", info.peer_id)
            return
        if attempt < config.bootstrap_attempts:
            await trio.sleep(delay)
            delay = min(delay * 2, BOOTSTRAP_MAX_DELAY_S)
    log.warning("bootstrap peer %s unreachable after %d attempts: %s", addr, attempt, reason)


class RedialAddrs:
    """The last `MAX_REDIAL_ADDRS` peers dialled, each with the address that reached it."""

    def __init__(self, limit: int = MAX_REDIAL_ADDRS) -> None:
        self._limit = limit
        self._addrs: OrderedDict[str, str] = OrderedDict()  # peer id -> address

    def remember(self, peer: str, addr: str) -> None:
        """Record ``addr`` as the way to ``peer`` (the most recent addresses win)."""
        self._addrs.pop(peer, None)
        self._addrs[peer] = addr
        while len(self._addrs) > self._limit:
            self._addrs.popitem(last=False)

    def addrs(self) -> list[str]:
        """The addresses, oldest first."""
        return list(self._addrs.values())


def dial_list(bootstrap: Iterable[str], redial: RedialAddrs) -> list[str]:
    """The bootstrap addresses, then the remembered ones, each once."""
    return list(dict.fromkeys([*bootstrap, *redial.addrs()]))
