"""``odf add`` with names that exist, as kamu's ``add`` treats them (real ``odf`` processes).

kamu skips a manifest whose dataset exists ("Skipped: NAME: Already exists", success),
adds the first of two manifests of the same name and skips the other, and with
``--replace`` deletes the existing dataset and adds it again; it refuses to delete a
dataset another one takes as input. ``--visibility public`` is what every dataset of a
single-tenant odf workspace is; ``private`` cannot be enforced and is refused.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fbs.did import DatasetId
from node.cli_util import EXIT_CONFLICT, EXIT_INVALID, EXIT_OK, EXIT_USAGE
from storage.workspace import Workspace
from tests.node.test_cli_add import derived_doc, root_doc, transform_of, tree_hash, write


def odf(ws: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    return subprocess.run(
        [exe, "--workspace", str(ws), *argv],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,  # not a terminal: --replace does not ask
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    assert odf(root, "init").returncode == EXIT_OK
    return root


def ids(ws: Path) -> dict[str, DatasetId]:
    return {e.alias: e.id for e in Workspace.open(ws).list()}


def test_an_existing_dataset_is_skipped_with_a_warning(ws: Path, tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", root_doc("a"))
    b = write(tmp_path / "b.yaml", root_doc("b"))
    assert odf(ws, "add", str(a)).returncode == EXIT_OK
    before = ids(ws)
    r = odf(ws, "add", str(a), str(b))
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stderr.splitlines() == [
        f"odf: warning: {a}: skipped a: already exists (--replace replaces it)"
    ]
    assert [line.split(" ")[:2] for line in r.stdout.splitlines()] == [["Added", "b"]]
    after = ids(ws)
    assert after["a"] == before["a"]  # untouched
    assert sorted(after) == ["a", "b"]


def test_only_an_existing_dataset_adds_nothing_and_succeeds(ws: Path, tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", root_doc("a"))
    assert odf(ws, "add", str(a)).returncode == EXIT_OK
    before = tree_hash(ws)
    r = odf(ws, "add", str(a))
    assert (r.returncode, r.stdout) == (EXIT_OK, "")
    assert "skipped a: already exists" in r.stderr
    assert tree_hash(ws) == before


def test_the_first_manifest_of_a_name_is_added_the_other_skipped(ws: Path, tmp_path: Path) -> None:
    # kamu's own case: a root "plain" and a derivative "plain" reading "plain".
    root = write(tmp_path / "plain.yaml", root_doc("plain"))
    derived = write(tmp_path / "commented.yaml", derived_doc("Plain", "plain"))
    r = odf(ws, "add", str(root), str(derived))
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stderr.splitlines() == [
        f"odf: warning: {derived}: skipped Plain: the same name comes first in {root}"
    ]
    assert list(ids(ws)) == ["plain"]
    state = Workspace.open(ws).get("plain").state()
    assert state is not None and state.transform is None  # the root, given first


def test_replace_deletes_and_adds_again(ws: Path, tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", root_doc("a"))
    other = write(tmp_path / "o.yaml", root_doc("other"))
    assert odf(ws, "add", str(a), str(other)).returncode == EXIT_OK
    before = ids(ws)
    r = odf(ws, "add", "--replace", str(a))
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stdout.splitlines()[0] == f"Deleted a ({before['a']})"
    after = ids(ws)
    assert after["a"] != before["a"]  # a new dataset: new key, new DID
    assert after["other"] == before["other"]
    assert Workspace.open(ws).get("a").head() is not None


def test_replace_of_an_input_needs_its_dependents_in_the_batch(ws: Path, tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", root_doc("a"))
    d = write(tmp_path / "d.yaml", derived_doc("d", "a"))
    assert odf(ws, "add", str(a), str(d)).returncode == EXIT_OK
    before = tree_hash(ws)
    r = odf(ws, "add", "--replace", str(a))
    assert r.returncode == EXIT_CONFLICT
    assert r.stderr == "odf: error: cannot replace a: d takes it as an input " + (
        "(replace both in one batch, or delete the dependent dataset first)\n"
    )
    assert tree_hash(ws) == before  # nothing deleted
    # Both in one batch: d is added again on top of the new a.
    r = odf(ws, "add", "--replace", "--yes", str(d), str(a))
    assert r.returncode == EXIT_OK, r.stderr
    new = ids(ws)
    inputs = transform_of(ws, "d").inputs
    assert [i.dataset_ref for i in inputs] == [new["a"].to_did_odf()]


def test_replace_refused_before_deleting_when_an_input_will_not_resolve(
    ws: Path, tmp_path: Path
) -> None:
    a = write(tmp_path / "a.yaml", root_doc("a"))
    e = write(tmp_path / "e.yaml", derived_doc("e", "a"))
    assert odf(ws, "add", str(a), str(e)).returncode == EXIT_OK
    before = tree_hash(ws)
    by_did = write(tmp_path / "e2.yaml", derived_doc("e", ids(ws)["a"].to_did_odf(), table="a"))
    missing = write(tmp_path / "e3.yaml", derived_doc("e", "nowhere"))
    for manifest in (by_did, missing):
        # e's input: a replaced dataset by its DID (a gets a new one), or nothing at all.
        extra = [str(a)] if manifest is by_did else []
        r = odf(ws, "add", "--replace", *extra, str(manifest))
        assert r.returncode == EXIT_INVALID, r.stderr
        assert "unknown transform input" in r.stderr
        assert tree_hash(ws) == before


def test_visibility_public_is_accepted_private_refused(ws: Path, tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", root_doc("a"))
    before = tree_hash(ws)
    r = odf(ws, "add", "--visibility", "private", str(a))
    assert r.returncode == EXIT_USAGE
    assert "--visibility private" in r.stderr and "cannot be kept private" in r.stderr
    assert tree_hash(ws) == before
    r = odf(ws, "add", "--visibility", "public", str(a))
    assert r.returncode == EXIT_OK, r.stderr
    assert list(ids(ws)) == ["a"]
