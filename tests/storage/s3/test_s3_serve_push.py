"""Pushes through a served S3 repository (smart protocol, SeaweedFS): what GC may take."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from p2p.http.s3_repo import S3Repo
from p2p.s3.push import push_to_s3
from p2p.smart_transfer.client import smart_push
from p2p.smart_transfer.s3_server import s3_repository_app
from storage.s3.client import S3Client
from storage.s3.gc import collect_s3_garbage
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
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
