"""No write without authority: the HTTP API's token, Origin and Host checks.

Against the real daemon (`node.daemon.service.NodeDaemon`, HTTP on 127.0.0.1, port 0) serving a
workspace with the demo's push-source dataset, and the real `node.http.api` app. Every
refusal is checked to leave the dataset folder byte-for-byte unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from node.cli import main
from node.cli_util import EXIT_OK, EXIT_USAGE
from node.daemon.config import NodeConfig, parse_config
from node.daemon.service import NodeDaemon
from node.http.api import HttpApiConfig, create_app
from node.http.auth import (
    TOKEN_ENV,
    AccessPolicy,
    TokenFileError,
    bearer_headers,
    load_or_create_token,
    read_token,
    token_path,
)
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace, serve

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

EXAMPLES = Path(__file__).resolve().parents[2] / "node" / "examples"
DS = "demo.city-populations"
CFG = NodeConfig(http_port=0, head_poll_interval_s=0.1, pull_retry_delay_s=0.1)
FORGED = b"event_time,city,population\n2030-01-01T00:00:00Z,Forged,666\n"
HONEST = b"event_time,city,population\n2021-01-01T00:00:00Z,C,3000\n"


def city_workspace(root: Path) -> Workspace:
    """A workspace owning the demo's push-source dataset with one ingest."""
    root.mkdir(parents=True)
    assert main(["-w", str(root), "init"]) == EXIT_OK
    assert main(["-w", str(root), "add", str(EXAMPLES / "city-populations.yaml")]) == EXIT_OK
    csv = EXAMPLES / "city-populations.csv"
    assert main(["-w", str(root), "ingest", DS, str(csv)]) == EXIT_OK
    return Workspace.open(root)


def tree_digest(path: Path) -> str:
    """SHA-256 over every file name and content under ``path`` (sorted)."""
    h = hashlib.sha256()
    for dirpath, dirnames, files in sorted(os.walk(path)):
        dirnames.sort()
        for name in sorted(files):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(path)).encode() + b"\0")
            h.update(p.read_bytes() if not p.is_symlink() else b"<symlink>")
    return h.hexdigest()


def dataset_dir(ws: Workspace) -> Path:
    return ws.root / "datasets" / ws.resolve(DS).id.as_multibase()


async def call(
    s: aiohttp.ClientSession, method: str, url: str, **kw: Any
) -> tuple[int, dict[str, Any], str]:
    """Status, JSON body and the raw first line of the body (refusals are one line)."""
    async with s.request(method, url, **kw) as r:
        text = await r.text()
        try:
            doc = await r.json(content_type=None)
        except ValueError:
            doc = {}
        return r.status, doc if isinstance(doc, dict) else {"list": doc}, text


@pytest.fixture
def city(tmp_path: Path) -> Workspace:
    return city_workspace(tmp_path / "n")


# -- a forged cross-origin write, and the token --------------------------------------------


