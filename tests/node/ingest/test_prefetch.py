"""Read-ahead (`node.ingest.prefetch`): order, errors in place, bounded, stopped on close."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from node.ingest.prefetch import prefetched


def test_items_arrive_in_order() -> None:
    assert list(prefetched(lambda: iter(range(1000)), depth=3)) == list(range(1000))


def test_an_error_is_raised_after_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("bad row")

    got: list[int] = []
    with pytest.raises(ValueError, match="bad row"):
        for item in prefetched(source):
            got.append(item)
    assert got == [1, 2]


def test_an_error_creating_the_source_is_raised() -> None:
    def make() -> Iterator[int]:
        raise OSError("cannot open")

    with pytest.raises(OSError, match="cannot open"):
        list(prefetched(make))


def test_the_producer_runs_at_most_depth_items_ahead() -> None:
    produced: list[int] = []
    wait = threading.Event()

    def source() -> Iterator[int]:
        for i in range(100):
            produced.append(i)
            yield i

    items = prefetched(source, depth=2)
    assert next(items) == 0
    wait.wait(0.5)  # give the producer every chance to run ahead
    # 0 consumed, 2 queued, one more produced and waiting for room
    assert len(produced) <= 4
    items.close()


def test_closing_the_consumer_stops_and_closes_the_source_on_its_thread() -> None:
    closed_on: list[str] = []
    started = threading.Event()

    def source() -> Iterator[int]:
        try:
            for i in range(10**9):
                started.set()
                yield i
        finally:
            closed_on.append(threading.current_thread().name)

    items = prefetched(source, depth=2)
    assert next(items) == 0
    assert started.is_set()
    items.close()  # returns once the worker has stopped
    assert closed_on == ["ingest-read"]
    assert not any(t.name == "ingest-read" for t in threading.enumerate())
