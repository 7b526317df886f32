"""Inbound connection admission for py-libp2p's swarm: bounded upgrades, freed slots.

Why this module exists: in py-libp2p 0.8.1, ``Swarm._handle_inbound_connection`` takes
one slot of a limiter sized ``max_connections - min_connections`` (250 by default) for
each accepted TCP connection and, once the connection is upgraded, keeps the slot until
the *swarm* stops: the handler waits for the swarm's end (not the connection's) so that
trio does not close the socket under the connection. Every inbound connection ever
accepted thus uses a slot for good. After 250 of them (connection churn, a dropped peer
that reconnects again and again) the listener closes each new TCP connection before
writing the multistream-select header: no new peer can connect, while the connections
already open keep working and the process looks healthy. Besides, handshakes in
progress are bounded only in total, so the half-open connections of one address can
hold every slot for the whole upgrade timeout, again and again.

What it does instead: `install_inbound_guard` replaces that handler on one swarm by
`InboundGuard.handle`, which

- upgrades each connection (multistream-select, noise, yamux) within
  `InboundLimits.upgrade_timeout_s`;
- admits at most `InboundLimits.max_pending_per_address` upgrades in progress per
  remote IP address and `InboundLimits.max_pending` in all; when every slot is taken, a
  connection from an address holding fewer slots than the busiest address evicts that
  address's oldest upgrade, so a flood from a few addresses cannot keep others out;
- admits at most `InboundLimits.max_established_per_address` upgraded connections per
  address (the swarm's own ``max_connections`` bounds them in all);
- closes the connection of a refused peer (``refuse(peer_id)``, e.g. a banned peer) as
  soon as the handshake names it, before the swarm registers it;
- keeps an upgraded connection's slot only while that connection is open.

It runs in the host's trio thread; `InboundStats` counts what it did.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import trio
from libp2p.network.connection.raw_connection import RawConnection

from p2p.errors import HostError

__all__ = [
    "DEFAULT_UPGRADE_TIMEOUT_S",
    "InboundGuard",
    "InboundLimits",
    "InboundStats",
    "install_inbound_guard",
]

log = logging.getLogger(__name__)

#: How long a remote peer has to finish multistream-select, noise and yamux (seconds);
#: loopback takes milliseconds, a slow WAN link well under a second.
DEFAULT_UPGRADE_TIMEOUT_S: Final = 8.0
#: How often an upgraded connection without a close event is checked (seconds).
CLOSED_POLL_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class InboundLimits:
    """Bounds of inbound connection admission (see the module docstring).

    Attributes:
        upgrade_timeout_s: time to finish multistream-select, security and muxer.
        max_pending: upgrades in progress, in all.
        max_pending_per_address: upgrades in progress per remote IP address.
        max_established_per_address: upgraded connections open per remote IP address.
    """

    upgrade_timeout_s: float = DEFAULT_UPGRADE_TIMEOUT_S
    max_pending: int = 64
    max_pending_per_address: int = 16
    max_established_per_address: int = 64

    def __post_init__(self) -> None:
        if self.upgrade_timeout_s <= 0:
            raise ValueError("upgrade_timeout_s must be positive")
        if min(self.max_pending, self.max_pending_per_address) < 1:
            raise ValueError("pending limits must be at least 1")
        if self.max_established_per_address < 1:
            raise ValueError("max_established_per_address must be at least 1")


@dataclass(slots=True)
class InboundStats:
    """What the guard did (counters since the host was built; gauges right now)."""

    accepted: int = 0
    refused_address: int = 0
    refused_full: int = 0
    refused_peer: int = 0
    evicted: int = 0
    timed_out: int = 0
    failed: int = 0
    pending: int = 0
    established: int = 0

    def to_dict(self) -> dict[str, int]:
        """JSON-ready counters (``/api/status`` → ``libp2p.inbound``)."""
        return {
            "accepted": self.accepted,
            "refusedAddress": self.refused_address,
            "refusedFull": self.refused_full,
            "refusedPeer": self.refused_peer,
            "evicted": self.evicted,
            "timedOut": self.timed_out,
            "failed": self.failed,
            "pending": self.pending,
            "established": self.established,
        }


class _Slot:
    """One upgrade in progress: its cancel scope (deadline) and why it was cut short."""

    __slots__ = ("address", "evicted", "scope")

    def __init__(self, address: str, deadline: float) -> None:
        self.address = address
        self.scope = trio.CancelScope(deadline=deadline)
        self.evicted = False


class InboundGuard:
    """Admission of inbound connections to one py-libp2p swarm (trio thread only).

    Args:
        swarm: the py-libp2p ``Swarm`` (its ``upgrader`` and ``add_conn`` are used).
        limits: the bounds.
        stats: where to count (shared with the host's status).
        refuse: called with the remote peer id (base58) once the handshake names it;
            ``True`` closes the connection (banned peers).
    """

    def __init__(
        self,
        swarm: Any,
        limits: InboundLimits,
        stats: InboundStats,
        refuse: Callable[[str], bool] | None = None,
    ) -> None:
        self._swarm = swarm
        self.limits = limits
        self.stats = stats
        self._refuse = refuse
        self._pending: dict[str, list[_Slot]] = {}
        self._established: Counter[str] = Counter()

    async def handle(self, conn: Any, maddr: Any) -> None:
        """Serve one accepted TCP connection (replaces the swarm's inbound handler).

        Returns when the connection is refused, fails to upgrade or, once upgraded,
        closes; the listener then closes the socket.
        """
        address = _remote_ip(conn)
        slot = self._admit(address)
        if slot is None:
            await _close(conn)
            return
        try:
            muxed = await self._upgrade(conn, slot)
        finally:
            self._release(slot)
        if muxed is None:
            return
        self._established[address] += 1
        self.stats.established += 1
        try:
            await _wait_closed(muxed)
        finally:
            self.stats.established -= 1
            self._established[address] -= 1
            if self._established[address] <= 0:
                del self._established[address]

    def _admit(self, address: str) -> _Slot | None:
        """A slot for a new upgrade from ``address``, or ``None`` (counted) if refused."""
        mine = self._pending.get(address, [])
        if (
            len(mine) >= self.limits.max_pending_per_address
            or self._established[address] >= self.limits.max_established_per_address
        ):
            self.stats.refused_address += 1
            return None
        if self.stats.pending >= self.limits.max_pending and not self._evict_for(address):
            self.stats.refused_full += 1
            return None
        slot = _Slot(address, trio.current_time() + self.limits.upgrade_timeout_s)
        self._pending.setdefault(address, []).append(slot)
        self.stats.pending += 1
        return slot

    def _evict_for(self, address: str) -> bool:
        """Cut the oldest upgrade of the busiest address if it holds more than ``address``."""
        busiest = max(self._pending.values(), key=len, default=[])
        if len(busiest) <= len(self._pending.get(address, ())):
            return False
        victim = busiest[0]
        victim.evicted = True
        victim.scope.cancel()
        self._release(victim)
        self.stats.evicted += 1
        return True

    def _release(self, slot: _Slot) -> None:
        slots = self._pending.get(slot.address)
        if slots is None or slot not in slots:
            return  # already released (evicted)
        slots.remove(slot)
        if not slots:
            del self._pending[slot.address]
        self.stats.pending -= 1

    async def _upgrade(self, conn: Any, slot: _Slot) -> Any:
        """Secure, mux and register ``conn``; the muxed connection, or ``None`` if it failed.

        The handshake runs under ``slot``'s deadline; the registration in the swarm does
        not (cancelling it halfway would leave the swarm's bookkeeping half done).
        """
        swarm = self._swarm
        raw = RawConnection(conn, False)
        secured: Any = None
        muxed: Any = None
        with slot.scope:
            try:
                if len(swarm.get_connections()) >= swarm.connection_config.max_connections:
                    self.stats.refused_full += 1
                    await _close(raw)
                    return None
                secured = await swarm.upgrader.upgrade_security(raw, False)
                muxed = await swarm.upgrader.upgrade_connection(secured, secured.get_remote_peer())
            except Exception as e:  # handshake errors of assorted types
                self.stats.failed += 1
                log.debug("inbound upgrade from %s failed: %r", slot.address, e)
        if muxed is None:
            if slot.scope.cancelled_caught and not slot.evicted:
                self.stats.timed_out += 1
            await _close_all(secured, raw)
            return None
        peer = str(muxed.peer_id)
        if self._refuse is not None and self._refuse(peer):
            self.stats.refused_peer += 1
            await _close_all(muxed, secured, raw)
            return None
        try:
            await swarm.add_conn(muxed, direction="inbound")
        except Exception as e:  # the swarm's own limits (resource manager, max connections)
            self.stats.failed += 1
            log.debug("inbound connection from %s not registered: %r", peer, e)
            await _close_all(muxed, secured, raw)
            return None
        self.stats.accepted += 1
        return muxed


def install_inbound_guard(
    host: Any,
    limits: InboundLimits,
    stats: InboundStats,
    refuse: Callable[[str], bool] | None = None,
) -> InboundGuard:
    """Put an `InboundGuard` in place of ``host``'s swarm inbound handler (before ``run``).

    Raises:
        HostError: the swarm is not the py-libp2p one this adapter was written for (the
            replaced handler or the parts it uses are missing): refusing to run
            unguarded is safer than a listener that silently stops admitting peers.
    """
    swarm = host.get_network()
    for name in ("_handle_inbound_connection", "upgrader", "add_conn", "connection_config"):
        if not hasattr(swarm, name):
            raise HostError(f"py-libp2p swarm has no {name!r}: the inbound guard cannot apply")
    guard = InboundGuard(swarm, limits, stats, refuse)
    # The swarm's listeners look the handler up on each accepted connection.
    swarm._handle_inbound_connection = guard.handle
    return guard


def _remote_ip(conn: Any) -> str:
    with contextlib.suppress(Exception):
        remote = conn.get_remote_address()
        if remote is not None:
            return str(remote[0])
    return "?"


async def _wait_closed(muxed: Any) -> None:
    """Return once ``muxed`` is closed (yamux sets ``event_closed``; else poll)."""
    event = getattr(muxed, "event_closed", None)
    if isinstance(event, trio.Event):
        await event.wait()
        return
    while not muxed.is_closed:
        await trio.sleep(CLOSED_POLL_S)


async def _close(conn: Any) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0), contextlib.suppress(Exception):
        await conn.close()


async def _close_all(*conns: Any) -> None:
    for conn in conns:
        if conn is not None:
            await _close(conn)
