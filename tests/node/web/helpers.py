"""A real ``odf node run`` holding a root and a derivative, and a real headless chromium.

Chromium and its driver are Debian's (``/usr/bin/chromium``, ``/usr/bin/chromedriver``,
installed by ``scripts/setup``), driven by selenium with the driver's path given, so
nothing is downloaded. Without them the browser tests skip, except in CI (``$CI`` set),
where they fail: CI must run them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "node" / "examples"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = "demo.city-populations"
DERIVATIVE = "demo.big-cities"
MANY = "demo.many-cities"
#: A derivative of the derivative: two steps of lineage from the root.
SECOND = "demo.biggest-cities"
SECOND_MANIFEST = f"""kind: DatasetSnapshot
version: 1
content:
  name: {SECOND}
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: {DERIVATIVE}
      alias: big
    transform:
      kind: Sql
      engine: spark
      query: SELECT event_time, city, population FROM big WHERE population >= 2500
"""
MANY_ROWS = 120
#: Where the main pages' screenshots go when ``ODF_WEB_SCREENSHOTS=1`` (README "Web UI").
SCREENSHOTS = REPO / "docs" / "screenshots"
WAIT_S = 30.0


def odf(
    ws: Path, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    """``odf ARGS`` in workspace ``ws`` (``env`` on top of this process's); its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        cwd=ws,
        capture_output=True,
        input=stdin,
        env={**os.environ, **env} if env else None,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def wait_until(
    cond: Callable[[], bool], what: str, timeout: float = WAIT_S, pause: float = 0.02
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(pause)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def many_rows_csv(n: int) -> bytes:
    lines = ["event_time,city,population"]
    lines += [f"2022-01-01T00:00:00Z,city-{i:04d},{1000 + i}" for i in range(n)]
    return ("\n".join(lines) + "\n").encode()


def build_workspace(ws: Path) -> None:
    """A root with 5 records, a derivative reading it and one reading that (neither run:
    no Spark here), a root with `MANY_ROWS` records."""
    ws.mkdir(parents=True)
    odf(ws, "init")
    manifest = (EXAMPLES / "city-populations.yaml").read_text()
    (ws / "many.yaml").write_text(manifest.replace(f"name: {ROOT}", f"name: {MANY}"))
    odf(ws, "add", str(EXAMPLES / "city-populations.yaml"), str(EXAMPLES / "big-cities.yaml"))
    (ws / "second.yaml").write_text(SECOND_MANIFEST)
    odf(ws, "add", str(ws / "many.yaml"), str(ws / "second.yaml"))
    odf(ws, "ingest", ROOT, str(EXAMPLES / "city-populations.csv"))
    odf(ws, "ingest", MANY, "--stdin", stdin=many_rows_csv(MANY_ROWS))


@dataclass
class RunningNode:
    """``odf node run`` on workspace ``ws``, its HTTP API at ``url``."""

    ws: Path
    url: str
    proc: subprocess.Popen[bytes]

    @property
    def token(self) -> str:
        return (self.ws / ".odf" / "p2p" / "http-token").read_text().strip()

    @property
    def bootstrap(self) -> str:
        """The libp2p address another node bootstraps to (``.../p2p/PEER_ID``)."""
        addr: str = self.get_json("/api/status")["addrs"][0]
        return addr

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def head(self, alias: str) -> str:
        """``alias``'s head as the node's ``/api/datasets`` reports it."""
        for row in self.get_json("/api/datasets"):
            if row["alias"] == alias:
                head: str = row["head"]
                return head
        raise AssertionError(f"{alias} not on the node")

    def ingest(self, alias: str, csv: bytes) -> str:
        """Push ``csv`` into ``alias`` over the API (with the token); the new head."""
        req = urllib.request.Request(
            f"{self.url}/{alias}/ingest?format=csv",
            data=csv,
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "text/csv"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            head: str = json.loads(r.read())["newHead"]
            return head


@contextlib.contextmanager
def running_node(
    ws: Path, *args: str, env: Mapping[str, str] | None = None
) -> Iterator[RunningNode]:
    """``odf node run`` on ``ws`` with ``args`` added (``--bootstrap``, ``--follow``,
    ``--validator``...) and ``env`` on top of this process's environment; stopped (SIGTERM,
    then SIGKILL) when the block ends."""
    port = free_port()
    (ws / "node.yaml").write_text(f"http: {{host: 127.0.0.1, port: {port}}}\nlog_level: info\n")
    log = open(ws / "node.log", "ab")  # noqa: SIM115 - closed below
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "node.cli",
            "--workspace",
            str(ws),
            "node",
            "run",
            "-q",
            "--config",
            str(ws / "node.yaml"),
            *args,
        ],
        cwd=REPO,
        stdout=log,
        stderr=log,
        env=env,
    )
    node = RunningNode(ws, f"http://127.0.0.1:{port}", proc)
    try:
        wait_until(lambda: _answers(node), "the node's HTTP API")
        yield node
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


def _answers(node: RunningNode) -> bool:
    assert node.proc.poll() is None, (node.ws / "node.log").read_text()[-3000:]
    try:
        node.get_json("/api/status")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    return True


def require_chromium() -> None:
    """Skip when chromium is missing, except in CI, where the tests must run."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    missing = "chromium and chromium-driver (Debian packages; scripts/setup installs them)"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests: install {missing}")
    pytest.skip(f"not installed: {missing}")


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium with a fresh profile, logging console and network events."""
    require_chromium()
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="odf-web-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromium and the chromedriver process it started
        shutil.rmtree(profile, ignore_errors=True)


def console_problems(driver: Any) -> list[dict[str, Any]]:
    """Console messages of level WARNING or worse since the last call."""
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def requests_sent(driver: Any) -> list[tuple[str, str, dict[str, str]]]:
    """(method, url, headers) of every request the pages sent since the last call."""
    out = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            req = msg["params"]["request"]
            out.append((req["method"], req["url"], req.get("headers", {})))
    return out


def requests_made(driver: Any) -> list[tuple[str, str]]:
    """(method, url) of every request the pages sent since the last call."""
    return [(m, u) for m, u, _h in requests_sent(driver)]


def screenshot(driver: Any, name: str, tmp: Path, element: Any = None) -> Path:
    """Save the page (or only ``element``); into `SCREENSHOTS` when ``ODF_WEB_SCREENSHOTS=1``."""
    folder = SCREENSHOTS if os.environ.get("ODF_WEB_SCREENSHOTS") == "1" else tmp
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    saved = driver.save_screenshot(str(path)) if element is None else element.screenshot(str(path))
    assert saved
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path
