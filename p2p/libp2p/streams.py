"""Streams of a `p2p.libp2p.host.P2PHost`: guarded handlers, and an asyncio view of a stream.

py-libp2p runs stream handlers in the connection's nursery, where an exception would stop
the whole host: `guard_handler` contains it (one log line, the stream reset) and resets
streams from banned peers before the handler sees them. Handlers run *in the trio
thread*: they must be trio code and must not touch asyncio objects.

`AsyncioStream` reads and writes a stream from asyncio, one thread hop per call; reads at
the end of a stream return ``b""`` (py-libp2p raises ``StreamEOF`` there).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from libp2p.network.stream.exceptions import StreamEOF

from p2p.errors import HostNotRunning, TransferError
from p2p.libp2p.pubsub_guard import GuardStats, describe_exception, mark_guarded
from p2p.peers import PeerScores

__all__ = ["AsyncioStream", "TrioCaller", "TrioStreamHandler", "guard_handler"]

log = logging.getLogger(__name__)

T = TypeVar("T")

TrioStreamHandler = Callable[[Any], Awaitable[None]]
"""Trio coroutine function called with each inbound ``INetStream`` of a protocol."""


class TrioCaller(Protocol):
    """Runs trio coroutine functions in a host's trio thread (`P2PHost.run_trio`)."""

    async def run_trio(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T: ...


def guard_handler(
    protocol: str, handler: TrioStreamHandler, scores: PeerScores, stats: GuardStats
) -> TrioStreamHandler:
    """``handler`` as registered with py-libp2p: exceptions end only the stream.

    A failure is counted in ``stats.handler_failures``; a banned peer's stream is reset
    unseen; the stream is closed when the handler returns.
    """

    async def wrapped(stream: Any) -> None:
        try:
            peer = str(stream.muxed_conn.peer_id)
            if scores.is_banned(peer):
                with contextlib.suppress(Exception):
                    await stream.reset()
                return
            await handler(stream)
        except Exception as e:
            # One line (a peer may provoke this at will); the traceback at debug.
            stats.handler_failures += 1
            log.warning("handler of %s failed: %s", protocol, describe_exception(e))
            log.debug("handler of %s failed", protocol, exc_info=True)
            with contextlib.suppress(Exception):
                await stream.reset()
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    return mark_guarded(wrapped)


class AsyncioStream:
    """An asyncio-facing view of a libp2p stream (each call hops to the trio thread).

    Prefer trio-level code (`P2PHost.run_trio`) for bulk transfers: each call here
    costs a thread hop.
    """

    def __init__(self, host: TrioCaller, stream: Any) -> None:
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
