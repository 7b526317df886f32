"""An S3 repository served by a node: objects move by presigned URLs only (SeaweedFS).

Pulls get presigned ``GET`` URLs (smart protocol) or redirects to them (simple
protocol): the node answers no object request itself. Presigned URLs are checked by S3:
expired or altered, 403. Pushes upload to presigned ``PUT`` URLs under ``quarantine/``;
an upload that is not the object it claims never appears under ``data/``. (Here, not
under tests/p2p, to share the storage tests' SeaweedFS.)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import pytest
import requests

import p2p.smart_transfer.client as smart_client
from fbs.multiformats import Multihash
from p2p.http.s3_repo import S3Repo
from p2p.http.source import HttpSource
from p2p.s3.push import push_to_s3
from p2p.s3.source import S3Source
from p2p.smart_transfer.client import SmartRefused, SmartSource, smart_push
from p2p.smart_transfer.messages import TransferUrl
from p2p.smart_transfer.s3_server import s3_repository_app
from p2p.sync import pull_dataset
from storage.errors import HashMismatch
from storage.s3.client import S3Client
from storage.s3.layout import S3DatasetLayout
from storage.s3.presign import presign_get, presign_put
from storage.s3.quarantine import admit_upload, new_upload_key
from storage.s3.url import S3Location
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve

TOKEN = "s3-presigned-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def repo(s3_client: S3Client, s3_location: S3Location) -> Iterator[S3Repo]:
    yield S3Repo(s3_client, s3_location, token=TOKEN)


def _keys(client: S3Client, location: S3Location, under: str) -> list[str]:
    return [k for k, _ in client.list_keys(location.key(under) + "/")]


def _published(tmp_path: Path, repo: S3Repo) -> Workspace:
    """A workspace whose dataset ``prices`` (3 slices, checkpoints) is in the repository."""
    ws = new_workspace(tmp_path / "src")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=3, checkpoints=True)
    push_to_s3(ds, repo.location.child("prices"), alias="prices", client=repo.client)
    return ws


def _same(a: Workspace, b: Workspace) -> None:
    da, db = a.get("prices"), b.get("prices")
    assert da.head() == db.head()
    assert set(da.layout.data.iter_hashes()) == set(db.layout.data.iter_hashes())
    assert set(da.layout.checkpoints.iter_hashes()) == set(db.layout.checkpoints.iter_hashes())
    assert verify_integrity(db).ok


@pytest.mark.slow
def test_pulls_take_every_object_from_presigned_urls(tmp_path: Path, repo: S3Repo) -> None:
    src = _published(tmp_path, repo)

    async def main() -> None:
        async with serve(s3_repository_app(repo)) as url, aiohttp.ClientSession() as s:
            async with SmartSource(f"odf+{url}/prices", s) as source:
                smart = await pull_dataset(
                    new_workspace(tmp_path / "smart"), source, alias="prices"
                )
            assert smart.objects_fetched == 6
            assert repo.requests["data"] == repo.requests["checkpoint"] == 0
            simple = HttpSource(f"{url}/prices/", s)
            await pull_dataset(new_workspace(tmp_path / "simple"), simple, alias="prices")
            # Each object request was answered by a redirect to S3, never by its bytes.
            assert repo.requests["data"] == 3 and repo.requests["checkpoint"] == 3

    asyncio.run(main())
    _same(src, Workspace.open(tmp_path / "smart"))
    _same(src, Workspace.open(tmp_path / "simple"))


def _tampered(url: str, param: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    value = query[param]
    query[param] = ("0" if value[0] != "0" else "1") + value[1:]
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.mark.slow
def test_expired_or_altered_urls_are_refused_by_s3(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    key = s3_location.key("data/object")
    assert s3_client.put_if_absent(key, b"bytes")
    good = presign_get(s3_client, key).url
    assert requests.get(good, timeout=30).content == b"bytes"
    assert requests.get(_tampered(good, "X-Amz-Signature"), timeout=30).status_code == 403
    other = good.replace("/data/object?", "/data/other?")
    assert requests.get(other, timeout=30).status_code == 403
    put = presign_put(s3_client, s3_location.key("quarantine/u1"), 1).url
    assert requests.put(_tampered(put, "X-Amz-Signature"), data=b"x", timeout=30).status_code == 403
    assert s3_client.stat(s3_location.key("quarantine/u1")) is None
    short = presign_get(s3_client, key, expires_s=1).url
    time.sleep(2.5)  # past its expiry (whole seconds, by the server's clock)
    assert requests.get(short, timeout=30).status_code == 403


@pytest.mark.slow
def test_a_push_uploads_into_quarantine_then_lands_verified(tmp_path: Path, repo: S3Repo) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", slices=2, checkpoints=True)

    async def main() -> None:
        async with serve(s3_repository_app(repo)) as url, aiohttp.ClientSession() as s:
            with pytest.raises(Exception, match="401"):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s)
            r1 = await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert r1.old_head is None and r1.objects_uploaded == 4
            add_slices(ds, tmp_path / "more", 1)
            r2 = await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert r2.objects_uploaded == 1
        assert repo.requests["data"] == repo.requests["checkpoint"] == 0

    asyncio.run(main())
    loc = repo.location.child("prices")
    assert S3DatasetLayout(repo.client, loc).refs.get("head") == ds.head()
    assert _keys(repo.client, loc, "quarantine") == []
    dst = new_workspace(tmp_path / "dst")
    asyncio.run(pull_dataset(dst, S3Source(S3DatasetLayout(repo.client, loc)), alias="prices"))
    _same(src, dst)


@pytest.mark.slow
def test_a_pushed_object_that_is_not_its_hash_never_appears_under_data(
    tmp_path: Path, repo: S3Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", slices=1)
    real_upload = smart_client._upload

    async def forged(s: aiohttp.ClientSession, url: TransferUrl, path: Path, size: int) -> None:
        fake = tmp_path / "forged"
        fake.write_bytes(bytes(size))  # the declared size, other bytes
        await real_upload(s, url, fake, size)

    monkeypatch.setattr(smart_client, "_upload", forged)

    async def main() -> None:
        async with serve(s3_repository_app(repo)) as url, aiohttp.ClientSession() as s:
            with pytest.raises(SmartRefused, match="refused upload"):
                await smart_push(src, "prices", f"odf+{url}/prices", session=s, headers=AUTH)

    asyncio.run(main())
    loc = repo.location.child("prices")
    assert _keys(repo.client, loc, "data") == [] and _keys(repo.client, loc, "checkpoints") == []
    assert _keys(repo.client, loc, "quarantine") == []
    assert S3DatasetLayout(repo.client, loc).refs.get_or_none("head") is None
    assert ds.head() is not None


@pytest.mark.slow
def test_uploads_are_size_bound_and_hashed_before_they_are_named(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    layout = S3DatasetLayout(s3_client, s3_location)
    good = b"the object"
    h = Multihash.sha3_256(good)
    key = new_upload_key(layout)
    put: Any = presign_put(s3_client, key, len(good))
    assert requests.put(put.url, data=b"not the objec", timeout=30).status_code == 403
    assert requests.put(put.url, data=b"not the obj", timeout=30).status_code == 403
    assert requests.put(put.url, data=b"another on", timeout=30).status_code == 200
    with pytest.raises(HashMismatch):
        admit_upload(layout, "data", key, h, len(good))
    assert not layout.data.has(h) and s3_client.stat(key) is None
    key = new_upload_key(layout)
    assert requests.put(presign_put(s3_client, key, len(good)).url, data=good).status_code == 200
    assert admit_upload(layout, "data", key, h, len(good))
    assert layout.data.get(h) == good
    assert _keys(s3_client, s3_location, "quarantine") == []


@pytest.mark.slow
def test_odf_serve_serves_the_repository(tmp_path: Path, repo: S3Repo) -> None:
    src = _published(tmp_path, repo)
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    argv = [exe, "serve", repo.location.to_url(), "--http-port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Serving "), proc.stderr.read() if proc.stderr else ""
        base = line.split(" on ")[1].strip()
        head = requests.get(f"{base}prices/refs/head", timeout=30)
        assert head.text == str(src.get("prices").head())
        h = next(iter(src.get("prices").layout.data.iter_hashes()))
        moved = requests.get(f"{base}prices/data/{h}", allow_redirects=False, timeout=30)
        assert moved.status_code == 307 and "X-Amz-Signature=" in moved.headers["Location"]
        assert requests.get(moved.headers["Location"], timeout=30).content == (
            src.get("prices").layout.data.get(h)
        )
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()
