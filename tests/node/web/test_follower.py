"""A head published on one node shows on another node's open page, without a reload.

Two real ``odf node run`` processes on loopback: a publisher holding a root, a follower
bootstrapped to it with ``--follow all``. The follower's list page is open in chromium;
each push ingest on the publisher is signed, gossiped, replicated by the follower and
pushed to the open page over its event stream. Only that it arrives is asserted (with a
generous deadline: a busy machine is slow, not wrong); the latency is measured by
``scripts/bench/web.py``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.node.web.helpers import (
    EXAMPLES,
    ROOT,
    RunningNode,
    console_problems,
    odf,
    running_node,
    wait_until,
)
from tests.node.web.test_browser import live_badge, mark_page, open_page, still_same_page

pytestmark = pytest.mark.timeout(300)

REPLICATION_WAIT_S = 90.0


def row_head(browser: Any, alias: str) -> str | None:
    """The head on ``alias``'s row of the open list (read in the page: rows are swapped)."""
    head: str | None = browser.execute_script(
        "const c = document.querySelector(arguments[0]); return c && c.title;",
        f'#datasets tr[data-alias="{alias}"] code',
    )
    return head


def shows(browser: Any, alias: str, head: str) -> Callable[[], bool]:
    """Whether the open list shows ``head`` on ``alias``'s row (read in the page)."""
    return lambda: row_head(browser, alias) == head


def held_head(node: RunningNode, alias: str) -> str | None:
    for row in node.get_json("/api/datasets"):
        if row["alias"] == alias:
            head: str = row["head"]
            return head
    return None


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, RunningNode]]:
    base = tmp_path_factory.mktemp("follower")
    pub_ws, fol_ws = base / "publisher", base / "follower"
    for ws in (pub_ws, fol_ws):
        ws.mkdir()
        odf(ws, "init")
    odf(pub_ws, "add", str(EXAMPLES / "city-populations.yaml"))
    with contextlib.ExitStack() as stack:
        publisher = stack.enter_context(running_node(pub_ws))
        follow = ("--bootstrap", publisher.bootstrap, "--follow", "all")
        yield publisher, stack.enter_context(running_node(fol_ws, *follow))


def publish(publisher: RunningNode, year: int) -> str:
    csv = f"event_time,city,population\n{year}-01-01T00:00:00Z,Z{year},{year}\n".encode()
    return publisher.ingest(ROOT, csv)


def test_head_published_elsewhere_appears_on_the_open_list(
    pair: tuple[RunningNode, RunningNode], browser: Any
) -> None:
    publisher, follower = pair
    first = publish(publisher, 2030)
    wait_until(
        lambda: held_head(follower, ROOT) == first, "the first replication", REPLICATION_WAIT_S
    )
    open_page(browser, follower, "/ui/")
    wait_until(lambda: live_badge(browser) == "live", "the event stream")
    assert row_head(browser, ROOT) == first
    mark_page(browser)
    for year in (2031, 2032):
        new_head = publish(publisher, year)
        published = time.monotonic()
        wait_until(
            shows(browser, ROOT, new_head),
            "the publisher's new head on the follower's page",
            REPLICATION_WAIT_S,
        )
        print(f"head on the follower's open page {time.monotonic() - published:.2f} s after")
    assert still_same_page(browser)
    assert held_head(follower, ROOT) == held_head(publisher, ROOT)
    assert console_problems(browser) == []


def test_the_follower_s_dataset_page_follows_the_publisher(
    pair: tuple[RunningNode, RunningNode], browser: Any
) -> None:
    publisher, follower = pair
    wait_until(
        lambda: held_head(follower, ROOT) == held_head(publisher, ROOT),
        "the follower up to date",
        REPLICATION_WAIT_S,
    )
    open_page(browser, follower, f"/ui/dataset?ds={ROOT}")
    wait_until(lambda: live_badge(browser) == "live", "the event stream")
    mark_page(browser)
    new_head = publish(publisher, 2033)
    script = "const h = document.getElementById('head'); return h && h.textContent;"
    wait_until(
        lambda: browser.execute_script(script) == new_head,
        "the new head on the page",
        REPLICATION_WAIT_S,
    )
    assert "Z2033" in browser.find_element("id", "preview").text  # the new record leads
    assert still_same_page(browser)
    assert console_problems(browser) == []
