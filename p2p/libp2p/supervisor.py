"""Restarting a `p2p.libp2p.host.P2PHost` whose trio thread ended without `P2PHost.stop`.

py-libp2p 0.8.1 lets an exception from a stream handler or a pubsub task stop the whole
host; `p2p.libp2p.pubsub_guard` contains the known ones. Should the thread end anyway,
`supervise` restarts it after `HostConfig.restart_delay_s`, doubled after each restart
that did not stay up `RESTART_STABLE_AFTER_S`, at most `HostConfig.restart_max_delay_s`
(`next_restart_delay`), on the addresses it was bound to (`relaunch`: so advertised
addresses stay valid), else on the configured ones. One log line says why it stopped;
`HostHealth` counts restarts and keeps the last reason for ``/api/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from p2p.errors import HostError
from p2p.libp2p.bridge import TrioThread
from p2p.libp2p.settings import RESTART_STABLE_AFTER_S, HostConfig

__all__ = ["HostHealth", "next_restart_delay", "relaunch", "supervise"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HostHealth:
    """Restarts after an unexpected stop, and why / when (wall clock) it last stopped."""

    restarts: int = 0
    last_stop_reason: str | None = None
    last_stop_at: float | None = None


def next_restart_delay(delay: float, up_for_s: float, config: HostConfig) -> tuple[float, float]:
    """The delay before this restart and the one after it, given the current ``delay``.

    A host that stayed up `RESTART_STABLE_AFTER_S` was not in a crash loop: its delay
    starts over at ``config.restart_delay_s``.
    """
    now = config.restart_delay_s if up_for_s >= RESTART_STABLE_AFTER_S else delay
    return now, min(now * 2, config.restart_max_delay_s)


async def supervise(
    bridge: TrioThread,
    config: HostConfig,
    health: HostHealth,
    restart: Callable[[], Awaitable[None]],
    describe: Callable[[], tuple[str | None, list[str]]],
) -> None:
    """Restart the trio thread whenever it ends without a stop request (asyncio task).

    ``restart`` launches a new run; ``describe`` gives the host's peer id and addresses
    for the log. Returns once a run ends because a stop was requested; a stop cancels
    this task otherwise.
    """
    delay = config.restart_delay_s
    while True:
        assert bridge.finished is not None
        await bridge.finished.wait()
        if bridge.stop_requested:
            return
        now, delay = next_restart_delay(delay, time.monotonic() - bridge.up_since, config)
        health.last_stop_at = time.time()
        log.warning(
            "libp2p host %s stopped unexpectedly (%s); restarting in %.1f s",
            describe()[0],
            health.last_stop_reason,
            now,
        )
        with contextlib.suppress(HostError):
            await bridge.halt()  # the thread has ended; join it
        await asyncio.sleep(now)
        try:  # `stop` cancels this task, so no stop request can be pending here
            await restart()
        except HostError as e:
            # `finished` is set again: the next round logs this and backs off.
            health.last_stop_reason = f"restart failed: {e}"
            continue
        health.restarts += 1
        peer, addrs = describe()
        log.info("libp2p host %s restarted on %s", peer, addrs)


async def relaunch(
    launch: Callable[[tuple[str, ...]], Awaitable[None]],
    bound: tuple[str, ...],
    configured: tuple[str, ...],
) -> None:
    """``launch`` on the ports bound before, else on the configured addresses.

    Raises:
        HostError: neither could be launched.
    """
    try:
        await launch(bound or configured)
    except HostError:
        if not bound or bound == configured:
            raise
        log.info("libp2p host: cannot rebind %s; using %s", bound, configured)
        await launch(configured)
