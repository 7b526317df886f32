"""The web UI of every node of a real devnet, against what the CLI says on the same node.

Three ``odf node run`` processes on loopback and the shared Spark engine: a publisher
holding a root and a windowed derivative (a one-day tumbling window over the root, run
by ``odf pull`` on the engine), and two validators bootstrapped to it (``--validator
--follow all``) that replicate both, re-check every data block (the derivative replayed
on the engine) and gossip signed attestations. On each node, every page renders in
chromium with no console message; the lineage graph draws the inputs and readers ``odf
log -o json`` names; the attestation table lists exactly what ``odf attestations -o
json`` lists (validator, block, verdict), with the dispute status.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.conftest import EngineProcess
from tests.node.web.helpers import (
    EXAMPLES,
    ROOT,
    RunningNode,
    console_problems,
    odf,
    running_node,
    screenshot,
    wait_until,
)
from tests.node.web.test_browser import dataset_path, live_badge, open_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WINDOWED = "demo.cities-per-day"
WINDOWED_MANIFEST = f"""kind: DatasetSnapshot
version: 1
content:
  name: {WINDOWED}
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: {ROOT}
      alias: cities
    transform:
      kind: Sql
      engine: spark
      query: >-
        SELECT window(event_time, '1 day').start AS event_time, count(*) AS cities,
        sum(population) AS population FROM cities GROUP BY window(event_time, '1 day')
"""
#: Replication, replay on Spark and gossip on a busy machine: slow, not wrong.
SETTLE_S = 480.0


@dataclass(frozen=True)
class Devnet:
    publisher: RunningNode
    validators: tuple[RunningNode, RunningNode]
    env: dict[str, str]

    @property
    def nodes(self) -> tuple[RunningNode, ...]:
        return (self.publisher, *self.validators)


def cli_json(node: RunningNode, env: dict[str, str], *args: str) -> Any:
    return json.loads(odf(node.ws, *args, "-o", "json", env=env))


@pytest.fixture(scope="module")
def devnet(
    tmp_path_factory: pytest.TempPathFactory, engine_process: EngineProcess
) -> Iterator[Devnet]:
    base = tmp_path_factory.mktemp("devnet")
    env = {"ODF_ENGINE_ADDRESS": engine_process.address}
    roots = [base / name for name in ("publisher", "validator1", "validator2")]
    for ws in roots:
        ws.mkdir()
        odf(ws, "init")
    (roots[0] / "windowed.yaml").write_text(WINDOWED_MANIFEST)
    odf(roots[0], "add", str(EXAMPLES / "city-populations.yaml"), str(roots[0] / "windowed.yaml"))
    with contextlib.ExitStack() as stack:
        pub = stack.enter_context(running_node(roots[0], env=env))
        joining = ("--validator", "--follow", "all", "--bootstrap", pub.bootstrap)
        v1, v2 = (stack.enter_context(running_node(ws, *joining, env=env)) for ws in roots[1:])
        wait_until(lambda: len(pub.get_json("/api/peers")) >= 2, "the validators' connections")
        # Committed by other processes: the node signs and gossips each new head.
        odf(roots[0], "ingest", ROOT, str(EXAMPLES / "city-populations.csv"), env=env)
        odf(roots[0], "pull", WINDOWED, env=env)
        net = Devnet(pub, (v1, v2), env)
        what = "replication and both validators' attestations"
        wait_until(lambda: settled(net), what, SETTLE_S, pause=2.0)
        yield net


def data_blocks(node: RunningNode, env: dict[str, str], alias: str) -> set[str]:
    """The blocks of ``alias`` that carry data (the ones validators attest)."""
    log = cli_json(node, env, "log", alias)
    kinds = ("AddData", "ExecuteTransform")
    return {b["blockHash"] for b in log if b["block"]["event"]["kind"] in kinds}


def settled(net: Devnet) -> bool:
    """Every node holds both datasets at the publisher's head, and attestations of both
    validators for every data block."""
    heads = {r["alias"]: r["head"] for r in net.publisher.get_json("/api/datasets")}
    for node in net.nodes:
        held = {r["alias"]: r["head"] for r in node.get_json("/api/datasets")}
        if any(held.get(alias) != heads.get(alias) for alias in (ROOT, WINDOWED)):
            return False
        for alias in (ROOT, WINDOWED):
            rows = cli_json(node, net.env, "attestations", alias)["attestations"]
            blocks = data_blocks(net.publisher, net.env, alias)
            by_block = {b: {r["validator"] for r in rows if r["block"] == b} for b in blocks}
            if not blocks or any(len(v) < 2 for v in by_block.values()):
                return False
    return True


def page_attestations(browser: Any) -> list[tuple[str, int, str, str]]:
    """(validator, block number, block hash, verdict) of the dataset page's table."""
    out = []
    for tr in browser.find_elements(By.CSS_SELECTOR, "tr[class^=verdict-]"):
        cells = tr.find_elements(By.TAG_NAME, "td")
        codes = tr.find_elements(By.TAG_NAME, "code")
        validator, block = (c.get_attribute("title") for c in codes)
        out.append((validator, int(cells[1].text), block, cells[3].text))
    return sorted(out)


