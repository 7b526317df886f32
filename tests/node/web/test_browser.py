"""The web UI in a real headless chromium against a real ``odf node run``.

The node holds a root (5 records), a derivative reading it (not run: no Spark here) and
a root of 120 records (three preview pages). Every page must render with no console
message (a CSP violation, a failed request, a script error all land there).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.node.web.helpers import (
    DERIVATIVE,
    MANY,
    MANY_ROWS,
    ROOT,
    SECOND,
    RunningNode,
    console_problems,
    screenshot,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)


def open_page(driver: Any, node: RunningNode, path: str) -> None:
    console_problems(driver)  # drop what earlier pages logged
    driver.get(node.url + path)
    wait_until(lambda: driver.execute_script("return document.readyState") == "complete", path)


def list_aliases(driver: Any) -> list[str]:
    """The aliases of the list's rows, read in the page (rows are swapped while we look)."""
    aliases: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#datasets tbody tr'))"
        ".map(r => r.dataset.alias);"
    )
    return aliases


def live_badge(driver: Any) -> str:
    text: str = driver.execute_script("return document.getElementById('live').textContent;")
    return text


def dataset_path(alias: str, **params: object) -> str:
    return "/ui/dataset?" + urllib.parse.urlencode({"ds": alias, **params})


def mark_page(driver: Any) -> None:
    """A marker that a full page load would erase."""
    driver.execute_script("window.__odfMarker = 42;")


def still_same_page(driver: Any) -> bool:
    return bool(driver.execute_script("return window.__odfMarker === 42;"))


