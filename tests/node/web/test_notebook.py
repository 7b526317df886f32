"""The example notebook runs in a real Jupyter kernel (nbclient + ipykernel), and its
``%%odf_sql`` cell gives exactly what ``odf sql`` answers for the same query."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "odf-sql.ipynb"
EXAMPLES = REPO / "node" / "examples"


def odf(ws: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", *args], cwd=ws, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    odf(ws, "init")
    odf(ws, "add", str(EXAMPLES / "city-populations.yaml"))
    odf(ws, "ingest", "demo.city-populations", str(EXAMPLES / "city-populations.csv"))
    return ws


def _sql_cell(nb: object) -> tuple[int, str]:
    """The index of the notebook's ``%%odf_sql`` cell and its query."""
    for i, cell in enumerate(nb.cells):  # type: ignore[attr-defined]
        if cell.cell_type == "code" and cell.source.startswith("%%odf_sql"):
            return i, cell.source.split("\n", 1)[1]
    raise AssertionError("the notebook has no %%odf_sql cell")


def _stdout(cell: object) -> str:
    return "".join(
        o.get("text", "")
        for o in cell.outputs  # type: ignore[attr-defined]
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )


def test_notebook_sql_cell_equals_odf_sql(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    index, query = _sql_cell(nb)
    # The kernel inherits the environment: the workspace, and this tree's packages.
    monkeypatch.setenv("ODF_WORKSPACE", str(workspace))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    client = nbclient.NotebookClient(
        nb,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()

    # The cell's value is a DataFrame; the next cell prints it as JSON records.
    assert nb.cells[index].outputs[0]["output_type"] == "execute_result"
    assert "text/html" in nb.cells[index].outputs[0]["data"]
    from_notebook = json.loads(_stdout(nb.cells[index + 1]))
    from_cli = json.loads(odf(workspace, "sql", "--output-format", "json", query))
    assert from_notebook == from_cli
    assert [r["city"] for r in from_cli] == ["A", "B", "C"]
    # The last cell reads the same dataset through the Python API.
    assert "text/html" in nb.cells[-1].outputs[0]["data"]


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_magic_options_and_errors(workspace: Path) -> None:
    """The magics in a real InteractiveShell: options, ``-o``, ``--arrow``, bad options."""
    from IPython.testing.globalipapp import start_ipython

    from node.errors import UsageError

    ip = start_ipython()
    assert ip is not None
    ip.run_line_magic("load_ext", "node.notebook")
    assert ip.run_line_magic("odf_workspace", str(workspace)) == str(workspace / ".odf")
    table = ip.run_cell_magic(
        "odf_sql", "--arrow -o t", 'SELECT count(*) AS n FROM "demo.city-populations"'
    )
    assert table.to_pylist() == [{"n": 5}]
    assert ip.user_ns["t"] is table
    frame = ip.run_line_magic("odf_sql", "SELECT 1 AS one")
    assert frame.to_dict("records") == [{"one": 1}]
    with pytest.raises(UsageError, match="unknown option"):
        ip.run_cell_magic("odf_sql", "--nope", "SELECT 1")
