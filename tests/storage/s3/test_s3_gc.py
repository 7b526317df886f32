"""Fast unit tests of GC on S3 against moto: what is kept, what goes, and in which order."""

from __future__ import annotations

import argparse

import pytest

from fbs.model import DatasetKind, Seed
from fbs.multiformats import Multihash
from node.commands.gc import parse_grace
from storage.errors import DatasetNotFound
from storage.gc import DEFAULT_GC_GRACE_S
from storage.s3.client import KeyStat, S3Client
from storage.s3.commit import S3Committer
from storage.s3.gc import collect_s3_garbage, referenced_keys
from storage.s3.layout import S3DatasetLayout
from tests.storage.s3.conftest import MOTO_LOCATION
from tests.storage.s3.race import RACE_DID

LOC = MOTO_LOCATION


@pytest.fixture
def layout(moto_client: S3Client) -> S3DatasetLayout:
    return S3DatasetLayout(moto_client, LOC)


def _seed(layout: S3DatasetLayout) -> None:
    S3Committer(layout).commit(lambda _s: Seed(dataset_id=RACE_DID, dataset_kind=DatasetKind.Root))


def _stat(client: S3Client, key: str) -> KeyStat:
    stat = client.stat(key)
    assert stat is not None
    return stat


def test_unreferenced_objects_go_only_after_the_grace_period(layout: S3DatasetLayout) -> None:
    _seed(layout)
    junk = b"orphan"
    layout.data.put(Multihash.sha3_256(junk), junk)
    quarantined = layout.location.key("quarantine/upload-1")
    layout.client.put_if_absent(quarantined, b"never verified")
    orphan = layout.data.key_of(Multihash.sha3_256(junk))
    t = _stat(layout.client, orphan).mtime
    inside = collect_s3_garbage(layout, now=t + DEFAULT_GC_GRACE_S - 1)
    assert inside.deleted == () and set(inside.kept_recent) == {orphan, quarantined}
    dry = collect_s3_garbage(layout, now=t + DEFAULT_GC_GRACE_S + 1, dry_run=True)
    assert set(dry.deleted) == {orphan, quarantined}
    assert layout.client.stat(orphan) is not None
    after = collect_s3_garbage(layout, now=t + DEFAULT_GC_GRACE_S + 1)
    assert set(after.deleted) == {orphan, quarantined}
    assert after.bytes_freed == len(junk) + len(b"never verified") and after.referenced == 1
    assert layout.client.stat(orphan) is None
    assert len(referenced_keys(layout)) == 1  # the chain is untouched


def test_an_object_reused_during_the_run_is_kept(
    layout: S3DatasetLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(layout)
    junk = b"orphan"
    layout.data.put(Multihash.sha3_256(junk), junk)
    orphan = layout.data.key_of(Multihash.sha3_256(junk))
    listed = _stat(layout.client, orphan)
    real_stat = layout.client.stat

    def reused(key: str) -> KeyStat | None:  # a writer re-used it after the listing
        stat = real_stat(key)
        return None if stat is None else KeyStat(stat.size, stat.etag, listed.mtime + 5)

    monkeypatch.setattr(layout.client, "stat", reused)
    report = collect_s3_garbage(layout, now=listed.mtime + 10 * DEFAULT_GC_GRACE_S)
    assert report.deleted == () and report.kept_recent == (orphan,)
    assert real_stat(orphan) is not None


def test_no_head_means_nothing_is_deleted(layout: S3DatasetLayout) -> None:
    junk = b"orphan"
    layout.data.put(Multihash.sha3_256(junk), junk)
    with pytest.raises(DatasetNotFound):
        collect_s3_garbage(layout, grace_period_s=0)
    assert layout.data.has(Multihash.sha3_256(junk))


def test_refresh_restarts_only_a_present_object(layout: S3DatasetLayout) -> None:
    data = b"present"
    layout.data.put(Multihash.sha3_256(data), data)
    assert layout.data.refresh(Multihash.sha3_256(data))
    assert not layout.data.refresh(Multihash.sha3_256(b"absent"))
    assert layout.data.get(Multihash.sha3_256(data)) == data


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", 0.0), ("3600", 3600.0), ("90m", 5400.0), ("1h", 3600.0)]
)
def test_grace_durations(text: str, seconds: float) -> None:
    assert parse_grace(text) == seconds


@pytest.mark.parametrize("text", ["", "-1", "1w", "h", "1.h"])
def test_bad_grace_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_grace(text)
