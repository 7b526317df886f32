"""`node.worker_threads.WorkerThreads`: a stopping daemon waits for its blocking calls.

`asyncio.to_thread` leaves the thread running when its task is cancelled; the daemon's
calls write files, so ``stop()`` returning before they end let a write land after the
node said it stopped (a CI failure: a ``.pending-*`` file after ``stop``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from pathlib import Path

import pytest

from node.worker_threads import WorkerThreads

pytestmark = pytest.mark.anyio


def _slow_write(started: threading.Event, release: threading.Event, path: Path) -> str:
    started.set()
    release.wait(10)
    path.write_text("done")
    return "ok"


async def test_close_waits_for_a_call_whose_task_was_cancelled(tmp_path: Path) -> None:
    threads = WorkerThreads()
    started, release = threading.Event(), threading.Event()
    out = tmp_path / "out"
    task = asyncio.create_task(threads.run(_slow_write, started, release, out))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert threads.inflight == 1 and not out.exists()  # the thread still runs
    closing = asyncio.create_task(threads.close(timeout=10))
    await asyncio.sleep(0.05)
    assert not closing.done()  # close is waiting for it ...
    release.set()
    assert await closing == 0
    assert out.read_text() == "done"  # ... and returned only after the write
    assert threads.inflight == 0


async def test_close_drops_queued_calls_and_refuses_new_ones(tmp_path: Path) -> None:
    threads = WorkerThreads(max_workers=1)
    started, release = threading.Event(), threading.Event()
    first = asyncio.create_task(threads.run(_slow_write, started, release, tmp_path / "a"))
    await asyncio.to_thread(started.wait, 10)
    queued = asyncio.create_task(
        threads.run(_slow_write, threading.Event(), threading.Event(), tmp_path / "b")
    )
    await asyncio.sleep(0)
    closing = asyncio.create_task(threads.close(timeout=10))
    await asyncio.sleep(0.05)
    assert threads.stopping.is_set()
    release.set()
    assert await closing == 0
    assert await first == "ok"
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert not (tmp_path / "b").exists()  # never started
    with pytest.raises(asyncio.CancelledError):
        await threads.run(time.sleep, 0)


async def test_close_gives_up_after_its_timeout(tmp_path: Path) -> None:
    threads = WorkerThreads()
    started, release = threading.Event(), threading.Event()
    task = asyncio.create_task(threads.run(_slow_write, started, release, tmp_path / "x"))
    await asyncio.to_thread(started.wait, 10)
    assert await threads.close(timeout=0.05) == 1
    release.set()
    assert await task == "ok"


VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def test_calls_see_the_callers_context_variables() -> None:
    threads = WorkerThreads()
    VAR.set("daemon")
    assert await threads.run(VAR.get) == "daemon"
    await threads.close()
