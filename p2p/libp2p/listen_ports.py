"""Refuse a libp2p listen port that another process already listens on.

py-libp2p opens its TCP listeners with ``SO_REUSEPORT`` (for hole punching), so on
Linux a second node started on a port that a first one serves binds it too, silently:
the kernel then splits incoming connections between the two processes, and a peer
dialling one node's address reaches the other about half the time. `check_listen_ports`
binds each fixed port once *without* ``SO_REUSEPORT`` before the host starts: that bind
fails while any socket listens there, whatever its options.
"""

from __future__ import annotations

import contextlib
import errno
import socket

import multiaddr  # type: ignore[import-untyped]

from p2p.errors import HostError

__all__ = ["check_listen_ports"]


def _ip_port(addr: str) -> tuple[int, str, int] | None:
    """(address family, IP, TCP port) of a listen multiaddr, or None if it is not IP+TCP."""
    try:
        ma = multiaddr.Multiaddr(addr)
        port = int(ma.value_for_protocol("tcp"))
    except Exception:  # not TCP, or malformed: libp2p reports it by name
        return None
    for proto, family in (("ip4", socket.AF_INET), ("ip6", socket.AF_INET6)):
        with contextlib.suppress(Exception):
            return family, str(ma.value_for_protocol(proto)), port
    return None


def check_listen_ports(listen_addrs: tuple[str, ...]) -> None:
    """Raise `HostError` if a fixed TCP port of ``listen_addrs`` is already listened on.

    Port 0 (any free port) and non-IP addresses are not checked. ``SO_REUSEADDR`` is
    set, as for any server socket, so connections of an earlier run still in TIME_WAIT
    do not block a restart on the same port.
    """
    for addr in listen_addrs:
        target = _ip_port(addr)
        if target is None or target[2] == 0:
            continue
        family, ip, port = target
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ip, port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise HostError(
                        f"libp2p listen address {addr} is in use by another process"
                    ) from None
                raise HostError(f"cannot listen on {addr}: {e.strerror or e}") from None
