"""Fixtures of the web UI tests: one node and one browser for the module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.node.web.helpers import RunningNode, build_workspace, chromium, running_node


@pytest.fixture(scope="module")
def ui_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    ws = tmp_path_factory.mktemp("web") / "ws"
    build_workspace(ws)
    with running_node(ws) as node:
        yield node


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return tmp_path