def test_list_page(ui_node: RunningNode, browser: Any, shots: Path) -> None:
    open_page(browser, ui_node, "/")  # / redirects to the list
    assert browser.current_url == ui_node.url + "/ui/"
    assert browser.title == "Datasets · odf-node"
    assert list_aliases(browser) == [DERIVATIVE, SECOND, ROOT, MANY]
    root = browser.find_element(By.CSS_SELECTOR, f'#datasets tr[data-alias="{ROOT}"]')
    cells = [c.text for c in root.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "Root" and cells[4] == "5"
    assert cells[6].startswith("2021-01-01 00:00:00")  # the watermark
    assert root.find_element(By.TAG_NAME, "code").get_attribute("title") == ui_node.head(ROOT)
    wait_until(lambda: live_badge(browser) == "live", "the event stream")
    screenshot(browser, "datasets", shots)
    # Search filters in place (the server filters, the list is swapped), no reload.
    mark_page(browser)
    browser.find_element(By.ID, "search").send_keys("big")
    wait_until(lambda: list_aliases(browser) == [DERIVATIVE, SECOND], "the filter")
    assert browser.find_element(By.ID, "count").text == "2"
    assert browser.current_url.endswith("/ui/?q=big")
    browser.find_element(By.ID, "search").send_keys(Keys.BACKSPACE * 3)
    wait_until(lambda: len(list_aliases(browser)) == 4, "all again")
    browser.find_element(By.ID, "search").send_keys("MANY", Keys.ENTER)
    wait_until(lambda: list_aliases(browser) == [MANY], "enter")
    assert still_same_page(browser)
    assert console_problems(browser) == []


def test_root_dataset_page(ui_node: RunningNode, browser: Any, shots: Path) -> None:
    open_page(browser, ui_node, dataset_path(ROOT))
    assert browser.find_element(By.TAG_NAME, "h1").text == ROOT
    schema = [
        r.text.split()[0] for r in browser.find_elements(By.CSS_SELECTOR, "h2 + table tbody tr")
    ][:6]
    assert schema == ["offset", "op", "system_time", "event_time", "city", "population"]
    preview = browser.find_elements(By.CSS_SELECTOR, "#preview tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in preview] == ["4", "3", "2", "1", "0"]
    events = browser.page_source
    for sentence in (
        "AddPushSource",
        "source 'default': read Csv, merge Ledger",
        "records [0, 4] (5)",
    ):
        assert sentence in events
    # The lineage graph: this dataset, an arrow to the derivative and on to its reader,
    # each a link to its page.
    svg = browser.find_element(By.CSS_SELECTOR, "svg.lineage")
    assert len(svg.find_elements(By.CSS_SELECTOR, "path.lin-edge")) == 2
    links = svg.find_elements(By.CSS_SELECTOR, "a.lin-node")
    hrefs = [urllib.parse.unquote(a.get_dom_attribute("href")) for a in links]
    assert [h.split("ds=")[1] for h in hrefs] == [DERIVATIVE, SECOND]
    assert "Signed head: block 6" in browser.page_source  # the node signed its own head
    screenshot(browser, "dataset", shots)
    assert console_problems(browser) == []


def test_derivative_page(ui_node: RunningNode, browser: Any, shots: Path) -> None:
    open_page(browser, ui_node, dataset_path(DERIVATIVE))
    assert "Derivative" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert "SetTransform" in browser.page_source and "inputs: cities" in browser.page_source
    svg = browser.find_element(By.CSS_SELECTOR, "svg.lineage")
    assert len(svg.find_elements(By.CSS_SELECTOR, "path.lin-edge")) == 2  # root -> it -> second
    link = svg.find_element(By.CSS_SELECTOR, "a.lin-node")
    assert ROOT in urllib.parse.unquote(link.get_dom_attribute("href"))
    assert "No records yet." in browser.page_source
    screenshot(browser, "derivative", shots)
    link.click()  # the graph leads to the input's page
    wait_until(lambda: browser.find_element(By.TAG_NAME, "h1").text == ROOT, "the input's page")
    assert console_problems(browser) == []


def test_preview_pages_in_place(ui_node: RunningNode, browser: Any) -> None:
    open_page(browser, ui_node, dataset_path(MANY))
    first = lambda: browser.execute_script(  # noqa: E731 - read in the page: it is swapped
        "const c = document.querySelector('#preview tbody tr td'); return c && c.textContent;"
    )
    assert first() == str(MANY_ROWS - 1)
    mark_page(browser)
    browser.find_element(By.CSS_SELECTOR, '#preview a[rel="next"]').click()
    wait_until(lambda: first() == str(MANY_ROWS - 51), "page 2")
    assert "page=1" in browser.current_url and still_same_page(browser)
    browser.find_element(By.CSS_SELECTOR, '#preview a[rel="next"]').click()
    wait_until(lambda: first() == str(MANY_ROWS - 101), "page 3")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#preview tbody tr")) == MANY_ROWS - 100
    assert browser.find_elements(By.CSS_SELECTOR, '#preview a[rel="next"]') == []
    browser.find_element(By.CSS_SELECTOR, '#preview a[rel="prev"]').click()
    wait_until(lambda: first() == str(MANY_ROWS - 51), "back to page 2")
    assert still_same_page(browser)
    assert console_problems(browser) == []


def test_sql_page_table_and_chart(ui_node: RunningNode, browser: Any, shots: Path) -> None:
    open_page(browser, ui_node, "/ui/sql")
    mark_page(browser)
    area = browser.find_element(By.CSS_SELECTOR, "#sql-form textarea")
    area.send_keys(
        f'SELECT city, max(population) AS population FROM "{ROOT}" GROUP BY city ORDER BY city'
    )
    browser.find_element(By.CSS_SELECTOR, "#sql-form button").click()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#sql-table tbody tr"), "the result")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#sql-table tbody tr")]
    assert rows == ["A 1100", "B 2000", "C 3000"]
    bars = browser.find_elements(By.CSS_SELECTOR, "#chart rect.bar")
    heights = [float(b.get_attribute("height")) for b in bars]
    assert len(heights) == 3 and heights[0] < heights[1] < heights[2]
    assert still_same_page(browser) and "q=SELECT" in browser.current_url
    screenshot(browser, "sql", shots)
    # An error is shown on the page, not as a failed request.
    area = browser.find_element(By.CSS_SELECTOR, "#sql-form textarea")
    area.clear()
    area.send_keys("SELECT * FROM no_such_table")
    browser.find_element(By.CSS_SELECTOR, "#sql-form button").click()
    wait_until(lambda: browser.find_elements(By.ID, "sql-error"), "the error")
    assert "no_such_table" in browser.find_element(By.ID, "sql-error").text
    assert console_problems(browser) == []


def test_network_page(ui_node: RunningNode, browser: Any, shots: Path) -> None:
    open_page(browser, ui_node, "/ui/network")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Network"
    peer_id = ui_node.get_json("/api/status")["peerId"]
    assert peer_id in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert "No dataset followed." in browser.page_source
    screenshot(browser, "network", shots)
    assert console_problems(browser) == []


def test_new_head_appears_on_open_list(ui_node: RunningNode, browser: Any) -> None:
    open_page(browser, ui_node, "/ui/")
    wait_until(lambda: live_badge(browser) == "live", "the event stream")
    mark_page(browser)
    # Read in the page: the row element is replaced when the head arrives.
    row_head = lambda: browser.execute_script(  # noqa: E731
        "const c = document.querySelector(arguments[0]); return c && c.title;",
        f'#datasets tr[data-alias="{ROOT}"] code',
    )
    before = row_head()
    new_head = ui_node.ingest(ROOT, b"event_time,city,population\n2023-01-01T00:00:00Z,D,4000\n")
    assert new_head != before
    wait_until(lambda: row_head() == new_head, "the new head on the list")
    assert still_same_page(browser)
    cells = browser.find_elements(By.CSS_SELECTOR, f'#datasets tr[data-alias="{ROOT}"] td')
    assert cells[4].text == "6"
    assert console_problems(browser) == []


def test_new_head_refreshes_open_dataset_page(ui_node: RunningNode, browser: Any) -> None:
    open_page(browser, ui_node, dataset_path(ROOT))
    wait_until(lambda: live_badge(browser) == "live", "the event stream")
    mark_page(browser)
    new_head = ui_node.ingest(ROOT, b"event_time,city,population\n2024-01-01T00:00:00Z,E,5000\n")
    shown_head = lambda: browser.execute_script(  # noqa: E731 - the page is swapped
        "const h = document.getElementById('head'); return h && h.textContent;"
    )
    wait_until(lambda: shown_head() == new_head, "the new head")
    first = browser.find_element(By.CSS_SELECTOR, "#preview tbody tr").text
    records = next(r["records"] for r in ui_node.get_json("/api/datasets") if r["alias"] == ROOT)
    assert first.split()[0] == str(records - 1)  # the new record leads the preview
    assert still_same_page(browser)
    assert console_problems(browser) == []
