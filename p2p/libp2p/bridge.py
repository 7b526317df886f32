"""The trio <-> asyncio bridge of a `p2p.libp2p.host.P2PHost`: one trio run in its own thread.

py-libp2p is trio-only and the daemon (aiohttp) is asyncio. `TrioThread` runs
``trio.run`` in **one dedicated thread**, which owns every libp2p object, and gives
asyncio two ways in:

* `TrioThread.run_trio` (``await bridge.run_trio(afn, *args)``): the coroutine function
  is started in the run's nursery (``TrioToken.run_sync_soon``, thread-safe and
  non-blocking) and its result or exception resolves an asyncio future through
  ``loop.call_soon_threadsafe``. No thread is blocked per call (unlike
  ``asyncio.to_thread(trio.from_thread.run, ...)``, which would pin an executor thread
  for the duration of each transfer). Cancelling the awaiting asyncio task cancels the
  trio side through its `trio.CancelScope`.
* `TrioThread.run_sync`: a quick sync function run in the trio thread, blocking the
  caller for one hop.

A run goes: `launch` starts the thread with the host's trio main; that main calls
`attach` with its nursery once libp2p runs, then `serve_until_stopped`, which reports
the run as started and waits for `halt`. When a run ends without `halt` having been
asked for, ``on_unexpected_end`` is told why (one line) and `finished` is set all the
same, which is what the restart supervisor waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from p2p.errors import HostError, HostNotRunning
from p2p.libp2p.pubsub_guard import describe_exception

__all__ = ["TrioThread"]

log = logging.getLogger(__name__)

T = TypeVar("T")

TrioMain = Callable[[], Awaitable[None]]
"""The trio coroutine function one run executes (it calls `attach`, then
`serve_until_stopped`)."""


class _Call:
    """One `TrioThread.run_trio` call: its trio cancel scope (created unbound up front)."""

    __slots__ = ("scope",)

    def __init__(self) -> None:
        self.scope = trio.CancelScope()


class TrioThread:
    """Runs one trio run at a time in a dedicated thread, and the calls asyncio makes into it.

    Args:
        start_timeout_s / stop_timeout_s: how long `launch` and `halt` wait.
        on_unexpected_end: called (in the trio thread) with a one-line reason when a run
            ends although no stop was requested.
    """

    def __init__(
        self,
        start_timeout_s: float,
        stop_timeout_s: float,
        on_unexpected_end: Callable[[str], None],
    ) -> None:
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._on_unexpected_end = on_unexpected_end
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None
        self._stop_event: trio.Event | None = None
        self._started: asyncio.Future[None] | None = None
        #: Set when the current run's thread has ended (a stop or a failure).
        self.finished: asyncio.Event | None = None
        #: Whether the current run serves calls (started and not stopping).
        self.running = False
        #: A stop was asked for: the end of the run is not a failure.
        self.stop_requested = False
        #: `time.monotonic` when the current run started serving.
        self.up_since = 0.0

    @property
    def started(self) -> bool:
        """Whether a thread was ever launched (a host is started once)."""
        return self._thread is not None

    async def launch(self, main: TrioMain) -> None:
        """Start a thread running ``trio.run(main)``; return once it serves calls.

        Raises:
            HostError: the run failed or did not start in time (the thread is then
                stopped again); whatever ``main`` raised, as a `HostError`.
        """
        loop = self.loop = asyncio.get_running_loop()
        self.finished = asyncio.Event()
        self._started = started = loop.create_future()
        self._thread = threading.Thread(
            target=self._thread_main,
            args=(main, started, self.finished),
            name="p2p-trio",
            daemon=True,
        )
        self._thread.start()
        try:
            await asyncio.wait_for(asyncio.shield(started), self._start_timeout_s)
        except TimeoutError:
            await self.halt()
            raise HostError(f"libp2p host did not start in {self._start_timeout_s} s") from None
        except BaseException:
            await self.halt()
            raise
        self.up_since = time.monotonic()

    def _thread_main(
        self, main: TrioMain, started: asyncio.Future[None], finished: asyncio.Event
    ) -> None:
        loop = self.loop
        assert loop is not None
        try:
            trio.run(main)
        except BaseException as e:
            log.debug("libp2p trio thread ended with %r", e)
            if not self.stop_requested:
                self._on_unexpected_end(describe_exception(e))
            err = e if isinstance(e, HostError) else HostError(f"libp2p host failed: {e!r}")
            loop.call_soon_threadsafe(_set_exception_if_pending, started, err)
        else:
            if not self.stop_requested:
                self._on_unexpected_end("the libp2p services ended without an error")
        finally:
            self.running = False
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(finished.set)

    def attach(self, nursery: trio.Nursery) -> None:
        """Trio side, once libp2p runs: calls go to ``nursery`` from now on."""
        self.nursery = nursery
        self.token = trio.lowlevel.current_trio_token()
        self._stop_event = trio.Event()
        # A `halt` that came while this thread was starting saw no token yet.
        if self.stop_requested:
            self._stop_event.set()

    async def serve_until_stopped(self) -> None:
        """Trio side: report the run as started, wait for `halt`, then cancel the nursery."""
        assert self.nursery is not None and self._stop_event is not None
        assert self.loop is not None and self._started is not None
        self.running = True
        self.loop.call_soon_threadsafe(_set_result_if_pending, self._started, None)
        await self._stop_event.wait()
        self.running = False
        self.nursery.cancel_scope.cancel()

    async def halt(self) -> None:
        """Stop the current run, if any, and wait for its thread to end.

        Raises:
            HostError: the thread did not finish within ``stop_timeout_s``.
        """
        thread, token, event = self._thread, self.token, self._stop_event
        if thread is None:
            return
        self.running = False
        if token is not None and event is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(event.set)
        assert self.finished is not None
        try:
            await asyncio.wait_for(self.finished.wait(), self._stop_timeout_s)
        except TimeoutError:
            raise HostError(f"libp2p host did not stop in {self._stop_timeout_s} s") from None
        await asyncio.to_thread(thread.join, self._stop_timeout_s)
        self.token = None

    async def run_trio(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run trio coroutine function ``afn(*args)`` in the thread; await its result.

        Raises:
            HostNotRunning: no run serves calls, or it stopped during the call.
            Exception: whatever ``afn`` raises.
        """
        token, nursery, loop = self.token, self.nursery, asyncio.get_running_loop()
        if not self.running or token is None or nursery is None:
            raise HostNotRunning("libp2p host is not running")
        fut: asyncio.Future[T] = loop.create_future()
        call = _Call()

        async def runner() -> None:
            try:
                with call.scope:
                    result = await afn(*args)
                if call.scope.cancelled_caught:
                    raise HostNotRunning("call cancelled")
            except Exception as e:
                loop.call_soon_threadsafe(_set_exception_if_pending, fut, e)
            except BaseException:  # trio.Cancelled: the host is shutting down
                loop.call_soon_threadsafe(
                    _set_exception_if_pending, fut, HostNotRunning("libp2p host stopped")
                )
                raise
            else:
                loop.call_soon_threadsafe(_set_result_if_pending, fut, result)

        def spawn() -> None:
            try:
                nursery.start_soon(runner)
            except RuntimeError:  # nursery closed: the host is stopping
                loop.call_soon_threadsafe(
                    _set_exception_if_pending, fut, HostNotRunning("libp2p host stopped")
                )

        try:
            token.run_sync_soon(spawn)
        except trio.RunFinishedError:
            raise HostNotRunning("libp2p host stopped") from None
        try:
            return await fut
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(call.scope.cancel)
            raise

    def run_sync(self, fn: Callable[[], T]) -> T:
        """Run a quick sync function in the trio thread and return its result (blocking).

        Raises:
            HostNotRunning: no run serves calls.
        """
        token = self.token
        if not self.running or token is None:
            raise HostNotRunning("libp2p host is not running")
        try:
            return trio.from_thread.run_sync(fn, trio_token=token)
        except trio.RunFinishedError:
            raise HostNotRunning("libp2p host stopped") from None

    def start_soon_threadsafe(self, afn: Callable[[], Awaitable[None]]) -> None:
        """Start ``afn`` in the run's nursery from any thread (dropped when none runs)."""
        token, nursery = self.token, self.nursery
        if not self.running or token is None or nursery is None:
            return

        def spawn() -> None:
            with contextlib.suppress(RuntimeError):
                nursery.start_soon(afn)

        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(spawn)


def _set_result_if_pending(fut: asyncio.Future[T], value: T) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception_if_pending(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
