"""Pushes through a served S3 repository (smart protocol, SeaweedFS, the real ``odf``):
a server killed mid-push, GC during a push, what GC may take."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

import p2p.smart_transfer.client as smart_client
from p2p.http.s3_repo import S3Repo
from p2p.s3.push import push_to_s3
from p2p.s3.source import S3Source
from p2p.smart_transfer.client import smart_push
from p2p.smart_transfer.messages import TransferUrl
from p2p.smart_transfer.s3_server import s3_repository_app
from p2p.sync import pull_dataset
from storage.s3.client import S3Client
from storage.s3.gc import collect_s3_garbage
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace, serve

TOKEN = "s3-serve-push-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_a_served_push_reusing_an_orphan_restarts_its_age(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    repo = S3Repo(s3_client, s3_location, token=TOKEN)
    ws = new_workspace(tmp_path / "ws")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=1)
    loc = s3_location.child("prices")
    layout = S3DatasetLayout(s3_client, loc)
    push_to_s3(ds, loc, alias="prices", client=s3_client)
    add_slices(ds, tmp_path / "more", 1)
    new = next(h for h in ds.layout.data.iter_hashes() if not layout.data.has(h))
    layout.data.put_file(new, ds.layout.data.path_of(new))  # left by a push that died

    async def main() -> None:
        async with serve(s3_repository_app(repo)) as url, aiohttp.ClientSession() as s:
            pushed = await smart_push(ws, "prices", f"odf+{url}/prices", session=s, headers=AUTH)
            assert pushed.objects_uploaded == 0

    asyncio.run(main())
    assert layout.refs.get("head") == ds.head()
    # Re-used, so copied onto itself: its LastModified restarted with the push.
    meta = s3_client.raw.head_object(Bucket=s3_client.bucket, Key=layout.data.key_of(new))
    assert meta["Metadata"] == {"odf-touched": "1"}
    assert collect_s3_garbage(layout, grace_period_s=0).deleted == ()


def _odf(*argv: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None
    return subprocess.run([exe, *argv], capture_output=True, text=True, check=False)


class _Served:
    """An ``odf serve`` process of one repository (stopped by its PID)."""

    def __init__(self, url: str, token_file: Path) -> None:
        exe = shutil.which("odf", path=str(Path(sys.executable).parent))
        assert exe is not None
        argv = [exe, "serve", url, "--http-port", "0", "--token-file", str(token_file)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("Serving "):
            self.stop()
            raise AssertionError(self.proc.stderr.read() if self.proc.stderr else line)
        self.base = line.split(" on ")[1].strip().rstrip("/")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def served() -> Iterator[list[_Served]]:
    """Every ``odf serve`` a test starts, stopped at its end."""
    started: list[_Served] = []
    yield started
    for s in started:
        s.stop()


def _keys(client: S3Client, layout: S3DatasetLayout, under: str) -> list[str]:
    return [k for k, _ in client.list_keys(layout.location.key(under) + "/")]


def _token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o600)
    return path


def _pulled_and_verified(tmp_path: Path, name: str, url: str) -> Workspace:
    new_workspace(tmp_path / name)
    ws = str(tmp_path / name)
    pulled = _odf("--workspace", ws, "pull", url)
    assert pulled.returncode == 0, pulled.stderr
    checked = _odf("--workspace", ws, "verify", "prices", "--integrity")
    assert checked.returncode == 0, checked.stderr
    return Workspace.open(tmp_path / name)


@pytest.mark.slow
def test_odf_serve_killed_mid_push_then_a_retry_commits(
    tmp_path: Path,
    s3_client: S3Client,
    s3_location: S3Location,
    served: list[_Served],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = new_workspace(tmp_path / "src")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=2)
    token = _token(tmp_path)
    served.append(_Served(s3_location.to_url(), token))
    real_upload = smart_client._upload

    async def upload_then_kill(
        s: aiohttp.ClientSession, url: TransferUrl, path: Path, size: int
    ) -> None:
        await real_upload(s, url, path, size)  # S3 keeps it under quarantine/
        served[0].stop(signal.SIGKILL)

    monkeypatch.setattr(smart_client, "_upload", upload_then_kill)

    async def push(base: str) -> None:
        async with aiohttp.ClientSession() as s:
            await smart_push(ws, "prices", f"odf+{base}/prices", session=s, headers=AUTH)

    with pytest.raises(Exception):  # noqa: B017 (the connection dies: any transport error)
        asyncio.run(push(served[0].base))
    layout = S3DatasetLayout(s3_client, s3_location.child("prices"))
    assert layout.refs.get_or_none("head") is None
    assert _keys(s3_client, layout, "data") == [] and _keys(s3_client, layout, "blocks") == []
    assert _keys(s3_client, layout, "quarantine")  # the upload that landed before the kill

    monkeypatch.setattr(smart_client, "_upload", real_upload)
    served.append(_Served(s3_location.to_url(), token))
    url = f"odf+{served[1].base}/prices"
    pushed = _odf(
        "--workspace", str(ws.root), "push", "prices", "--to", url, "--token-file", str(token)
    )
    assert pushed.returncode == 0, pushed.stderr
    assert layout.refs.get("head") == ds.head()
    assert _pulled_and_verified(tmp_path, "dst", url).get("prices").head() == ds.head()

    # What the killed push left in quarantine/ goes once the grace period is over.
    gc = _odf("gc", layout.location.to_url(), "--grace-period", "0")
    assert gc.returncode == 0, gc.stderr
    assert _keys(s3_client, layout, "quarantine") == []
    dst = new_workspace(tmp_path / "dst2")
    asyncio.run(pull_dataset(dst, S3Source(layout), alias="prices"))
    assert verify_integrity(dst.get("prices")).ok and dst.get("prices").head() == ds.head()


@pytest.mark.slow
def test_gc_during_a_push_takes_nothing_the_push_needs(
    tmp_path: Path,
    s3_client: S3Client,
    s3_location: S3Location,
    served: list[_Served],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = new_workspace(tmp_path / "src")
    ds = make_dataset(ws, "prices", tmp_path / "files", slices=1)
    layout = S3DatasetLayout(s3_client, s3_location.child("prices"))
    push_to_s3(ds, layout.location, alias="prices", client=s3_client)
    add_slices(ds, tmp_path / "more", 1)
    served.append(_Served(s3_location.to_url(), _token(tmp_path)))
    real_upload = smart_client._upload
    reports: list[str] = []

    async def upload_then_gc(
        s: aiohttp.ClientSession, url: TransferUrl, path: Path, size: int
    ) -> None:
        await real_upload(s, url, path, size)
        gc = await asyncio.to_thread(_odf, "gc", layout.location.to_url())  # the default grace
        assert gc.returncode == 0, gc.stderr
        reports.append(gc.stdout)

    monkeypatch.setattr(smart_client, "_upload", upload_then_gc)

    async def push() -> None:
        async with aiohttp.ClientSession() as s:
            url = f"odf+{served[0].base}/prices"
            pushed = await smart_push(ws, "prices", url, session=s, headers=AUTH)
            assert pushed.objects_uploaded == 1

    asyncio.run(push())
    assert len(reports) == 1 and reports[0].startswith("Deleted 0 "), reports
    assert layout.refs.get("head") == ds.head()
    url = f"odf+{served[0].base}/prices"
    assert _pulled_and_verified(tmp_path, "dst", url).get("prices").head() == ds.head()
