"""``odf pull odf+http://…`` and ``odf push DS --to odf+http://…``: the Smart Transfer Protocol
from the command line, against a real node API on loopback (server in a thread)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.cli import main as odf
from node.cli_util import EXIT_CONFLICT, EXIT_OK, EXIT_USAGE
from node.http.auth import TOKEN_ENV, token_path
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.node.test_remote import node  # noqa: F401  (the served-node fixture)
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace


def run(ws: Workspace, *argv: str) -> int:
    return odf(["--workspace", str(ws.root.parent), *argv])


def test_pull_and_push_over_the_smart_protocol(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served, url = node
    ds = make_dataset(served, "prices", tmp_path / "f", 3)
    mine = new_workspace(tmp_path / "mine")
    assert run(mine, "pull", f"odf+{url}/prices", "--no-progress") == EXIT_OK
    assert mine.get("prices").head() == ds.head()
    add_slices(ds, tmp_path / "g", 2)
    assert run(mine, "pull", f"odf+{url}/prices", "--no-progress") == EXIT_OK
    assert mine.get("prices").head() == ds.head()
    assert verify_integrity(mine.get("prices")).ok

    # Push: kamu style, the node's dataset named by the URL, the token from the environment.
    own = make_dataset(mine, "mine.data", tmp_path / "h", 2)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}/theirs") == EXIT_USAGE
    assert served.list() and all(e.alias != "theirs" for e in served.list())
    token = token_path(served.root).read_text().strip()
    monkeypatch.setenv(TOKEN_ENV, token)
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}/theirs") == EXIT_OK
    assert served.get("theirs").head() == own.head()
    add_slices(own, tmp_path / "i", 1)
    # A repository URL without a dataset path pushes under the local alias (or --as).
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}", "--as", "theirs") == EXIT_OK
    assert served.get("theirs").head() == own.head()
    assert verify_integrity(served.get("theirs")).ok


def test_push_collisions_are_conflicts_named(
    node: tuple[Workspace, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A push of a dataset the node holds under another name, or to a name another dataset
    has there: exit 6 (a conflict) naming what collided, not the server's raw
    "RefCollision {...}"."""
    served, url = node
    monkeypatch.setenv(TOKEN_ENV, token_path(served.root).read_text().strip())
    mine = new_workspace(tmp_path / "mine")
    own = make_dataset(mine, "mine.data", tmp_path / "h", 1)
    other = make_dataset(mine, "other.data", tmp_path / "o", 1)
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}/theirs", "--no-alias") == EXIT_OK
    capsys.readouterr()
    assert run(mine, "push", "mine.data", "--to", f"odf+{url}/again", "--no-alias") == EXIT_CONFLICT
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"holds this dataset ({own.id}) under another name: push to that name")
    assert (
        run(mine, "push", "other.data", "--to", f"odf+{url}/theirs", "--no-alias") == EXIT_CONFLICT
    )
    assert "is not in the local chain" in capsys.readouterr().err  # seen before any upload
    assert served.get("theirs").head() == own.head()
    assert all(e.alias != "again" for e in served.list())
    assert other.head() is not None
