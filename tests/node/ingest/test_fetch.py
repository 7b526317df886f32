"""Fetch steps against a real local HTTP server and real files."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from fbs.model import (
    EnvVar,
    EventTimeSourceFromPath,
    EventTimeSourceFromSystemTime,
    FetchStepContainer,
    FetchStepFilesGlob,
    FetchStepMqtt,
    FetchStepUrl,
    MqttTopicSubscription,
    RequestHeader,
    SourceCachingForever,
    SourceOrdering,
    SourceState,
    Timestamp,
)
from node.ingest.errors import FetchError, SourceUnreachable, ToolMissing, UnsupportedFormat
from node.ingest.fetch import (
    STATE_ETAG,
    STATE_FETCHED_AT,
    STATE_FILES_GLOB_LAST,
    STATE_LAST_MODIFIED,
    FetchLimits,
    fetch,
)

NOW = Timestamp.parse_rfc3339("2024-05-01T00:00:00Z")
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


class _Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers))
        if self.path == "/etag.csv":
            if self.headers.get("If-None-Match") == '"v1"':
                self.send_response(304)
                self.end_headers()
                return
            self._ok(b"a,b\n1,2\n", {"ETag": '"v1"'})
        elif self.path == "/lm.csv":
            if self.headers.get("If-Modified-Since") == LAST_MODIFIED:
                self.send_response(304)
                self.end_headers()
                return
            self._ok(b"x\n", {"Last-Modified": LAST_MODIFIED})
        elif self.path == "/plain.csv":
            self._ok(b"p\n", {})
        elif self.path == "/big":
            self._ok(b"0" * 5000, {})
        else:
            self.send_response(404)
            self.end_headers()

    def _ok(self, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _fetch(step: Any, tmp_path: Path, prev: SourceState | None = None, **kw: Any) -> Any:
    return fetch(
        step, prev_state=prev, source_name="src", workdir=tmp_path / "work", system_time=NOW, **kw
    )


def test_etag_round_trip(server: str, tmp_path: Path) -> None:
    step = FetchStepUrl(
        url=f"{server}/etag.csv", headers=(RequestHeader(name="X-Token", value="t1"),)
    )
    first = _fetch(step, tmp_path)
    assert not first.up_to_date
    assert first.files[0].path.read_bytes() == b"a,b\n1,2\n"
    assert first.new_state == SourceState(source_name="src", kind=STATE_ETAG, value='"v1"')
    assert _Handler.seen[0]["X-Token"] == "t1"
    second = _fetch(step, tmp_path, first.new_state)
    assert second.up_to_date and second.files == () and second.new_state is None
    assert _Handler.seen[1]["If-None-Match"] == '"v1"'


def test_last_modified_and_event_time(server: str, tmp_path: Path) -> None:
    step = FetchStepUrl(url=f"{server}/lm.csv")
    first = _fetch(step, tmp_path)
    assert first.new_state.kind == STATE_LAST_MODIFIED
    assert first.files[0].event_time == Timestamp.parse_rfc3339("2015-10-21T07:28:00Z")
    assert _fetch(step, tmp_path, first.new_state).up_to_date
    sys_step = FetchStepUrl(url=f"{server}/lm.csv", event_time=EventTimeSourceFromSystemTime())
    assert _fetch(sys_step, tmp_path).files[0].event_time == NOW


def test_no_validators_refetches_unless_forever(server: str, tmp_path: Path) -> None:
    step = FetchStepUrl(url=f"{server}/plain.csv")
    first = _fetch(step, tmp_path)
    assert first.new_state is None and first.files[0].event_time is None
    forever = FetchStepUrl(url=f"{server}/plain.csv", cache=SourceCachingForever())
    once = _fetch(forever, tmp_path)
    assert once.new_state is not None and once.new_state.kind == STATE_FETCHED_AT
    hits = len(_Handler.seen)
    assert _fetch(forever, tmp_path, once.new_state).up_to_date
    assert len(_Handler.seen) == hits


def test_http_errors(server: str, tmp_path: Path) -> None:
    with pytest.raises(SourceUnreachable, match="404") as info:
        _fetch(FetchStepUrl(url=f"{server}/missing"), tmp_path)
    assert f"{server}/missing" in str(info.value)
    with pytest.raises(FetchError, match="exceeds the limit"):
        _fetch(
            FetchStepUrl(url=f"{server}/big"), tmp_path, limits=FetchLimits(max_download_bytes=100)
        )
    assert list((tmp_path / "work").iterdir()) == []


def test_unreachable_host(tmp_path: Path) -> None:
    # A port nothing listens on (bound then closed) on loopback.
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"http://127.0.0.1:{port}/x"
    with pytest.raises(SourceUnreachable, match=url):
        _fetch(FetchStepUrl(url=url), tmp_path)


def test_file_url(tmp_path: Path) -> None:
    p = tmp_path / "data.csv"
    p.write_text("a\n")
    os.utime(p, (1_600_000_000, 1_600_000_000))
    step = FetchStepUrl(url=p.as_uri())
    first = _fetch(step, tmp_path)
    assert first.files[0].path == p
    assert first.files[0].event_time == Timestamp(1_600_000_000 * 10**9)
    assert _fetch(step, tmp_path, first.new_state).up_to_date
    os.utime(p, (1_600_000_100, 1_600_000_100))
    assert not _fetch(step, tmp_path, first.new_state).up_to_date
    with pytest.raises(SourceUnreachable, match="no such file"):
        _fetch(FetchStepUrl(url=(tmp_path / "nope").as_uri()), tmp_path)


def test_files_glob_remembers_last(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    for name in ("b-2020-01-02.csv", "a-2020-01-03.csv"):
        (d / name).write_text("x\n")
    step = FetchStepFilesGlob(path=str(d / "*.csv"))
    first = _fetch(step, tmp_path)
    assert [f.path.name for f in first.files] == ["a-2020-01-03.csv", "b-2020-01-02.csv"]
    assert first.new_state.kind == STATE_FILES_GLOB_LAST
    assert json.loads(first.new_state.value)["path"].endswith("b-2020-01-02.csv")
    assert first.files[0].state != first.files[1].state
    assert _fetch(step, tmp_path, first.new_state).up_to_date
    (d / "c-2020-01-01.csv").write_text("y\n")
    again = _fetch(step, tmp_path, first.new_state)
    assert [f.path.name for f in again.files] == ["c-2020-01-01.csv"]


def test_files_glob_by_event_time_from_path(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    for name in ("b-2020-01-02.csv", "a-2020-01-03.csv", "c-2020-01-01.csv"):
        (d / name).write_text("x\n")
    step = FetchStepFilesGlob(
        path=str(d / "*.csv"),
        order=SourceOrdering.ByEventTime,
        event_time=EventTimeSourceFromPath(
            pattern=r"(\d{4}-\d{2}-\d{2})\.csv", timestamp_format="yyyy-MM-dd"
        ),
    )
    first = _fetch(step, tmp_path)
    assert [f.path.name[0] for f in first.files] == ["c", "b", "a"]
    assert first.files[0].event_time == Timestamp.parse_rfc3339("2020-01-01T00:00:00Z")
    (d / "z-2019-12-31.csv").write_text("late\n")
    assert _fetch(step, tmp_path, first.new_state).up_to_date
    (d / "d-2020-02-01.csv").write_text("new\n")
    assert [f.path.name for f in _fetch(step, tmp_path, first.new_state).files] == [
        "d-2020-02-01.csv"
    ]
    bad = FetchStepFilesGlob(
        path=str(d / "*.csv"), event_time=EventTimeSourceFromPath(pattern=r"(\d{8})")
    )
    with pytest.raises(FetchError, match="does not match"):
        _fetch(bad, tmp_path)


def test_container_tool_missing(tmp_path: Path) -> None:
    limits = FetchLimits(container_runtimes=("no-such-podman-xyz",))
    with pytest.raises(ToolMissing, match="no-such-podman-xyz"):
        _fetch(FetchStepContainer(image="busybox"), tmp_path, limits=limits)


def test_container_stdout_is_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in container runtime: prints its argv as JSON (the fetcher is real).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "fakepod"
    tool.write_text(
        '#!/bin/sh\nprintf \'%s\\n\' "$@"\n[ "$FAIL" = 1 ] && echo bad >&2 && exit 4\nexit 0\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOST_VAR", "from-host")
    step = FetchStepContainer(
        image="img:1",
        command=("fetch", "--all"),
        args=("x",),
        env=(
            EnvVar(name="A", value="1"),
            EnvVar(name="HOST_VAR"),
        ),
    )
    limits = FetchLimits(container_runtimes=("fakepod",))
    result = _fetch(step, tmp_path, limits=limits)
    argv = result.files[0].path.read_text().split("\n")[:-1]
    assert argv == [
        "run",
        "--rm",
        "-i",
        "-e",
        "A=1",
        "-e",
        "HOST_VAR=from-host",
        "--entrypoint",
        "fetch",
        "img:1",
        "--all",
        "x",
    ]
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(FetchError, match="exited with 4: bad"):
        _fetch(step, tmp_path, limits=limits)


def test_unsupported_steps(tmp_path: Path) -> None:
    mqtt = FetchStepMqtt(host="h", port=1, topics=(MqttTopicSubscription(path="t"),))
    with pytest.raises(UnsupportedFormat):
        _fetch(mqtt, tmp_path)
    with pytest.raises(UnsupportedFormat, match="ftp"):
        _fetch(FetchStepUrl(url="ftp://x/y"), tmp_path)
