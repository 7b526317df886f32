"""The node's logs as people and machines read them (`node.daemon.log`).

Text on a terminal, JSON when asked or when stderr is not a terminal; datasets named
by alias in text (the DID at debug level, always in JSON); py-libp2p's internals only
at debug level, so one unreachable bootstrap peer is one line of ours. The process
tests run ``odf node run`` with stderr on a pseudo-terminal and on a file.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fbs.did import DatasetId
from node.daemon.log import (
    NOISY_LOGGERS,
    dataset_fields,
    event,
    resolve_format,
    setup_logging,
)
from p2p.libp2p.dial_errors import dial_failure_reason
from storage.workspace import Workspace
from tests.node.test_daemon_process import REPO, node, write_config
from tests.p2p.sync_helpers import make_dataset

pytestmark = pytest.mark.timeout(120)

#: A bootstrap peer nobody listens for (port 1 refuses connections on loopback).
DOWN = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWAbXQraVCSfmd5dyynaumqdFfBYheRzzCDuyUpowUczjR"
ODF = (sys.executable, "-m", "node.cli")
UNREACHABLE = "bootstrap peer unreachable, retrying in the background"


class _Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Undo `setup_logging`: the root's handlers and level, and every logger it sets."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    named = [logging.getLogger(n) for n in (*NOISY_LOGGERS, "multiaddr", "libp2p")]
    saved = [(lg, lg.level, lg.propagate, list(lg.handlers)) for lg in named]
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    for lg, lvl, propagate, hs in saved:
        lg.setLevel(lvl)
        lg.propagate = propagate
        lg.handlers[:] = hs


def test_auto_is_text_on_a_terminal_and_json_otherwise() -> None:
    assert resolve_format("auto", _Tty()) == "text"
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("json", _Tty()) == "json"
    assert resolve_format("text", io.StringIO()) == "text"
    closed = io.StringIO()
    closed.close()
    assert resolve_format("auto", closed) == "json"


def test_text_names_a_dataset_by_alias_and_json_by_did_too(
    tmp_path: Path, restore_logging: None
) -> None:
    ws = Workspace.init(tmp_path / "ws")
    did = DatasetId.from_did(make_dataset(ws, "demo.cities", tmp_path, slices=1).id)
    fields = dataset_fields(ws, did)
    assert fields == {"dataset": did.to_did_odf(), "alias": "demo.cities"}

    text = _Tty()
    setup_logging("info", "auto", text)
    event(logging.INFO, "pull done", **fields, seq=3, sources=["a", "b"], note=None)
    line = text.getvalue().strip()
    assert line.endswith("info    pull done  dataset=demo.cities seq=3 sources=a,b"), line
    assert did.to_did_odf() not in line

    verbose = _Tty()
    setup_logging("debug", "text", verbose)
    event(logging.INFO, "pull done", **fields, error="no peer serves it")
    line = verbose.getvalue().strip()
    assert f'dataset=demo.cities error="no peer serves it" did={did.to_did_odf()}' in line

    machine = io.StringIO()
    setup_logging("info", "auto", machine)
    event(logging.INFO, "pull done", **fields, seq=3)
    doc = json.loads(machine.getvalue())
    assert (doc["msg"], doc["dataset"], doc["alias"], doc["seq"]) == (
        "pull done",
        did.to_did_odf(),
        "demo.cities",
        3,
    )


def test_a_dataset_not_held_is_named_as_its_publisher_signed_it(tmp_path: Path) -> None:
    owner = Workspace.init(tmp_path / "owner")
    did = DatasetId.from_did(make_dataset(owner, "theirs", tmp_path, slices=1).id)
    here = Workspace.init(tmp_path / "here")
    assert dataset_fields(here, did, "alice/theirs")["alias"] == "alice/theirs"
    assert dataset_fields(here, did)["alias"] is None
    # Held here, the local alias wins over the publisher's name.
    assert dataset_fields(owner, did, "alice/theirs")["alias"] == "theirs"


def test_libp2p_internals_only_at_debug_level_as_debug(restore_logging: None) -> None:
    quiet = _Tty()
    setup_logging("info", "text", quiet)
    logging.getLogger("libp2p.transport.tcp.tcp").error("Failed to open TCP stream: refused")
    logging.getLogger("p2p.libp2p.host").warning("ours")
    assert "Failed to open" not in quiet.getvalue()
    assert "warning ours" in quiet.getvalue()

    loud = io.StringIO()
    setup_logging("debug", "json", loud)
    logging.getLogger("libp2p.transport.tcp.tcp").error("Failed to open TCP stream: refused")
    (doc,) = [json.loads(line) for line in loud.getvalue().splitlines()]
    assert (doc["level"], doc["logger"]) == ("debug", "libp2p.transport.tcp.tcp")
    # multiaddr logs from inside Multiaddr.__str__, under the lock of the handler formatting
    # the record: never at DEBUG, even at debug level (two handlers would deadlock).
    assert not logging.getLogger("multiaddr").isEnabledFor(logging.DEBUG)


def test_a_failed_dial_is_named_by_its_innermost_cause() -> None:
    from libp2p.exceptions import MultiError
    from libp2p.network.exceptions import SwarmException

    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")
    try:
        try:
            try:
                raise OSError("all attempts to connect to 127.0.0.1:1 failed") from refused
            except OSError as e:
                raise SwarmException("fail to open connection to peer X") from e
        except SwarmException as e:
            raise SwarmException("no addresses established a connection") from MultiError([e])
    except SwarmException as outer:
        assert dial_failure_reason(outer) == "connection refused"
    assert dial_failure_reason(SwarmException("plain")) == "plain"


class _PtyReader:
    """Everything a child writes to the pseudo-terminal ``master``, read in a thread."""

    def __init__(self, master: int) -> None:
        self._master = master
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: the child closed its side
                return
            if not data:
                return
            self._chunks.append(data)

    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace").replace("\r\n", "\n")


def _wait_for(read: Callable[[], str], what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while what not in read():
        assert time.monotonic() < deadline, f"no {what!r} in:\n{read()}"
        time.sleep(0.05)


def test_node_run_on_a_terminal_logs_text_one_line_per_unreachable_bootstrap(
    tmp_path: Path,
) -> None:
    root = tmp_path / "a"
    Workspace.init(root)
    cfg = write_config(tmp_path / "node.yaml")
    master, slave = pty.openpty()
    args = ["node", "run", "-q", "--config", str(cfg), "--bootstrap", DOWN]
    proc = subprocess.Popen(
        [*ODF, "--workspace", str(root), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    out = _PtyReader(master)
    try:
        _wait_for(out.text, "node started")
        time.sleep(3.0)  # several redials, each of them four py-libp2p errors
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        time.sleep(0.2)
        os.close(master)
    log = out.text()
    assert code == 0, log
    lines = [ln for ln in log.splitlines() if ln.strip()]
    assert lines and not any(ln.startswith("{") for ln in lines), log
    assert [ln for ln in lines if "bootstrap" in ln] == [
        next(ln for ln in lines if UNREACHABLE in ln)
    ], log
    assert f"addr={DOWN}" in log and 'error="connection refused"' in log
    assert "Failed to open TCP stream" not in log and "libp2p.transport" not in log


def test_node_run_logs_json_to_a_file_or_when_asked(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "node.yaml")
    for name, extra in (("file", ()), ("asked", ("--log-format", "json"))):
        root = tmp_path / name
        Workspace.init(root)
        with node(root, "--config", str(cfg), "--bootstrap", DOWN, *extra) as a:
            _wait_for(a.log_path.read_text, UNREACHABLE)
            assert a.terminate() == 0
        records = [json.loads(ln) for ln in a.log_path.read_text().splitlines() if ln.strip()]
        (line,) = [r for r in records if "bootstrap" in r["msg"]]
        assert (line["level"], line["msg"], line["addr"]) == ("warning", UNREACHABLE, DOWN)
        assert not any(r["logger"].startswith("libp2p") for r in records)
