"""What the web UI must never do, checked in a real chromium against a real node.

- No page sends anything but same-origin GETs, whatever the user clicks, and no page
  holds the node's token; a write the page's own origin attempts without the token is
  refused (401) like any other.
- A form on another site that posts to the node (a cross-site request forgery) is
  refused by the node (403) and changes nothing.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.node.web.helpers import (
    MANY,
    ROOT,
    RunningNode,
    free_port,
    requests_made,
    requests_sent,
    wait_until,
)
from tests.node.web.test_browser import dataset_path, open_page

pytestmark = pytest.mark.timeout(300)


def test_pages_send_only_same_origin_gets_and_never_hold_the_token(
    ui_node: RunningNode, browser: Any
) -> None:
    requests_made(browser)  # drop earlier events
    token = ui_node.token
    for path in ("/ui/", dataset_path(ROOT), dataset_path(MANY), "/ui/sql", "/ui/network"):
        open_page(browser, ui_node, path)
        assert token not in browser.page_source
    open_page(browser, ui_node, dataset_path(MANY))
    browser.find_element(By.CSS_SELECTOR, '#preview a[rel="next"]').click()
    wait_until(lambda: "page=1" in browser.current_url, "page 2")
    open_page(browser, ui_node, "/ui/sql")
    browser.find_element(By.CSS_SELECTOR, "#sql-form textarea").send_keys("SELECT 1 AS one")
    browser.find_element(By.CSS_SELECTOR, "#sql-form button").click()
    wait_until(lambda: browser.find_elements(By.ID, "sql-table"), "the result")
    # Requests on the network (chromium's own chrome:// pages are not the UI's).
    made = [(m, u) for m, u in requests_made(browser) if u.startswith(("http", "ws"))]
    assert len(made) >= 10
    assert {m for m, _ in made} == {"GET"}, made
    assert [u for _, u in made if not u.startswith(ui_node.url + "/")] == []


def test_same_origin_write_without_token_is_refused(ui_node: RunningNode, browser: Any) -> None:
    open_page(browser, ui_node, "/ui/")
    status = browser.execute_async_script(
        """const done = arguments[arguments.length - 1];
        fetch("/api/follow", {method: "POST", headers: {"Content-Type": "application/json"},
                              body: JSON.stringify({dataset: "x"})})
          .then(r => done(r.status), e => done(String(e)));"""
    )
    assert status == 401
    assert ui_node.get_json("/api/follow")["follow"] == []


@contextlib.contextmanager
def attacker_site(folder: Path) -> Iterator[str]:
    """A plain HTTP server on another port (another origin) serving ``folder``."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://localhost:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


EVIL_FORM = """<!doctype html><html><body>
<form id="f" method="post" action="{action}" enctype="text/plain">
<input name="event_time,city,population&#10;2030-01-01T00:00:00Z,EVIL,1&#10;x" value="y">
<button id="go" type="submit">win a prize</button></form></body></html>"""


@pytest.mark.parametrize("target", ["/demo.city-populations/ingest?format=csv", "/api/follow"])
def test_cross_origin_form_post_is_refused(
    ui_node: RunningNode, browser: Any, tmp_path: Path, target: str
) -> None:
    head = ui_node.head(ROOT)
    (tmp_path / "evil.html").write_text(EVIL_FORM.format(action=ui_node.url + target))
    with attacker_site(tmp_path) as site:
        wait_until(lambda: _serves(site + "/evil.html"), "the attacker's site")
        browser.get(site + "/evil.html")
        browser.find_element(By.ID, "go").click()
        wait_until(lambda: browser.current_url.startswith(ui_node.url), "the form post")
        wait_until(lambda: "refused" in browser.find_element(By.TAG_NAME, "body").text, "answer")
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "cross-origin requests are refused" in body or "cross-site" in body
    assert ui_node.head(ROOT) == head
    assert ui_node.get_json("/api/follow")["follow"] == []


def _serves(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, ConnectionError):
        return False


def follow_list(node: RunningNode) -> list[str]:
    follows: list[str] = node.get_json("/api/follow")["follow"]
    return follows


def submit_follow(browser: Any, dataset: str, token: str, button: str) -> str:
    form = browser.find_element(By.ID, "follow-form")
    for name, value in (("dataset", dataset), ("token", token)):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    browser.execute_script("document.getElementById('write-result').textContent = '';")
    form.find_element(By.XPATH, f'.//button[text()="{button}"]').click()
    text = lambda: browser.execute_script(  # noqa: E731
        "return document.getElementById('write-result').textContent;"
    )
    wait_until(lambda: bool(text()), "the answer")
    answer: str = text()
    return answer


def test_follow_form_writes_only_with_the_typed_token(ui_node: RunningNode, browser: Any) -> None:
    open_page(browser, ui_node, "/ui/network")
    requests_made(browser)
    assert submit_follow(browser, ROOT, "not-the-token-0123456789", "Follow") == "invalid token"
    assert follow_list(ui_node) == []
    assert submit_follow(browser, ROOT, ui_node.token, "Follow") == "done"
    root_did = next(r["id"] for r in ui_node.get_json("/api/datasets") if r["alias"] == ROOT)
    assert follow_list(ui_node) == [root_did]
    follows = lambda: browser.find_element(By.ID, "follows").text  # noqa: E731
    wait_until(lambda: root_did in follows() and ROOT in follows(), "the list")
    # Stored as the DID, listed with its alias; unfollowed by the alias, as the CLI does.
    assert submit_follow(browser, ROOT, ui_node.token, "Unfollow") == "done"
    assert follow_list(ui_node) == []
    assert submit_follow(browser, ROOT, ui_node.token, "Unfollow") == "was not followed"
    assert submit_follow(browser, root_did, ui_node.token, "Follow") == "done"
    assert submit_follow(browser, root_did, ui_node.token, "Unfollow") == "done"
    assert follow_list(ui_node) == []
    # The token went only as the bearer token of the API's own route, never in a URL.
    writes = [(m, u, h) for m, u, h in requests_sent(browser) if m != "GET"]
    follow_api = ui_node.url + "/api/follow"
    methods = ["POST", "POST", "DELETE", "DELETE", "POST", "DELETE"]
    assert [(m, u) for m, u, _h in writes] == [(m, follow_api) for m in methods]
    bearer = [h.get("Authorization") for _m, _u, h in writes]
    assert bearer == ["Bearer not-the-token-0123456789"] + [f"Bearer {ui_node.token}"] * 5
    assert ui_node.token not in browser.page_source
