"""Blocking calls of the node daemon, on worker threads it can wait for when it stops.

`asyncio.to_thread` cannot be cancelled: cancelling the awaiting task leaves the thread
running, and the daemon's blocking calls write (signed head records, attestations,
indexes). A daemon that returned from ``stop()`` while one of them still ran would let a
write land after the node said it had stopped: a ``.pending-*`` file appears in a
workspace the caller believes idle, or the process exits half-way through it.

`WorkerThreads` runs each call on its own executor and remembers the calls in flight:
`close` cancels the ones not started yet, waits (bounded by `STOP_THREADS_TIMEOUT_S`)
for the running ones, and refuses new calls. One per daemon, so two daemons in one
process do not wait for each other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

__all__ = ["STOP_THREADS_TIMEOUT_S", "WorkerThreads"]

log = logging.getLogger(__name__)

#: How long `WorkerThreads.close` waits for calls already running (a validator replay
#: can take longer: it is left to finish on its own and logged).
STOP_THREADS_TIMEOUT_S: Final = 30.0

P = ParamSpec("P")
T = TypeVar("T")


class WorkerThreads:
    """Runs blocking calls on worker threads and waits for them at `close`.

    Args:
        name: prefix of the thread names (seen in stack dumps).
        max_workers: pool size (default: the `concurrent.futures` default).
    """

    def __init__(self, name: str = "odf-node", max_workers: int | None = None) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=name
        )
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._closed = False
        #: Set when `close` starts: long calls (a validator's replays) poll it and end
        #: early, leaving their remaining work for the next run.
        self.stopping = threading.Event()

    @property
    def inflight(self) -> int:
        """Calls submitted and not finished."""
        return len(self._inflight)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on a worker thread, with this task's context variables.

        Raises:
            asyncio.CancelledError: the owner is stopping (`close` was called).
        """
        if self._closed:
            raise asyncio.CancelledError("worker threads closed: the node is stopping")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        future = self._executor.submit(call)
        self._inflight.add(future)
        future.add_done_callback(self._inflight.discard)
        return await asyncio.wrap_future(future)

    async def close(self, timeout: float = STOP_THREADS_TIMEOUT_S) -> int:
        """Refuse new calls, drop the queued ones and wait for the running ones.

        Returns:
            How many calls were still running after ``timeout`` seconds (logged).
        """
        self._closed = True
        self.stopping.set()
        for future in list(self._inflight):
            future.cancel()  # only calls not started yet can be cancelled
        running = [f for f in self._inflight if not f.done()]
        left = 0
        if running:
            _done, pending = await asyncio.to_thread(
                concurrent.futures.wait, running, timeout=timeout
            )
            left = len(pending)
            if left:
                log.warning("%d blocking call(s) still running after %.0f s at stop", left, timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)
        return left
