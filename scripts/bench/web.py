"""The web UI on a node holding many datasets, and a head reaching another node's page,
measured in a real browser.

Usage: .venv/bin/python scripts/bench/web.py [--datasets 1000] [--baseline 10]
       [--repeat 7] [--rounds 5] [--keep DIR]

Builds two workspaces of root datasets, ``--baseline`` and ``--datasets`` of them (the
demo manifest under numbered names, added by one ``odf add -r``; each gets the demo CSV
ingested in-process, so every list row has a head, records, a size and a watermark),
starts ``odf node run`` on each in turn and opens ``/ui/`` in headless chromium
(Debian's, as the tests use it): once as soon as the node answers, then ``--repeat``
fresh navigations. Printed side by side for both, median and spread, from the
browser's own timings (Navigation Timing and Paint Timing, milliseconds from the start
of the navigation):

* ``ttfb``: the first byte of the page (the server reading the rows it shows);
* ``body`` / ``dom``: the last byte of the page / the document parsed;
* ``fcp``: first contentful paint: the first render of the list (target <= 300 ms);
* ``load``: the load event (script and stylesheet included);
* ``api``: ``/api/datasets`` fetched by the same page (every dataset's row as JSON, from
  the row cache the pages share); its first fetch after the start (signed heads parsed
  and verified once) is printed apart.

Then the follower latency: a publisher node holding the demo root and a follower node
(``--bootstrap`` to it, ``--follow all``) whose list page is open; ``--rounds`` times,
a push ingest on the publisher, and the time from its answer (the head committed) to
the new head on the follower's open page (in-page, from a DOM observer's wall clock),
after signing, gossip, the follower's verified pull and its event stream.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
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
from dataclasses import dataclass
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
    return f"{mid:7.1f} ({low:.0f}-{high:.0f})"


@dataclass(frozen=True)
class ListFigures:
    """The list page's timings on one node (milliseconds)."""

    datasets: int
    shown: int
    first: dict[str, float]
    api_first: float
    runs: list[dict[str, float]]
    api: list[float]


def measure_node(driver: Any, ws: Path, repeat: int) -> ListFigures:
    with node(ws) as url:
        # As soon as the node answers: the row cache may still be filling (it is read in
        # the background as the server starts; a row not read yet is read by the view).
        first = measure(driver, url + "/ui/")
        # The first /api/datasets reads what the start-up fill has not (signed heads
        # parsed and verified); the rest is the node as it runs.
        api_first = api_ms(driver, url)
        runs = [measure(driver, url + "/ui/") for _ in range(repeat)]
        api = [api_ms(driver, url) for _ in range(repeat)]
    count, shown = int(runs[0]["datasets"]), int(runs[0]["rows"])
    return ListFigures(count, shown, first, api_first, runs, api)


SEEN_JS = """
window.__odfSeen = {};
const sel = arguments[0];
const note = () => {
  const c = document.querySelector(sel);
  if (c && !(c.title in window.__odfSeen)) { window.__odfSeen[c.title] = Date.now(); }
};
new MutationObserver(note).observe(document.body, {subtree: true, childList: true,
                                                    attributes: true});
note();
"""


def follower_latency(driver: Any, base: Path, rounds: int) -> list[tuple[float, float]]:
    """(ingest answered -> on the follower's page, ingest request) per round, ms."""
    from tests.node.web.helpers import ROOT, odf, running_node

    shutil.rmtree(base, ignore_errors=True)
    pub_ws, fol_ws = base / "publisher", base / "follower"
    for ws in (pub_ws, fol_ws):
        ws.mkdir(parents=True)
        odf(ws, "init")
    odf(pub_ws, "add", str(EXAMPLES / "city-populations.yaml"))
    out = []
    with contextlib.ExitStack() as stack:
        pub = stack.enter_context(running_node(pub_ws))
        fol = stack.enter_context(
            running_node(fol_ws, "--bootstrap", pub.bootstrap, "--follow", "all")
        )

        def publish(year: int) -> str:
            csv = f"event_time,city,population\n{year}-01-01T00:00:00Z,Z{year},1\n"
            return pub.ingest(ROOT, csv.encode())

        head = publish(2000)
        wait(lambda: any(r["head"] == head for r in fol.get_json("/api/datasets")), 120)
        driver.get(fol.url + "/ui/")
        wait(
            lambda: (
                driver.execute_script("return document.getElementById('live').textContent")
                == "live"
            ),
            30,
        )
        driver.execute_script(SEEN_JS, f'#datasets tr[data-alias="{ROOT}"] code')
        for k in range(rounds):
            asked = time.time()
            head = publish(2001 + k)
            answered = time.time()
            wait(functools.partial(shown, driver, head), 60)
            out.append((seen_at(driver, head) - answered * 1000, (answered - asked) * 1000))
            time.sleep(0.5)
    return out


def seen_at(driver: Any, head: str) -> Any:
    """When the follower's page first showed ``head`` (ms since the epoch, or None)."""
    return driver.execute_script("return window.__odfSeen[arguments[0]]", head)


def shown(driver: Any, head: str) -> bool:
    return seen_at(driver, head) is not None


def wait(cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.01)


def report(figures: list[ListFigures], latency: list[tuple[float, float]]) -> None:
    head = "".join(f"{f'{f.datasets} datasets ({f.shown} rows)':>26}" for f in figures)
    print(f"list page /ui/, median (min-max) ms{head}")
    print(
        f"  {'first view (node just up): ttfb':34}"
        + "".join(f"{f.first['ttfb']:26.1f}" for f in figures)
    )
    print(
        f"  {'first view (node just up): fcp':34}"
        + "".join(f"{f.first['fcp']:26.1f}" for f in figures)
    )
    print(f"  {'first /api/datasets fetch':34}" + "".join(f"{f.api_first:26.1f}" for f in figures))
    print("  then, as the node runs:")
    for key in ("ttfb", "body", "dom", "fcp", "load"):
        print(f"  {key:34}" + "".join(f"{summary([r[key] for r in f.runs]):>26}" for f in figures))
    print(f"  {'/api/datasets fetch':34}" + "".join(f"{summary(f.api):>26}" for f in figures))
    if latency:
        shown = [a for a, _ in latency]
        print(
            "head on a follower's open page after the publisher's ingest answered:",
            f"{summary(shown)} ms",
        )
        print(f"  (the push ingest itself: {summary([b for _, b in latency])} ms)")
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    many = figures[-1]
    fcp = statistics.median(r["fcp"] for r in many.runs)
    doc = {"datasets": many.datasets, "fcp_ms": round(fcp, 1), "target_ms": 300, "ok": fcp <= 300}
    if latency:
        doc["follower_ms"] = round(statistics.median(a for a, _ in latency), 1)
    print(json.dumps(doc))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--datasets", type=int, default=1000)
    p.add_argument("--baseline", type=int, default=10)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--rounds", type=int, default=5, help="follower latency rounds (0: none)")
    p.add_argument("--keep", type=Path, help="build into (or reuse) this directory")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="odf-bench-web-")) if args.keep is None else args.keep
    try:
        with browser() as driver:
            figures = []
            for n in (args.baseline, args.datasets):
                ws = base / f"ws{n}"
                if not (ws / ".odf").exists():
                    build(ws, n)
                figures.append(measure_node(driver, ws, args.repeat))
            latency = follower_latency(driver, base / "latency", args.rounds) if args.rounds else []
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    report(figures, latency)


if __name__ == "__main__":
    main()
