# ruff: noqa: F811  (the S3 fixtures are imported, then named as test arguments)
"""Repositories on S3 (SeaweedFS): push a dataset in kamu's layout, pull it back verified.

A pull goes through the one receive path (`p2p.sync.pull_dataset` with `S3Source`): a
bucket that serves a forged object or block gets nothing into the workspace.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from p2p.errors import NotDescendant, P2PError
from p2p.s3.push import push_to_s3
from p2p.s3.source import S3Source
from p2p.sync import pull_dataset
from storage.s3.client import S3Client, connect
from storage.s3.errors import ConditionalWritesUnsupported
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
from storage.verify import verify_integrity
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace
from tests.storage.s3.conftest import (  # noqa: F401
    s3_client,
    s3_location,
    seaweed,
    seaweed_client,
)
from tests.storage.s3.nocas_server import nocas_server


def _pull(dst_root: Path, location: S3Location, alias: str = "prices") -> object:
    dst = new_workspace(dst_root) if not (dst_root / ".odf").exists() else None
    from storage.workspace import Workspace

    ws = dst or Workspace.open(dst_root)
    source = S3Source(S3DatasetLayout(connect(location), location))
    return asyncio.run(pull_dataset(ws, source, alias=alias))


def _keys(client: S3Client, location: S3Location) -> list[str]:
    start = len(location.prefix) + 1
    return sorted(k[start:] for k, _ in client.list_keys(location.prefix + "/"))


def test_push_then_pull_round_trips_in_kamus_layout(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", slices=3, checkpoints=True)
    loc = s3_location.child("prices")
    result = push_to_s3(ds, loc, alias="prices")
    assert (result.old_head, result.new_head) == (None, ds.head())
    assert result.objects_pushed == 6
    keys = _keys(s3_client, loc)
    assert "refs/head" in keys and "info/alias" in keys
    assert {k.split("/")[0] for k in keys} == {"refs", "blocks", "data", "checkpoints", "info"}
    assert len([k for k in keys if k.startswith("blocks/")]) == result.blocks_pushed
    assert S3DatasetLayout(s3_client, loc).refs.get("head") == ds.head()

    pulled = _pull(tmp_path / "dst", loc)
    from storage.workspace import Workspace

    copy = Workspace.open(tmp_path / "dst").get("prices")
    assert copy.head() == ds.head()
    assert verify_integrity(copy).ok
    assert pulled is not None

    # Incremental: two more slices, pushed and pulled again.
    add_slices(ds, tmp_path / "files2", 2)
    again = push_to_s3(ds, loc)
    assert (again.old_head, again.blocks_pushed, again.objects_pushed) == (result.new_head, 2, 2)
    assert push_to_s3(ds, loc).blocks_pushed == 0  # up to date
    _pull(tmp_path / "dst", loc)
    copy = Workspace.open(tmp_path / "dst").get("prices")
    assert copy.head() == ds.head()
    assert verify_integrity(copy).ok


def test_forged_object_in_the_bucket_never_reaches_the_workspace(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", slices=2)
    loc = s3_location.child("prices")
    push_to_s3(ds, loc)
    layout = S3DatasetLayout(s3_client, loc)
    victim = next(iter(layout.data.iter_hashes()))
    good = layout.data.get(victim)
    forged = bytes([good[0] ^ 1]) + good[1:]
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=layout.data.key_of(victim), Body=forged)
    with pytest.raises(P2PError):
        _pull(tmp_path / "dst", loc)
    from storage.workspace import Workspace

    assert Workspace.open(tmp_path / "dst").list() == []


def test_forged_block_in_the_bucket_is_refused(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", slices=1)
    loc = s3_location.child("prices")
    push_to_s3(ds, loc)
    layout = S3DatasetLayout(s3_client, loc)
    head = ds.head()
    assert head is not None
    raw = layout.blocks.get(head)
    i = len(raw) // 2
    forged = raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1 :]
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=layout.blocks.key_of(head), Body=forged)
    with pytest.raises(P2PError):
        _pull(tmp_path / "dst", loc)


def test_push_refuses_a_diverged_repository(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    loc = s3_location.child("prices")
    one = make_dataset(new_workspace(tmp_path / "a"), "prices", tmp_path / "fa", slices=1)
    other = make_dataset(new_workspace(tmp_path / "b"), "prices", tmp_path / "fb", slices=1)
    push_to_s3(one, loc)
    with pytest.raises(NotDescendant):
        push_to_s3(other, loc)
    assert S3DatasetLayout(s3_client, loc).refs.get("head") == one.head()


def test_push_to_a_store_without_conditional_writes_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    ds = make_dataset(new_workspace(tmp_path / "src"), "prices", tmp_path / "files", slices=1)
    with nocas_server() as (endpoint, objects, writes):
        loc = S3Location(endpoint, "bucket", "repo/prices")
        with pytest.raises(ConditionalWritesUnsupported):
            push_to_s3(ds, loc)
        assert objects == {}
        assert all("/.odf-cas-probe-" in w for w in writes)


def test_credentials_from_the_aws_config_files(
    tmp_path: Path, s3_location: S3Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    creds = tmp_path / "aws-credentials"
    creds.write_text(
        "[odf-test]\n"
        f"aws_access_key_id = {os.environ['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {os.environ['AWS_SECRET_ACCESS_KEY']}\n"
    )
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_PROFILE", "odf-test")
    ds = make_dataset(new_workspace(tmp_path / "src"), "prices", tmp_path / "files", slices=1)
    assert push_to_s3(ds, s3_location.child("prices")).new_head == ds.head()


def test_a_push_that_dies_before_the_head_moves_changes_nothing_visible(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.s3.refs import S3RefStore

    loc = s3_location.child("prices")
    ds = make_dataset(new_workspace(tmp_path / "src"), "prices", tmp_path / "files", slices=1)
    push_to_s3(ds, loc)
    old_head = ds.head()
    add_slices(ds, tmp_path / "more", 1)

    def die(*_args: object) -> None:
        raise KeyboardInterrupt  # the writer is killed between its objects and the head

    monkeypatch.setattr(S3RefStore, "set_if_equals", die)
    with pytest.raises(KeyboardInterrupt):
        push_to_s3(ds, loc)
    monkeypatch.undo()
    layout = S3DatasetLayout(s3_client, loc)
    assert layout.refs.get("head") == old_head
    assert len(list(layout.data.iter_hashes())) == 2  # the orphan slice is there, unnamed
    _pull(tmp_path / "dst", loc)
    from storage.workspace import Workspace

    assert Workspace.open(tmp_path / "dst").get("prices").head() == old_head


def test_a_garbled_head_in_the_bucket_is_refused(
    tmp_path: Path, s3_client: S3Client, s3_location: S3Location
) -> None:
    loc = s3_location.child("prices")
    ds = make_dataset(new_workspace(tmp_path / "src"), "prices", tmp_path / "files", slices=1)
    push_to_s3(ds, loc)
    key = S3DatasetLayout(s3_client, loc).refs.key_of("head")
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=key, Body=b"../../etc/passwd")
    with pytest.raises(P2PError):
        _pull(tmp_path / "dst", loc)
