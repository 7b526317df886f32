"""The UI inside a real ``odf node run``: an open event stream does not hold up SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.node.web.helpers import odf, running_node

pytestmark = pytest.mark.timeout(120)


def test_sigterm_ends_open_event_streams_and_the_node(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    odf(ws, "init")
    with running_node(ws) as node:
        stream = urllib.request.urlopen(node.url + "/ui/events", timeout=30)
        assert stream.readline() == b"retry: 1000\n"
        ended = threading.Event()

        def drain() -> None:
            while stream.readline():
                pass
            ended.set()

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        started = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 10.0
        assert ended.wait(5), "the stream was not closed"
        stream.close()
