"""The web UI's dataset list on a node holding many datasets, measured in a real browser.

Usage: .venv/bin/python scripts/bench/web.py [--datasets 1000] [--repeat 7] [--keep DIR]

Builds a workspace of ``--datasets`` root datasets (the demo manifest under numbered
names, added by one ``odf add -r``; each gets the demo CSV ingested in-process, so every
list row has a head, records, a size and a watermark), starts ``odf node run`` on it and
opens ``/ui/`` in headless chromium (Debian's, as the tests use it) ``--repeat`` times,
each a fresh navigation. Printed, median and spread, from the browser's own timings
(Navigation Timing and Paint Timing, milliseconds from the start of the navigation):

* ``ttfb``: the first byte of the page (the server reading every dataset's state);
* ``body`` / ``dom``: the last byte of the page / the document parsed;
* ``fcp``: first contentful paint: the first render of the list (target <= 300 ms);
* ``load``: the load event (script and stylesheet included).

Also the baseline of the same run: ``/api/datasets`` (the JSON the page replaces) fetched
by the same browser, so the cost of the page over the API's own read shows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
EXAMPLES = REPO / "node" / "examples"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def odf(ws: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "node.cli", *args], cwd=ws, check=True, stdout=subprocess.DEVNULL
    )


def build(ws: Path, n: int) -> None:
    """``n`` root datasets ``bench.web-NNNN``, each with the demo CSV ingested."""
    from node.api import open_workspace

    ws.mkdir(parents=True)
    odf(ws, "init")
    manifests = ws / "manifests"
    manifests.mkdir()
    text = (EXAMPLES / "city-populations.yaml").read_text()
    names = [f"bench.web-{i:04d}" for i in range(n)]
    for name in names:
        (manifests / f"{name}.yaml").write_text(text.replace("demo.city-populations", name))
    odf(ws, "add", "-r", str(manifests))
    api = open_workspace(ws)
    started = time.monotonic()
    for name in names:
        api.dataset(name).ingest([EXAMPLES / "city-populations.csv"])
    api.close()
    print(f"built {n} datasets, ingested in {time.monotonic() - started:.1f} s", file=sys.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def node(ws: Path) -> Iterator[str]:
    port = free_port()
    (ws / "node.yaml").write_text(f"http: {{host: 127.0.0.1, port: {port}}}\n")
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
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/api/status", timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the node did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="odf-bench-web-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
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
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


TIMINGS_JS = """
const nav = performance.getEntriesByType("navigation")[0];
const fcp = performance.getEntriesByName("first-contentful-paint")[0];
return {ttfb: nav.responseStart, body: nav.responseEnd, dom: nav.domInteractive,
        fcp: fcp ? fcp.startTime : null, load: nav.loadEventEnd,
        rows: document.querySelectorAll("#datasets tbody tr").length,
        datasets: Number(document.getElementById("count").textContent)};
"""


def measure(driver: Any, url: str) -> dict[str, float]:
    driver.get("about:blank")
    driver.get(url)
    for _ in range(200):
        t = driver.execute_script(TIMINGS_JS)
        if t["load"] and t["fcp"] is not None:
            return dict(t)
        time.sleep(0.02)
    raise RuntimeError("no timings")


def api_ms(driver: Any, url: str) -> float:
    js = """const done = arguments[arguments.length - 1]; const t0 = performance.now();
    fetch("/api/datasets").then(r => r.json()).then(d => done(performance.now() - t0));"""
    driver.get(url + "/ui/static/app.css")  # same origin, a page that does nothing
    return float(driver.execute_async_script(js))


def summary(values: list[float]) -> str:
    mid, low, high = statistics.median(values), min(values), max(values)
    return f"median {mid:7.1f} ms  (min {low:.1f}, max {high:.1f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--datasets", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--keep", type=Path, help="build into (or reuse) this directory")
    args = p.parse_args()
    tmp = None
    if args.keep is None:
        tmp = tempfile.mkdtemp(prefix="odf-bench-web-")
        ws = Path(tmp) / "ws"
    else:
        ws = args.keep
    if not (ws / ".odf").exists():
        build(ws, args.datasets)
    try:
        with node(ws) as url, browser() as driver:
            # The node's first view reads every dataset's chain state; later views only
            # the datasets whose head moved (`node.web.views.RowCache`).
            cold = measure(driver, url + "/ui/")
            runs = [measure(driver, url + "/ui/") for _ in range(args.repeat)]
            api = [api_ms(driver, url) for _ in range(args.repeat)]
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    shown, total = int(runs[0]["rows"]), int(runs[0]["datasets"])
    print(f"list page of a node holding {total} datasets ({shown} rows on the first view)")
    print(
        f"  first view after the node started: ttfb {cold['ttfb']:.1f} ms, fcp {cold['fcp']:.1f} ms"
    )
    print(f"  then {args.repeat} fresh navigations:")
    for key in ("ttfb", "body", "dom", "fcp", "load"):
        print(f"    {key:5} {summary([r[key] for r in runs])}")
    print(f"    /api/datasets fetch (baseline) {summary(api)}")
    fcp = statistics.median(r["fcp"] for r in runs)
    print(json.dumps({"fcp_ms": round(fcp, 1), "target_ms": 300, "ok": fcp <= 300}))


if __name__ == "__main__":
    main()
