"""`odf delete`: a dataset another transform reads is not deleted alone (kamu refuses a
dangling reference too); `-r` deletes it with everything downstream, readers first."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fbs.model import DatasetKind, DatasetSnapshot
from node.cli_util import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_OK
from node.dependents import uses_from_outside, with_downstream
from storage.workspace import Workspace
from tests.node.conftest import add_derivative
from tests.node.test_error_contract import odf_exe


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """root <- deriv <- top, and `other`, a root nothing reads."""
    ws = Workspace.init(tmp_path / "project")
    for name in ("root", "other"):
        ws.add_snapshot(DatasetSnapshot(name=name, kind=DatasetKind.Root, metadata=()))
    add_derivative(ws, "deriv", ["root"], "SELECT * FROM root")
    add_derivative(ws, "top", [("deriv", "d"), ("other", "o")], "SELECT * FROM d")
    return tmp_path / "project"


def _odf(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ODF_WORKSPACE": str(project)}
    return subprocess.run(
        [odf_exe(), *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _aliases(project: Path) -> set[str]:
    return {entry.alias for entry in Workspace.open(project).list()}


@pytest.mark.parametrize(
    ("argv", "used", "reader"),
    [(["root"], "root", "deriv"), (["deriv", "root"], "deriv", "top"), (["other"], "other", "top")],
)
def test_a_dataset_another_reads_is_not_deleted(
    chain: Path, argv: list[str], used: str, reader: str
) -> None:
    before = _tree(chain)
    r = _odf(chain, "delete", "--yes", *argv)
    assert r.returncode == EXIT_CONFLICT, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"odf: error: cannot delete {used}: {reader} takes it as an input")
    assert "-r" in line
    assert _tree(chain) == before  # nothing deleted, not even the datasets nobody reads


def test_datasets_deleted_together_with_their_readers(chain: Path) -> None:
    r = _odf(chain, "delete", "--yes", "root", "deriv", "top")
    assert r.returncode == EXIT_OK, r.stderr
    assert _aliases(chain) == {"other"}


def test_recursive_delete_takes_the_downstream_readers_first(chain: Path) -> None:
    r = _odf(chain, "delete", "--yes", "-r", "root")
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stdout.splitlines() == ["Deleted top", "Deleted deriv", "Deleted root"]
    assert _aliases(chain) == {"other"}
    # A leaf needs no -r.
    assert _odf(chain, "delete", "--yes", "other").returncode == EXIT_OK
    assert _aliases(chain) == set()


def test_dependents_of_a_set(chain: Path) -> None:
    ws = Workspace.open(chain)
    ids = {e.alias: e.id for e in ws.list()}
    uses = uses_from_outside(ws, [ids["root"], ids["other"]])
    assert sorted((u.consumer.alias, u.used) for u in uses) == sorted(
        [("deriv", ids["root"]), ("top", ids["other"])]
    )
    assert uses_from_outside(ws, list(ids.values())) == []
    order = [e.alias for e in with_downstream(ws, [ids["other"], ids["root"]])]
    assert order.index("top") < order.index("deriv") < order.index("root")
    assert order.index("top") < order.index("other") and len(order) == 4


def test_a_pull_whose_input_is_gone_names_the_reader_and_the_input(chain: Path) -> None:
    """A workspace from before the refusal (or edited by hand) can hold a dangling input."""
    ws = Workspace.open(chain)
    did = ws.resolve("root").id
    ws.delete("root")  # the storage call: no dependents check at this level
    r = _odf(chain, "pull", "deriv")
    assert r.returncode == EXIT_NOT_FOUND, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"odf: error: deriv: transform input root ({did.to_did_odf()}) is not")