def cli_attestations(node: RunningNode, env: dict[str, str], alias: str) -> Any:
    doc = cli_json(node, env, "attestations", alias)
    rows = sorted((r["validator"], r["seq"], r["block"], r["verdict"]) for r in doc["attestations"])
    return rows, doc["disputed"]


def graph_links(browser: Any) -> set[str]:
    """The datasets the lineage graph links to (by alias)."""
    svg = browser.find_element(By.CSS_SELECTOR, "svg.lineage")
    hrefs = [a.get_dom_attribute("href") for a in svg.find_elements(By.CSS_SELECTOR, "a.lin-node")]
    return {urllib.parse.parse_qs(urllib.parse.urlparse(h).query)["ds"][0] for h in hrefs}


def cli_inputs(node: RunningNode, env: dict[str, str], alias: str) -> set[str]:
    """The aliases of ``alias``'s transform inputs, from ``odf log`` and ``odf list``."""
    by_id = {d["id"]: d["alias"] for d in cli_json(node, env, "list")}
    refs = {
        i["datasetRef"]
        for b in cli_json(node, env, "log", alias)
        if b["block"]["event"]["kind"] == "SetTransform"
        for i in b["block"]["event"]["inputs"]
    }
    return {by_id.get(r, r) for r in refs}


def test_every_page_of_every_node_renders_without_a_console_message(
    devnet: Devnet, browser: Any
) -> None:
    pages = ("/ui/", dataset_path(ROOT), dataset_path(WINDOWED), "/ui/sql", "/ui/network")
    query = f'SELECT population FROM "{WINDOWED}"'
    for node in devnet.nodes:
        for path in (*pages, "/ui/sql?" + urllib.parse.urlencode({"q": query})):
            open_page(browser, node, path)
            assert browser.find_elements(By.TAG_NAME, "h1"), (node.url, path)
            if path in ("/ui/", dataset_path(ROOT)):
                wait_until(lambda: live_badge(browser) == "live", "the event stream")
            assert console_problems(browser) == [], (node.url, path)
        # The windowed derivative's one closed window (2020-01-01: A, B, C), on every node.
        assert browser.find_elements(By.CSS_SELECTOR, "#sql-table tbody tr"), node.url
        assert browser.find_element(By.CSS_SELECTOR, "#sql-table tbody").text == "6000"


def test_lineage_graph_draws_what_the_cli_names(devnet: Devnet, browser: Any) -> None:
    for node in devnet.nodes:
        inputs = cli_inputs(node, devnet.env, WINDOWED)
        assert inputs == {ROOT}
        open_page(browser, node, dataset_path(WINDOWED))
        assert graph_links(browser) == inputs
        open_page(browser, node, dataset_path(ROOT))  # and, from the root, its reader
        assert graph_links(browser) == {WINDOWED}
        assert console_problems(browser) == []


def test_attestation_status_is_what_the_cli_lists(
    devnet: Devnet, browser: Any, shots: Path
) -> None:
    validators: set[str] = set()
    for node in devnet.nodes:
        for alias in (ROOT, WINDOWED):
            rows, disputed = cli_attestations(node, devnet.env, alias)
            open_page(browser, node, dataset_path(alias))
            assert page_attestations(browser) == rows, (node.url, alias)
            assert ("Disputed:" in browser.page_source) == disputed
            assert not disputed
            assert {r[3] for r in rows} == {"reproduced"}
            validators |= {r[0] for r in rows}
            if node is devnet.publisher and alias == WINDOWED:
                trust = browser.find_element(By.ID, "trust")
                screenshot(browser, "attestations", shots, trust)
    assert len(validators) == 2