async def test_cross_origin_simple_request_is_refused_and_nothing_changes(
    city: Workspace,
) -> None:
    ds = city.get(DS)
    head = ds.head()
    before = tree_digest(dataset_dir(city))
    async with NodeDaemon(city, CFG) as node, aiohttp.ClientSession() as s:
        token = read_token(city.root)
        assert token is not None
        ingest = f"{node.http_url}/{DS}/ingest?format=csv"
        evil = {"Content-Type": "text/plain", "Origin": "http://evil.example"}
        # The simple request any web page can send: refused before anything happens.
        status, doc, text = await call(s, "POST", ingest, data=FORGED, headers=evil)
        assert status == 403 and "cross-origin" in doc["error"] and "\n" not in text
        # A page that somehow knew the token gets no further.
        status, _d, _t = await call(
            s, "POST", ingest, data=FORGED, headers={**evil, **bearer_headers(token)}
        )
        assert status == 403
        # Browsers' fetch metadata alone is enough too.
        status, _d, _t = await call(
            s,
            "POST",
            ingest,
            data=FORGED,
            headers={"Sec-Fetch-Site": "cross-site", **bearer_headers(token)},
        )
        assert status == 403
        # Any local process without the token: 401 with a Bearer challenge.
        async with s.post(ingest, data=FORGED, headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 401
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert "Bearer" in (await r.json())["error"]
        # A wrong token, a token of the wrong scheme, an empty one.
        for auth in (
            "Bearer " + "x" * len(token),
            "Bearer " + token[:-1],
            "Basic " + token,
            "Bearer",
            token,
        ):
            status, doc, _t = await call(
                s, "POST", ingest, data=FORGED, headers={"Authorization": auth}
            )
            assert status == 401 and doc["error"] == "invalid token", auth
        # DNS rebinding: a foreign name in Host, even with the right token.
        port = node.http_url.rsplit(":", 1)[1]
        status, doc, _t = await call(
            s,
            "POST",
            ingest,
            data=FORGED,
            headers={"Host": f"evil.example:{port}", **bearer_headers(token)},
        )
        assert status == 403 and "Host" in doc["error"]
        # ... and for reads too (a rebound page must not read the API either).
        status, _d, _t = await call(
            s, "GET", f"{node.http_url}/api/status", headers={"Host": f"evil.example:{port}"}
        )
        assert status == 403
        assert ds.head() == head
        assert tree_digest(dataset_dir(city)) == before

        # The right token: accepted, committed.
        status, doc, _t = await call(
            s,
            "POST",
            ingest,
            data=HONEST,
            headers={"Content-Type": "text/plain", **bearer_headers(token)},
        )
        assert status == 200 and doc["numRecords"] == 1, doc
        assert ds.head() != head and doc["newHead"] == str(ds.head())
        # localhost names and the node's own origin are fine.
        status, _d, _t = await call(
            s,
            "GET",
            f"{node.http_url}/api/status",
            headers={"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
        )
        assert status == 200
    from node.api import open_workspace

    cities = open_workspace(city.root.parent).dataset(DS).to_arrow().column("city").to_pylist()
    assert "C" in cities and "Forged" not in cities


async def test_every_write_route_needs_the_token(tmp_path: Path, city: Workspace) -> None:
    """The route table of SECURITY-THREAT-MODEL.md: no token, no change, on every write."""
    owner = new_workspace(tmp_path / "owner")
    make_dataset(owner, "pushed", tmp_path / "f", 1)
    did = owner.resolve("pushed").id
    before = tree_digest(city.root / "datasets")
    aliases = sorted(e.alias for e in city.list())
    h = "f1620" + "ab" * 32
    async with NodeDaemon(city, CFG) as node, aiohttp.ClientSession() as s:
        u = node.http_url
        writes = [
            ("PUT", f"{u}/{DS}/data/{h}", b"x"),
            ("PUT", f"{u}/{DS}/checkpoints/{h}", b"x"),
            ("POST", f"{u}/{did.as_multibase()}/push?alias=pushed", b"\0\0\0\0"),
            ("POST", f"{u}/{DS}/push", b""),
            ("POST", f"{u}/{DS}/ingest", FORGED),
            ("POST", f"{u}/{DS}/ingest/default", FORGED),
            ("POST", f"{u}/acc/{DS.split('.')[1]}/ingest", FORGED),
            ("POST", f"{u}/{DS}/attestations", b"{}"),
            ("POST", f"{u}/api/attestations/{DS}", b"[]"),
            ("POST", f"{u}/api/follow", b'{"dataset": "all"}'),
            ("DELETE", f"{u}/api/follow", b'{"dataset": "all"}'),
            ("PATCH", f"{u}/api/status", b""),
            ("POST", f"{u}/anything/else", b""),
        ]
        for method, url, body in writes:
            for headers in ({}, {"Authorization": "Bearer " + "y" * 43}):
                status, doc, text = await call(s, method, url, data=body, headers=headers)
                assert status == 401, (method, url, status, text)
                assert set(doc) == {"error"} and text.count("\n") == 0
        async with s.get(f"{u}/api/follow") as r:
            assert (await r.json())["follow"] == []
    assert tree_digest(city.root / "datasets") == before
    assert sorted(e.alias for e in city.list()) == aliases
    assert not [f for _r, _d, fs in os.walk(city.root) for f in fs if f.startswith(".pending")]


async def test_reads_stay_open_to_non_browser_clients(city: Workspace) -> None:
    """kamu and curl send no Origin and no token: the transfer protocol works for them."""
    ds = city.get(DS)
    head = ds.head()
    assert head is not None
    data_h = next(iter(ds.layout.data.iter_hashes()))
    async with NodeDaemon(city, CFG) as node, aiohttp.ClientSession() as s:
        did = city.resolve(DS).id.as_multibase()
        for base in (f"{node.http_url}/{DS}/", f"{node.http_url}/{did}/"):
            async with s.get(base + "refs/head") as r:
                assert r.status == 200 and await r.text() == str(head)
            async with s.get(base + f"blocks/{head}") as r:
                assert r.status == 200 and await r.read() == ds.layout.blocks.get(head)
            async with s.get(base + f"data/{data_h}") as r:
                assert r.status == 200 and await r.read() == ds.layout.data.get(data_h)
            async with s.head(base + f"data/{data_h}") as r:
                assert r.status == 200
            async with s.get(base + "blocks", params={"head": str(head)}) as r:
                assert r.status == 200
            async with s.get(base + "refs/head.sig") as r:
                assert r.status == 200
            async with s.get(base + "attestations") as r:
                assert r.status == 200
        for path in ("/api/status", "/api/datasets", "/api/peers", "/api/follow"):
            async with s.get(node.http_url + path) as r:
                assert r.status == 200, path
        # Host = the IP used, with or without a port, IPv4 or a *.localhost name.
        for host in ("127.0.0.1", "127.0.0.1:1", "app.localhost:8080", "LOCALHOST."):
            async with s.get(f"{node.http_url}/{DS}/refs/head", headers={"Host": host}) as r:
                assert r.status == 200, host


async def test_checkpoint_reads_are_open_and_uploads_are_not(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "w")
    ds = make_dataset(ws, "prices", tmp_path / "f", 1, checkpoints=True)
    cp = next(iter(ds.layout.checkpoints.iter_hashes()))
    content = b"new object"
    from fbs.multiformats import Multihash

    h = Multihash.sha3_256(content)
    async with serve(create_app(ws)) as url, aiohttp.ClientSession() as s:
        async with s.get(f"{url}/prices/checkpoints/{cp}") as r:
            assert r.status == 200
        async with s.put(f"{url}/prices/checkpoints/{h}", data=content) as r:
            assert r.status == 401
        assert not ds.layout.checkpoints.has(h)
        auth = bearer_headers(read_token(ws.root))
        async with s.put(f"{url}/prices/checkpoints/{h}", data=content, headers=auth) as r:
            assert r.status == 201
        assert ds.layout.checkpoints.get(h) == content


# -- the CLI uses the token ------------------------------------------------------------------


async def test_odf_push_and_node_commands_with_the_token(
    tmp_path: Path, city: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    assert main(["-w", str(mine), "init"]) == EXIT_OK
    assert main(["-w", str(mine), "add", str(EXAMPLES / "city-populations.yaml")]) == EXIT_OK
    csv = EXAMPLES / "city-populations.csv"
    assert main(["-w", str(mine), "ingest", DS, str(csv)]) == EXIT_OK
    local = Workspace.open(mine)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    async with NodeDaemon(city, CFG) as node:
        to = node.http_url

        def odf(ws: Path, *argv: str) -> int:
            return main(["-w", str(ws), *argv])

        # Another workspace pushing to this node: no token, refused, exit 2.
        code = await asyncio.to_thread(odf, mine, "push", DS, "--to", to, "--as", "copy")
        assert code == EXIT_USAGE
        assert "copy" not in [e.alias for e in city.list()]
        # With the node's token (env): pushed end to end.
        token = read_token(city.root)
        assert token is not None
        monkeypatch.setenv(TOKEN_ENV, token)
        code = await asyncio.to_thread(odf, mine, "push", DS, "--to", to, "--as", "copy")
        assert code == EXIT_OK
        assert city.get("copy").head() == local.get(DS).head()
        monkeypatch.delenv(TOKEN_ENV)
        # The node's own workspace: the CLI reads .odf/p2p/http-token by itself.
        assert await asyncio.to_thread(odf, city.root.parent, "node", "follow", "all") == 0
        assert node.follow_all
        assert await asyncio.to_thread(odf, city.root.parent, "node", "unfollow", "all") == 0
        assert not node.follow_all
        assert await asyncio.to_thread(odf, city.root.parent, "node", "status") == EXIT_OK


# -- the token file and the policy ------------------------------------------------------


def test_token_file_is_private_stable_and_checked(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "w")
    assert read_token(ws.root) is None
    token = load_or_create_token(ws.root)
    path = token_path(ws.root)
    assert path == ws.root / "p2p" / "http-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 43 and load_or_create_token(ws.root) == token == read_token(ws.root)
    assert not [f for f in os.listdir(path.parent) if f.startswith(".pending")]
    # Readable by others: refused, whoever asks (node start, create_app, the CLI).
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match="chmod 600"):
        load_or_create_token(ws.root)
    with pytest.raises(TokenFileError):
        create_app(ws)
    path.chmod(0o600)
    # A symlink to a file someone else controls: refused.
    other = tmp_path / "planted"
    other.write_text("z" * 43)
    other.chmod(0o600)
    path.unlink()
    path.symlink_to(other)
    with pytest.raises(TokenFileError):
        read_token(ws.root)
    path.unlink()
    path.write_text("not a token\n")
    path.chmod(0o600)
    with pytest.raises(TokenFileError):
        read_token(ws.root)
    path.unlink()
    # Created again on the next start; a new token.
    assert load_or_create_token(ws.root) != token


async def test_daemon_refuses_to_start_with_an_unsafe_token_file(tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "w")
    path = token_path(ws.root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("q" * 43)
    path.chmod(0o640)
    with pytest.raises(TokenFileError):
        await NodeDaemon(ws, CFG).start()


def test_host_policy() -> None:
    p = AccessPolicy.create("t" * 43, ["node1.example.org", "[::1]:8080", "0.0.0.0"])
    for ok in (
        None,
        "127.0.0.1:8080",
        "10.1.2.3",
        "[::1]:8080",
        "[fe80::1]",
        "localhost",
        "Localhost:80",
        "a.b.localhost:9",
        "node1.example.org:8080",
        "NODE1.example.org.",
    ):
        assert p.host_allowed(ok), ok
    for bad in (
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "node1.example.org.evil",
        "",
        "[::1",
        "a b",
        "user@127.0.0.1",
        "127.0.0.1:80x",
        "0.0.0.0.example",
    ):
        assert not p.host_allowed(bad), bad
    assert AccessPolicy.create("t" * 43, ["*"]).host_allowed("anything.example")
    with pytest.raises(TokenFileError):
        AccessPolicy.create("short")
    # Origins: only the node's own (http or https on the same Host), never "null".
    own = {"Host": "127.0.0.1:8080"}
    assert p.browser_refusal({**own, "Origin": "http://127.0.0.1:8080"}) is None
    assert p.browser_refusal({**own, "Sec-Fetch-Site": "same-origin"}) is None
    for origin in ("null", "http://127.0.0.1:8081", "http://localhost:8080", "file://"):
        assert p.browser_refusal({**own, "Origin": origin}) is not None, origin
    assert p.browser_refusal({"Origin": "http://127.0.0.1:8080"}) is not None  # no Host
    # Reads need no token; every other method does.
    for method in ("GET", "HEAD", "OPTIONS"):
        assert p.token_refusal(method, {}) is None
    for method in ("POST", "PUT", "DELETE", "PATCH", "TRACE", "PROPFIND"):
        refused = p.token_refusal(method, {})
        assert refused is not None and refused[0] == 401
        assert p.token_refusal(method, {"Authorization": "bearer " + "t" * 43}) is None


def test_allowed_hosts_config() -> None:
    cfg = parse_config({"http": {"host": "0.0.0.0", "port": 0, "allowed_hosts": ["a.example"]}})
    assert cfg.http_allowed_hosts == ("a.example",)
    assert parse_config({"http": {"allowed_hosts": "b.example"}}).http_allowed_hosts == (
        "b.example",
    )
    from node.errors import UsageError

    for bad in ({"http": {"allowed_hosts": 3}}, {"http": {"allowed_hosts": [""]}}):
        with pytest.raises(UsageError):
            parse_config(bad)
    assert "s" * 43 not in repr(HttpApiConfig(token="s" * 43))  # never printed
