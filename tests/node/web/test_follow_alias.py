"""Follow and unfollow by alias through a real node's ``/api/follow`` (the route the network
page's form and ``odf node follow|unfollow`` both call), under the API's token and
Origin rules."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.node.web.helpers import ROOT, RunningNode, odf

pytestmark = pytest.mark.timeout(300)


def call(node: RunningNode, method: str, dataset: str, **headers: str) -> tuple[int, Any]:
    req = urllib.request.Request(
        node.url + "/api/follow",
        data=json.dumps({"dataset": dataset}).encode(),
        method=method,
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def follows(node: RunningNode) -> list[str]:
    entries: list[str] = node.get_json("/api/follow")["follow"]
    return entries


def test_unfollow_by_alias_with_the_token_only(ui_node: RunningNode) -> None:
    did = next(r["id"] for r in ui_node.get_json("/api/datasets") if r["alias"] == ROOT)
    bearer = {"Authorization": f"Bearer {ui_node.token}"}
    assert call(ui_node, "POST", ROOT, **bearer)[1]["followed"] == did
    assert follows(ui_node) == [did]
    # The write rules hold for the alias as for the DID: no token, a wrong one, a foreign
    # page (even with the token) are refused and change nothing.
    assert call(ui_node, "DELETE", ROOT)[0] == 401
    assert call(ui_node, "DELETE", ROOT, Authorization="Bearer wrong-token-0123456789")[0] == 401
    foreign = call(ui_node, "DELETE", ROOT, Origin="http://evil.example", **bearer)
    assert foreign[0] == 403
    assert follows(ui_node) == [did]
    status, doc = call(ui_node, "DELETE", ROOT, **bearer)
    assert (status, doc["removed"], doc["follow"]) == (200, True, [])
    assert call(ui_node, "DELETE", ROOT, **bearer)[1]["removed"] is False
    assert call(ui_node, "DELETE", "no.such-dataset", **bearer)[1]["removed"] is False


def test_cli_unfollows_by_alias_on_the_running_node(ui_node: RunningNode) -> None:
    did = next(r["id"] for r in ui_node.get_json("/api/datasets") if r["alias"] == ROOT)
    assert "Following" in odf(ui_node.ws, "node", "follow", ROOT)
    assert follows(ui_node) == [did]
    assert odf(ui_node.ws, "node", "unfollow", ROOT).startswith("Stopped following")
    assert follows(ui_node) == []
