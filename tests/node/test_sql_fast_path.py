"""The short path of ``odf sql``: which datasets a query stages, the
slice-list cache that spares decoding chains, and a CLI process that answers as the
in-process command does without numpy, pandas, rich, the model or the Workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from node.cli import main
from node.sql.query import datasets_in_query, run_embedded
from storage.catalog import cached_slices, resolve, slices_cache_path
from storage.errors import DamagedObject
from storage.workspace import Workspace
from tests.node.conftest import RootWriter

MakeRoot = Callable[[str], RootWriter]
ROOT = Path(__file__).resolve().parents[2]
#: Runs `node.cli.main` as the console script does and reports which of the modules
#: named in argv[1] (JSON) it imported.
RUNNER = """
import json, sys
from node.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as e:
    code = e.code
loaded = [m for m in json.loads(sys.argv[1]) if m in sys.modules]
sys.stdout.flush()
sys.stderr.write("\\nLOADED " + json.dumps(loaded) + "\\n")
sys.exit(code)
"""
#: Never in a CLI process running a query on the default engine.
NEVER = ("numpy", "pandas", "cloudpickle", "rich", "grpc", "pyspark", "storage.workspace")
#: Not when every dataset the query mentions has a current slice-list cache.
NOT_WHEN_CACHED = (*NEVER, "fbs.model", "fbs.codec", "storage.dataset")


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the Spark engine fails (a closed port) rather than starting a JVM."""
    monkeypatch.setenv("ODF_ENGINE_ADDRESS", "127.0.0.1:1")


@pytest.fixture
def cities(ws: Workspace, make_root: MakeRoot) -> RootWriter:
    writer = make_root("demo.ds1")
    writer.append([("a", 1), ("b", 20)])
    writer.append([("a", 30), ("c", 40)])
    make_root("demo.ds10").append([("z", 5)])
    make_root("no.schema")
    return writer


def cli_process(ws: Workspace, unwanted: tuple[str, ...], *args: str) -> tuple[int, str, list[str]]:
    """Exit code, stdout and unwanted modules loaded of ``odf sql ARGS`` as a process."""
    argv = ["-w", str(ws.root.parent), "sql", *args]
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(unwanted), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "ODF_ENGINE_ADDRESS": "127.0.0.1:1"},
        timeout=120,
    )
    marker = [line for line in r.stderr.splitlines() if line.startswith("LOADED ")]
    assert marker, r.stderr
    return r.returncode, r.stdout, json.loads(marker[-1].removeprefix("LOADED "))


def test_whole_names_only(ws: Workspace, cities: RootWriter) -> None:
    def picked(query: str) -> list[str]:
        return sorted(e.alias for e in datasets_in_query(ws.root, query))

    assert picked("SELECT * FROM `demo.ds10`") == ["demo.ds10"]
    assert picked('SELECT * FROM "DEMO.DS1" JOIN `demo.ds10` USING (city)') == [
        "demo.ds1",
        "demo.ds10",
    ]
    assert picked("SELECT 1") == []
    assert picked("SELECT * FROM demo.ds1x") == []


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_process_answers_like_the_command_without_heavy_modules(
    ws: Workspace, cities: RootWriter, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    query = (
        "SELECT city, sum(population) AS p, max(event_time) AS t FROM `demo.ds1` "
        "GROUP BY city ORDER BY city"
    )
    assert main(["-w", str(ws.root.parent), "sql", query, "--output-format", fmt]) == 0
    expected = capsys.readouterr().out
    code, out, loaded = cli_process(ws, NOT_WHEN_CACHED, query, "--output-format", fmt)
    assert (code, out, loaded) == (0, expected, [])
    code, out, loaded = cli_process(ws, NOT_WHEN_CACHED, "SELECT 1 AS one", "--output-format", fmt)
    assert (code, loaded) == (0, [])
    assert "1" in out


def test_slice_list_follows_the_head(ws: Workspace, cities: RootWriter) -> None:
    count = "SELECT count(*) AS n FROM `demo.ds1`"
    entry = resolve(ws.root, "demo.ds1")
    assert cached_slices(ws.root, entry) is None
    assert run_embedded(ws.root, count).to_pylist() == [{"n": 4}]
    listing = cached_slices(ws.root, entry)
    assert listing is not None and len(listing.slices) == 2
    # A first process after a commit walks the chain (the model comes in) and rewrites it.
    head = cities.append([("d", 7)])
    assert cached_slices(ws.root, entry) is None
    code, out, _ = cli_process(ws, (), count, "--output-format", "json")
    assert (code, json.loads(out)) == (0, [{"n": 5}])
    listing = cached_slices(ws.root, entry)
    assert listing is not None and listing.head == head and len(listing.slices) == 3


def test_a_damaged_cache_is_not_used(ws: Workspace, cities: RootWriter) -> None:
    count = "SELECT count(*) AS n FROM `demo.ds1`"
    entry = resolve(ws.root, "demo.ds1")
    run_embedded(ws.root, count)
    path = slices_cache_path(ws.root, entry.id)
    outer = json.loads(path.read_text())
    body = json.loads(outer["state"])
    body["slices"] = body["slices"][:1]  # a slice dropped: the SHA3 no longer matches
    outer["state"] = json.dumps(body, sort_keys=True, separators=(",", ":"))
    path.write_text(json.dumps(outer))
    assert cached_slices(ws.root, entry) is None
    assert run_embedded(ws.root, count).to_pylist() == [{"n": 4}]
    path.write_text("{not json")
    assert cached_slices(ws.root, entry) is None
    assert run_embedded(ws.root, count).to_pylist() == [{"n": 4}]


def test_slices_are_hash_checked_on_the_cached_path(ws: Workspace, cities: RootWriter) -> None:
    query = "SELECT count(*) AS n FROM `demo.ds1`"
    run_embedded(ws.root, query)
    entry = resolve(ws.root, "demo.ds1")
    listing = cached_slices(ws.root, entry)
    assert listing is not None
    victim = cities.ds.layout.data.root / listing.slices[0][0].to_multibase()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    victim.write_bytes(bytes(data))
    with pytest.raises(DamagedObject):
        run_embedded(ws.root, query)
    code, out, _ = cli_process(ws, (), query)
    assert (code, out) == (5, "")


def test_a_table_the_scan_missed_is_staged_on_a_rerun(
    ws: Workspace, cities: RootWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    import node.sql.query

    monkeypatch.setattr(node.sql.query, "datasets_in_query", lambda root, query: [])
    table = run_embedded(ws.root, "SELECT count(*) AS n FROM `demo.ds10`")
    assert table.to_pylist() == [{"n": 1}]


def test_p2p_dir_is_the_head_stores() -> None:
    from node.sql.command import P2P_DIR
    from p2p.head_store import P2P_DIR as HEAD_STORE_DIR

    assert P2P_DIR == HEAD_STORE_DIR
