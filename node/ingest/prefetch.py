"""Read ahead: an iterator's items produced on a thread while the consumer works.

An Append ingest reads (parses, converts) batches on the calling thread and hands each to
the slice writer, which waits at times for the previous batch's hash or row group. While
the caller waits nothing is parsed: `prefetched` moves the reading onto a thread, so the
parse of the next batches (pyarrow kernels release the GIL) overlaps with the writer's
work and waits. At most `PREFETCH_ITEMS` items wait in the queue, so memory stays
bounded by a few batches. Items and the producer's exception arrive in order; closing the
consumer (or an error in it) stops the producer and closes its iterator on its thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Final, TypeVar, cast

__all__ = ["PREFETCH_ITEMS", "prefetched"]

#: Items read ahead of the consumer (bounds memory: a few record batches).
PREFETCH_ITEMS: Final = 4
#: Seconds a blocked producer waits between checks that the consumer is still there.
_POLL_SECONDS: Final = 0.1

T = TypeVar("T")


class _Done:
    """End of the items (``error``: what the producer raised, if anything)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def prefetched(
    make: Callable[[], Iterator[T]], depth: int = PREFETCH_ITEMS
) -> Generator[T, None, None]:
    """The items of ``make()``, produced on a worker thread up to ``depth`` ahead.

    ``make`` is called on the worker (the iterator is created, run and closed there).
    An exception it raises is re-raised here after the items produced before it.
    """
    items: queue.Queue[object] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        error: BaseException | None = None
        try:
            source = make()
            try:
                for item in source:
                    if not put(item):
                        return
            finally:
                close = getattr(source, "close", None)
                if close is not None:
                    close()
        except BaseException as e:  # handed to the consumer, raised there
            error = e
        put(_Done(error))

    worker = threading.Thread(target=produce, name="ingest-read", daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if isinstance(item, _Done):
                if item.error is not None:
                    raise item.error
                return
            yield cast(T, item)
    finally:
        stop.set()
        worker.join()
