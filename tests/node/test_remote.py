"""``odf fetch`` / ``odf push`` against a real node API on loopback (server in a thread)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.cli import main as odf
from node.cli_util import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from node.http.auth import TOKEN_ENV, token_path
from node.remote import resolve, urls
from storage.errors import DatasetNotFound
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve_workspace


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Workspace, str]]:
    """A workspace served by the node API in a background thread; yields (ws, url)."""
    ws = new_workspace(tmp_path / "node")
    ready = threading.Event()
    box: dict[str, object] = {}

    def serve_thread() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            box["stop"] = stop
            box["loop"] = asyncio.get_running_loop()
            async with serve_workspace(ws) as url:
                box["url"] = url
                ready.set()
                await stop.wait()

        asyncio.run(main())

    t = threading.Thread(target=serve_thread, daemon=True)
    t.start()
    assert ready.wait(30)
    try:
        yield ws, str(box["url"])
    finally:
        loop = box["loop"]
        stop = box["stop"]
        assert isinstance(loop, asyncio.AbstractEventLoop) and isinstance(stop, asyncio.Event)
        loop.call_soon_threadsafe(stop.set)
        t.join(30)


def cli(ws: Workspace, *argv: str) -> int:
    return odf(["--workspace", str(ws.root.parent), *argv])


def test_fetch_clone_update_and_push(
    node: tuple[Workspace, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, url = node
    ds = make_dataset(served, "prices", tmp_path / "f", 2)
    mine = new_workspace(tmp_path / "mine")
    assert cli(mine, "fetch", f"{url}/prices/", "-q") == EXIT_OK
    assert mine.get("prices").head() == ds.head()
    add_slices(ds, tmp_path / "g", 1)
    assert cli(mine, "fetch", f"{url}/prices", "--as", "prices", "-q") == EXIT_OK
    assert mine.get("prices").head() == ds.head()
    assert verify_integrity(mine.get("prices")).ok
    # A dataset this workspace owns can be pushed to the node, with the node's token.
    own = make_dataset(mine, "mine.data", tmp_path / "h", 1)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert cli(mine, "push", "mine.data", "--to", url) == EXIT_USAGE  # no token: 401
    assert cli(mine, "push", "mine.data", "--to", url, "--token", "x" * 43) == EXIT_USAGE
    monkeypatch.setenv(TOKEN_ENV, "y" * 43)
    assert cli(mine, "push", "mine.data", "--to", url) == EXIT_USAGE
    with pytest.raises(DatasetNotFound):
        served.get("mine.data")
    monkeypatch.delenv(TOKEN_ENV)
    token_file = str(token_path(served.root))
    assert cli(mine, "push", "mine.data", "--to", url, "--token-file", token_file) == EXIT_OK
    assert served.get("mine.data").head() == own.head()
    add_slices(own, tmp_path / "i", 1)
    monkeypatch.setenv(TOKEN_ENV, token_path(served.root).read_text().strip())
    assert cli(mine, "push", "mine.data", "--to", url) == EXIT_OK
    assert served.get("mine.data").head() == own.head()
    # A second clone by DID URL with an explicit alias.
    other = new_workspace(tmp_path / "other")
    did = served.resolve("mine.data").id.as_multibase()
    assert cli(other, "fetch", f"{url}/{did}/", "--as", "copy", "-q") == EXIT_OK
    assert other.get("copy").head() == own.head()


def test_fetch_errors_map_to_exit_codes(node: tuple[Workspace, str], tmp_path: Path) -> None:
    served, url = node
    make_dataset(served, "prices", tmp_path / "f", 1)
    mine = new_workspace(tmp_path / "mine")
    assert cli(mine, "fetch", f"{url}/nothing/", "-q") == EXIT_NOT_FOUND
    assert cli(mine, "fetch", f"{url}/prices/", "-q") == EXIT_OK
    # Local divergence: the replica appends on its own, then the owner does too.
    add_slices(mine.get("prices"), tmp_path / "g", 1)
    add_slices(served.get("prices"), tmp_path / "h", 1, rows=2)
    assert cli(mine, "fetch", f"{url}/prices/", "-q") == EXIT_CONFLICT


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unreachable_and_missing_sources_are_told_apart(
    node: tuple[Workspace, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A URL nothing answers at is unavailable (exit 7: a retry may cure it), named with
    the reason; a node that answers without the dataset is not found (3), named too."""
    _served, url = node
    mine = new_workspace(tmp_path / "mine")
    down = f"http://127.0.0.1:{_closed_port()}"
    for argv in (["fetch", f"{down}/x/", "-q"], ["pull", f"{down}/x"], ["pull", f"odf+{down}/x"]):
        assert odf(["--workspace", str(mine.root.parent), *argv]) == EXIT_UNAVAILABLE, argv
        assert capsys.readouterr().err.strip().endswith(": connection refused"), argv
    assert cli(mine, "fetch", f"{url}/nothing/", "-q") == EXIT_NOT_FOUND
    assert f"{url}/nothing/: no such dataset there" in capsys.readouterr().err
    assert mine.list() == []


def test_is_own_node() -> None:
    assert urls.is_own_node("http://127.0.0.1:8080", "http://localhost:8080/")
    assert urls.is_own_node("http://0.0.0.0:8080", "http://127.0.0.1:8080")
    assert urls.is_own_node("http://[::1]:8080", "http://127.0.0.1:8080/x")
    assert not urls.is_own_node("http://127.0.0.1:8080", "http://127.0.0.1:8081")
    assert not urls.is_own_node("http://127.0.0.1:8080", "http://10.0.0.1:8080")
    assert not urls.is_own_node("http://127.0.0.1:8080", "https://127.0.0.1:8080")


def test_default_alias_for_url() -> None:
    assert resolve.default_alias_for_url("http://h:1/prices/") == "prices"
    assert resolve.default_alias_for_url("http://h:1/acc/my.data") == "my.data"
    assert resolve.default_alias_for_url("http://h:1/fed01" + "ab" * 32 + "/") is None
    assert resolve.default_alias_for_url("http://h:1/") is None
