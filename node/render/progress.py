"""A one-line status on a terminal while a long step runs (engine start, transform, transfer).

Shown on stderr only when it is a terminal and progress is not turned off (the global
``odf --no-progress``, or ``ODF_NO_PROGRESS=1``): piped output and logs stay clean. The
line names the step and its elapsed seconds, is redrawn in place about twice a second by
a daemon thread, and is erased when the step ends, so the command's own output is what
remains on screen.

    with progress.step("transform demo.daily"):
        run_transform()

A step can say what it is doing now (``status.update("engine starting")``); a transfer's
line callback (`lines`) shows each line as the step's text instead of scrolling.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final, TextIO

__all__ = ["NO_PROGRESS_ENV", "Status", "disable", "enabled", "lines", "step"]

#: Environment variable that turns progress off (set by ``odf --no-progress`` too, so
#: that processes it starts stay quiet as well).
NO_PROGRESS_ENV: Final = "ODF_NO_PROGRESS"

#: Seconds between redraws of the status line.
REDRAW_S: Final = 0.5

#: Widest status line drawn (longer text is cut, so the line never wraps and the
#: carriage return always goes back to its start).
MAX_WIDTH: Final = 78


def disable() -> None:
    """Turn progress off for this process and the processes it starts."""
    os.environ[NO_PROGRESS_ENV] = "1"


def enabled(stream: TextIO | None = None) -> bool:
    """Whether a status line would be shown on ``stream`` (default: stderr)."""
    out = sys.stderr if stream is None else stream
    if os.environ.get(NO_PROGRESS_ENV, "") not in ("", "0"):
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class Status:
    """The status line of one running step (a no-op when progress is not shown)."""

    def __init__(self, text: str, stream: TextIO | None, shown: bool) -> None:
        self._text = text
        self._stream = sys.stderr if stream is None else stream
        self._shown = shown
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def shown(self) -> bool:
        """Whether the line is drawn (a terminal, progress on)."""
        return self._shown

    def update(self, text: str) -> None:
        """Say what the step is doing now."""
        with self._lock:
            self._text = text
        self._draw()

    def _draw(self) -> None:
        if not self._shown:
            return
        with self._lock:
            elapsed = time.monotonic() - self._start
            line = f"odf: {self._text} ({elapsed:.0f}s)"[:MAX_WIDTH]
            try:
                self._stream.write("\r\x1b[2K" + line)
                self._stream.flush()
            except (OSError, ValueError):
                self._shown = False

    def _run(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self._draw()

    def start(self) -> None:
        if not self._shown:
            return
        self._draw()
        self._thread = threading.Thread(target=self._run, name="odf-progress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop redrawing and erase the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            with self._lock, contextlib.suppress(OSError, ValueError):
                self._stream.write("\r\x1b[2K")
                self._stream.flush()


@contextlib.contextmanager
def step(text: str, stream: TextIO | None = None) -> Iterator[Status]:
    """A status line naming ``text`` and its elapsed time while the block runs."""
    status = Status(text, stream, enabled(stream))
    status.start()
    try:
        yield status
    finally:
        status.close()


def lines(status: Status) -> Callable[[str], None]:
    """A line callback (a transfer's ``on_progress``) that shows each line on ``status``."""
    return status.update
