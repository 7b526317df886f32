"""`storage.lockfile`: one flock helper for threads, processes and asyncio code."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path

import pytest

from storage.lockfile import FileLock, file_lock, file_lock_async


def test_exclusive_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    a, b = FileLock(tmp_path / "x.lock"), FileLock(tmp_path / "x.lock")
    assert a.try_acquire()
    assert a.held
    assert not b.try_acquire()
    assert not b.acquire(timeout=0.05)
    a.release()
    assert b.try_acquire()
    b.release()
    a.release()  # idempotent


def test_shared_locks_coexist_and_exclude_an_exclusive_one(tmp_path: Path) -> None:
    path = tmp_path / "use"
    s1, s2 = FileLock(path, shared=True), FileLock(path, shared=True)
    assert s1.try_acquire() and s2.try_acquire()
    assert not FileLock(path).try_acquire()
    s1.release()
    s2.release()
    assert FileLock(path).try_acquire()


def test_a_held_lock_is_not_reentrant(tmp_path: Path) -> None:
    with FileLock(tmp_path / "x.lock") as lock, pytest.raises(RuntimeError):
        lock.try_acquire()


def test_context_manager_yields_whether_it_was_taken(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with file_lock(path, timeout=0) as first:
        assert first
        with file_lock(path, timeout=0.02) as second:
            assert not second
    with file_lock(path, timeout=0) as again:
        assert again


def test_async_waiter_gets_the_lock_once_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = FileLock(path)
    assert holder.try_acquire()

    async def main() -> tuple[bool, bool]:
        async with file_lock_async(path, timeout=0.02) as busy:
            pass
        asyncio.get_running_loop().call_later(0.05, holder.release)
        async with file_lock_async(path, timeout=5) as taken:
            return busy, taken

    assert asyncio.run(main()) == (False, True)


def _hold(path: str, ready: multiprocessing.synchronize.Event) -> None:
    lock = FileLock(Path(path))
    lock.acquire()
    ready.set()
    time.sleep(60)  # killed by the test: the kernel drops the lock


def test_the_kernel_drops_the_lock_of_a_dead_process(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(path), ready))
    proc.start()
    try:
        assert ready.wait(30)
        assert not FileLock(path).try_acquire()
    finally:
        proc.kill()
        proc.join()
    assert FileLock(path).acquire(timeout=5)
