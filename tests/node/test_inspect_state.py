"""``odf inspect state``: each derivative's state kind and newest checkpoint size."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.client import EngineClient
from engine.streaming.summary import StateSummary, summarize_checkpoint
from node.cli import main
from node.cli_util import EXIT_OK, EXIT_USAGE
from node.render.state import size_text, state_row
from node.transform import pull_derivative
from storage.verified import verified_checkpoint_path
from storage.workspace import Workspace
from tests.node.conftest import RootWriter, add_derivative

pytestmark = pytest.mark.slow

MakeRoot = Callable[[str], RootWriter]


def test_state_kind_and_size_per_derivative(
    ws: Workspace,
    make_root: MakeRoot,
    engine: EngineClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cities = make_root("cities")
    cities.append([("a", 100), ("b", 5000), ("a", 7000)])
    add_derivative(
        ws,
        "by.city",
        ["cities"],
        "SELECT city, max(event_time) AS event_time, count(*) AS n, sum(population) AS p "
        "FROM cities GROUP BY city",
    )
    add_derivative(
        ws,
        "top",
        ["cities"],
        "SELECT event_time, city, population FROM (SELECT event_time, city, population, "
        "row_number() OVER "
        "(PARTITION BY city ORDER BY population DESC) AS r FROM cities) WHERE r <= 1",
    )
    add_derivative(
        ws, "big", ["cities"], "SELECT event_time, city FROM cities WHERE population > 1000"
    )
    for alias in ("by.city", "top", "big"):
        pull_derivative(ws, alias, engine=engine)
    cities.append([("c", 1)])
    for alias in ("by.city", "top", "big"):
        pull_derivative(ws, alias, engine=engine)
    w = ["-w", str(ws.root.parent)]

    assert main([*w, "inspect", "state", "-o", "json"]) == EXIT_OK
    rows = {r["alias"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"by.city", "top", "big"}  # the root keeps no stream state
    assert rows["by.city"]["state"] == "accumulate" and rows["by.city"]["groups"] == 3
    assert rows["by.city"]["inputRows"] == 0
    assert rows["top"]["state"] == "changelog" and rows["top"]["inputRows"] == 4
    assert rows["big"]["state"] in ("none", "watermarks")
    ds = ws.get("by.city")
    state = ds.state()
    assert state is not None and state.last_checkpoint is not None
    path = verified_checkpoint_path(ds.layout.checkpoints.root, state.last_checkpoint)
    assert rows["by.city"]["checkpointBytes"] == Path(path).stat().st_size
    assert summarize_checkpoint(path).groups == 3
    assert rows["by.city"]["values"] == 0  # its input only adds: extremes alone

    assert main([*w, "inspect", "state", "by.city"]) == EXIT_OK
    table = capsys.readouterr().out
    assert "accumulate" in table and "one accumulator row per group" in table
    assert "3 groups" in table and size_text(rows["by.city"]["checkpointBytes"]) in table

    assert main([*w, "inspect", "state", "cities"]) == EXIT_USAGE
    assert "not a derivative" in capsys.readouterr().err


def test_sizes_are_shown_in_binary_units() -> None:
    assert size_text(0) == "0 B"
    assert size_text(1023) == "1023 B"
    assert size_text(1536) == "1.5 KiB"
    assert size_text(5 * 1024 * 1024) == "5.0 MiB"


def test_min_max_values_are_shown_beside_the_groups() -> None:
    summary = StateSummary("accumulate", "one accumulator row per group", 0, 0, 2, 4096, 5)
    row = state_row("by.city", summary, table=True)
    assert row["rows"] == "2 groups, 5 min/max values"
    assert state_row("by.city", summary, table=False)["values"] == 5
