"""What went wrong in a py-libp2p dial, in a few words, and forgetting that it did.

py-libp2p 0.8.1 reports an unreachable peer as ``SwarmDialAllFailedError`` ("no addresses
established a successful connection (with exceptions)") wrapping a ``MultiError`` of
``SwarmException`` s wrapping the transport's ``OpenConnectionError`` wrapping trio's
``OSError``: `dial_failure_reason` digs out the innermost ``OSError`` ("connection
refused"). It also remembers a failed peer for 60 s in the swarm's negative cache and
refuses every dial to it meanwhile, so a peer that restarted could not be reached again
for a minute: `forget_failed_dial` clears that entry before a dial we decided to make
(we back off ourselves).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

__all__ = ["dial_failure_reason", "forget_failed_dial"]

#: Exceptions looked at when digging for the cause (a bound on hostile chains).
MAX_CAUSES = 64


def _inner(e: BaseException) -> list[BaseException]:
    """The exceptions ``e`` wraps: its cause or context, and a group's members."""
    out: list[BaseException] = []
    for attr in ("errors", "exceptions"):
        members = getattr(e, attr, None)
        if isinstance(members, list | tuple):
            out += [m for m in members if isinstance(m, BaseException)]
    cause = e.__cause__ or e.__context__
    if cause is not None:
        out.append(cause)
    return out


def _os_reason(e: OSError) -> str:
    if e.errno:
        return os.strerror(e.errno).lower()
    return str(e) or type(e).__name__


def dial_failure_reason(e: BaseException) -> str:
    """The innermost ``OSError`` under ``e`` as a phrase ("connection refused"), else ``e``."""
    best: tuple[int, OSError] | None = None
    stack: list[tuple[int, BaseException]] = [(0, e)]
    seen: set[int] = set()
    while stack and len(seen) < MAX_CAUSES:
        depth, x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError) and (best is None or depth >= best[0]):
            best = (depth, x)
        stack += [(depth + 1, c) for c in _inner(x)]
    if best is not None:
        return _os_reason(best[1])
    return str(e) or type(e).__name__


def forget_failed_dial(host: Any, peer_id: Any) -> None:
    """Let ``host`` (py-libp2p ``IHost``; trio thread) dial ``peer_id`` despite a recent failure."""
    unblock = getattr(host.get_network(), "unblock_peer", None)
    if unblock is not None:
        with contextlib.suppress(Exception):  # a swarm without the cache: nothing to clear
            unblock(peer_id)
