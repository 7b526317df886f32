"""Probe a libp2p TCP listener the way a new peer first meets it.

A libp2p listener speaks first on every accepted TCP connection: it writes the
multistream-select header (``/multistream/1.0.0``, length-prefixed) before it reads
anything. A listener that accepts the TCP connection but never writes that header (or
closes the connection at once) cannot be joined by any new peer, even while its
existing connections still work. `probe_listener` checks exactly that, from asyncio,
without a libp2p stack of its own, so a node can probe its own listener and a benchmark
can probe a node it attacks.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Final

import multiaddr  # type: ignore[import-untyped]

__all__ = ["MULTISTREAM_HEADER", "ProbeResult", "probe_listener", "tcp_endpoint"]

#: What a libp2p listener writes first: the varint length (19) then the protocol id.
MULTISTREAM_HEADER: Final = b"\x13/multistream/1.0.0\n"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of one probe.

    Attributes:
        ok: the header arrived within the timeout.
        seconds: how long the connect and the read took (up to the timeout).
        error: why it failed (``None`` when ``ok``).
    """

    ok: bool
    seconds: float
    error: str | None = None


def tcp_endpoint(addr: str) -> tuple[str, int]:
    """The ``(ip, port)`` of an ``/ip4|ip6/.../tcp/...`` multiaddr (``/p2p/...`` ignored).

    Raises:
        ValueError: ``addr`` is not a TCP multiaddr with an IP address.
    """
    try:
        ma = multiaddr.Multiaddr(addr)
        port = int(ma.value_for_protocol("tcp"))
    except Exception as e:
        raise ValueError(f"not a TCP multiaddr: {addr!r} ({e})") from None
    for proto in ("ip4", "ip6"):
        with contextlib.suppress(Exception):
            ip = ma.value_for_protocol(proto)
            if ip:
                return str(ip), port
    raise ValueError(f"not an IP multiaddr: {addr!r}")


async def probe_listener(
    host: str, port: int, *, timeout: float = 1.0, local_ip: str | None = None
) -> ProbeResult:
    """Open a fresh TCP connection to ``host:port`` and wait for the multistream header.

    Sends nothing: the connection is closed as soon as the header (or anything else,
    or the end of the stream) has been read, or the timeout passed.

    Args:
        host / port: the listener.
        timeout: the bound of the connect and the read together (seconds).
        local_ip: connect from this local address (e.g. another loopback address,
            so the probe counts as a different remote address than other clients).
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            local = (local_ip, 0) if local_ip is not None else None
            reader, writer = await asyncio.open_connection(host, port, local_addr=local)
            got = await reader.readexactly(len(MULTISTREAM_HEADER))
    except TimeoutError:
        return ProbeResult(False, loop.time() - t0, f"no header within {timeout} s")
    except asyncio.IncompleteReadError as e:
        return ProbeResult(False, loop.time() - t0, f"closed after {len(e.partial)} bytes")
    except OSError as e:
        return ProbeResult(False, loop.time() - t0, f"connect failed: {e}")
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    if got != MULTISTREAM_HEADER:
        return ProbeResult(False, loop.time() - t0, f"unexpected first bytes {got!r}")
    return ProbeResult(True, loop.time() - t0)
