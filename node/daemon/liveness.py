"""Listener liveness as a new peer sees it: probe our own libp2p listener, restart if dead.

A libp2p listener can stop admitting new peers while the process, its HTTP API and its
existing connections all look healthy (py-libp2p 0.8.1 did, after a few hundred inbound
connections: see `p2p.libp2p.inbound`). Nothing else would notice: peers already
connected keep replicating, and the node's own dials go out, not in.

`ListenerLiveness` therefore does what a new peer does first, periodically: a fresh TCP
connection to each address the host listens on, and the multistream-select header read
within a timeout (`p2p.libp2p.probe`). After `DEFAULT_FAILURES_BEFORE_RESTART`
consecutive failed checks it asks the host's supervisor to restart the host on the same
addresses (`P2PHost.restart`), so the addresses peers know stay valid. The last check
is part of ``/api/status`` (``listener``) and ``odf node status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from node.daemon.log import event
from p2p.errors import HostError, HostNotRunning
from p2p.libp2p.host import P2PHost
from p2p.libp2p.probe import ProbeResult, probe_listener, tcp_endpoint

__all__ = [
    "DEFAULT_CHECK_INTERVAL_S",
    "DEFAULT_FAILURES_BEFORE_RESTART",
    "DEFAULT_PROBE_TIMEOUT_S",
    "ListenerCheck",
    "ListenerLiveness",
]

#: How often the listener is checked (seconds); the first check comes after
#: `FIRST_CHECK_AFTER_S`.
DEFAULT_CHECK_INTERVAL_S: Final = 30.0
FIRST_CHECK_AFTER_S: Final = 2.0
#: The bound of one probe: connect plus header (seconds; loopback takes milliseconds, a
#: loaded node well under a second).
DEFAULT_PROBE_TIMEOUT_S: Final = 3.0
#: Consecutive failed checks before the host is restarted (one may be a passing stall).
DEFAULT_FAILURES_BEFORE_RESTART: Final = 2

#: A wildcard listen address is probed on the loopback address of its family.
_WILDCARDS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1"}


@dataclass(frozen=True, slots=True)
class ListenerCheck:
    """One check of every listen address.

    Attributes:
        at: when it ran (unix seconds).
        ok: every address answered.
        seconds: the slowest probe.
        error: the first failure, with its address (``None`` when ``ok``).
    """

    at: float
    ok: bool
    seconds: float
    error: str | None = None


class ListenerLiveness:
    """Periodic self-probe of ``host``'s listen addresses (asyncio; see the module docstring).

    Args:
        host: the supervised host to probe and, if dead, restart.
        interval_s: time between checks.
        timeout_s: bound of one probe.
        failures_before_restart: consecutive failed checks that restart the host.
    """

    def __init__(
        self,
        host: P2PHost,
        *,
        interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
        failures_before_restart: int = DEFAULT_FAILURES_BEFORE_RESTART,
        first_check_after_s: float = FIRST_CHECK_AFTER_S,
    ) -> None:
        self.host = host
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.failures_before_restart = max(1, failures_before_restart)
        self.first_check_after_s = first_check_after_s
        self.last: ListenerCheck | None = None
        self.failures = 0
        self.restarts = 0

    async def check(self) -> ListenerCheck | None:
        """Probe every listen address once; ``None`` while the host is not running."""
        if not self.host.running:
            return None
        try:
            endpoints = _probe_targets(self.host.addrs)
        except HostNotRunning:
            return None
        results = await asyncio.gather(
            *(probe_listener(ip, port, timeout=self.timeout_s) for ip, port in endpoints)
        )
        return _summary(time.time(), endpoints, results)

    async def run(self) -> None:
        """Check every ``interval_s`` until cancelled; restart the host when it stays dead."""
        await asyncio.sleep(self.first_check_after_s)
        while True:
            result = await self.check()
            if result is not None:
                await self._record(result)
            await asyncio.sleep(self.interval_s)

    async def _record(self, result: ListenerCheck) -> None:
        self.last = result
        if result.ok:
            self.failures = 0
            return
        self.failures += 1
        event(
            logging.WARNING,
            "libp2p listener did not answer a fresh connection",
            error=result.error,
            consecutive=self.failures,
        )
        if self.failures < self.failures_before_restart:
            return
        reason = f"listener did not answer a fresh connection: {result.error}"
        event(logging.WARNING, "restarting the libp2p host", reason=reason)
        with contextlib.suppress(HostError):  # HostNotRunning too: stopping anyway
            await self.host.restart(reason)
            self.restarts += 1
            self.failures = 0

    def status(self) -> dict[str, Any]:
        """JSON-ready last check (``/api/status`` → ``listener``)."""
        last = self.last
        return {
            "lastCheckAt": None if last is None else last.at,
            "ok": None if last is None else last.ok,
            "seconds": None if last is None else round(last.seconds, 4),
            "error": None if last is None else last.error,
            "consecutiveFailures": self.failures,
            "restarts": self.restarts,
            "intervalSeconds": self.interval_s,
        }


def _probe_targets(addrs: list[str]) -> list[tuple[str, int]]:
    """The TCP endpoints of ``addrs`` to connect to (other transports are skipped)."""
    out = []
    for addr in addrs:
        with contextlib.suppress(ValueError):
            ip, port = tcp_endpoint(addr)
            out.append((_WILDCARDS.get(ip, ip), port))
    return out


def _summary(
    at: float, endpoints: list[tuple[str, int]], results: list[ProbeResult]
) -> ListenerCheck:
    slowest = max((r.seconds for r in results), default=0.0)
    for (ip, port), r in zip(endpoints, results, strict=True):
        if not r.ok:
            return ListenerCheck(at, False, slowest, f"{ip}:{port}: {r.error}")
    return ListenerCheck(at, True, slowest)
