"""Crash at every mutating file operation of a commit: the dataset stays sound.

For each crash point n of `Dataset.commit` (data object, checkpoint object, block,
ref, state cache), we crash there, optionally model a power loss (undo every
non-durable effect), then reopen with real file operations and check: the head is the
old or the new block, `verify_integrity` is clean, and the next commit works.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fbs.model import AddData
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from storage.dataset import Dataset, PendingEvent
from storage.faults import CrashAt, FsOps, SimulatedCrash, plan_crashes
from storage.layout import DatasetLayout
from storage.verify import verify_integrity
from tests.storage.test_dataset import SCHEMA, seeded_dataset, write_checkpoint, write_parquet

T = Timestamp.parse_rfc3339("2099-01-01T00:00:00Z")


def prepare(root: Path) -> tuple[Multihash, AddData, Path, Path]:
    """A dataset with Seed + schema, plus the files of one AddData; returns the old head."""
    ds = seeded_dataset(root, system_time=T)
    ds.commit(SCHEMA, system_time=T, expected_head=ds.head())
    slice_, data = write_parquet(root / "in.parquet", 0, 4)
    cp = write_checkpoint(root / "in.cp", b"ckpt")
    head = ds.head()
    assert head is not None
    event = AddData(new_data=slice_, new_checkpoint=cp, new_watermark=T)
    return head, event, data, root / "in.cp"


def reopen(root: Path, ops: FsOps | None = None) -> Dataset:
    layout = DatasetLayout(root / "ds") if ops is None else DatasetLayout(root / "ds", ops=ops)
    return Dataset(layout, state_cache=root / "cache" / "state.json")


def run_commit(root: Path, ops: FsOps) -> Multihash:
    head, event, data, cp = prepare(root)
    ds = reopen(root, ops)
    r = ds.commit(event, system_time=T, expected_head=head, data_file=data, checkpoint_file=cp)
    return r.new_head


def test_crash_points_are_counted(tmp_path: Path) -> None:
    plan = plan_crashes(lambda ops: run_commit(tmp_path / "probe", ops))
    kinds = [k for k, _ in plan.trace]
    # data, checkpoint, block and ref each go through create/write/fsync/replace/fsync_dir.
    assert kinds.count("replace") >= 4
    assert plan.count >= 16
    # The ref moves last among durable effects: every object replace comes before it.
    ref_replace = max(
        i for i, (k, p) in enumerate(plan.trace) if k == "replace" and p.endswith("head")
    )
    for i, (k, p) in enumerate(plan.trace):
        if k == "replace" and ("/data/" in p or "/blocks/" in p or "/checkpoints/" in p):
            assert i < ref_replace


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_crash_at_every_point(tmp_path: Path, power_loss: bool) -> None:
    plan = plan_crashes(lambda ops: run_commit(tmp_path / "probe", ops))
    new_head = run_commit(tmp_path / "reference", CrashAt(None))
    outcomes = {"old": 0, "new": 0}
    for n in plan.points():
        root = tmp_path / f"p{n}"
        old_head, event, data, cp = prepare(root)
        crash = CrashAt(n)
        ds = reopen(root, crash)
        with pytest.raises(SimulatedCrash):
            ds.commit(
                event, system_time=T, expected_head=old_head, data_file=data, checkpoint_file=cp
            )
        if power_loss:
            crash.power_loss()
        after = reopen(root)
        head = after.head()
        assert head in (old_head, new_head), f"crash point {n}: head {head}"
        outcomes["new" if head == new_head else "old"] += 1
        report = verify_integrity(after)
        assert report.ok, f"crash point {n}: {report.problems}"
        # The dataset is usable: the commit can be redone (or is already there).
        if head == old_head:
            r = after.commit(
                event, system_time=T, expected_head=old_head, data_file=data, checkpoint_file=cp
            )
            assert r.new_head == new_head
        assert verify_integrity(after).ok
        assert after.state() is not None and after.state().num_records == 4  # type: ignore[union-attr]
    assert outcomes["old"] > 0
    # After an application crash the un-synced ref rename is visible; after a power
    # loss it is not (the directory fsync of refs/ is the commit's last operation).
    assert (outcomes["new"] > 0) is not power_loss


# -- a data file moved in from the store's quarantine (the ingest's path) ---------------------


def prepare_quarantined(root: Path) -> tuple[Multihash, AddData, Path]:
    """Like `prepare`, the data file written into the data store's quarantine (no checkpoint)."""
    ds = seeded_dataset(root, system_time=T)
    ds.commit(SCHEMA, system_time=T, expected_head=ds.head())
    slice_, data = write_parquet(ds.layout.data.quarantine_path(), 0, 4)
    head = ds.head()
    assert head is not None
    return head, AddData(new_data=slice_, new_watermark=T), data


def commit_quarantined(ds: Dataset, head: Multihash, event: AddData, data: Path) -> Multihash:
    assert event.new_data is not None
    pending = PendingEvent(event, data, data_digest=event.new_data.physical_hash.digest)
    (result,) = ds.commit_events([pending], system_time=T, expected_head=head)
    return result.new_head


def run_quarantined(root: Path, ops: FsOps) -> Multihash:
    head, event, data = prepare_quarantined(root)
    return commit_quarantined(reopen(root, ops), head, event, data)


def test_quarantined_data_file_is_moved_not_copied(tmp_path: Path) -> None:
    plan = plan_crashes(lambda ops: run_quarantined(tmp_path / "probe", ops))
    data_ops = [k for k, p in plan.trace if "/ds/data" in p]
    # adopt: mode, fsync of the file, rename, fsync of data/; no pending copy is created.
    assert data_ops == ["chmod", "fsync", "replace", "fsync_dir"]
    ref_replace = max(
        i for i, (k, p) in enumerate(plan.trace) if k == "replace" and p.endswith("head")
    )
    data_replace = next(
        i for i, (k, p) in enumerate(plan.trace) if "/ds/data" in p and k == "replace"
    )
    assert data_replace < ref_replace
    root = tmp_path / "probe"
    assert [p.name for p in (root / "ds" / "data").iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("power_loss", [False, True], ids=["app-crash", "power-loss"])
def test_crash_at_every_point_of_a_quarantined_commit(tmp_path: Path, power_loss: bool) -> None:
    plan = plan_crashes(lambda ops: run_quarantined(tmp_path / "probe", ops))
    new_head = run_quarantined(tmp_path / "reference", CrashAt(None))
    outcomes = {"old": 0, "new": 0}
    for n in plan.points():
        root = tmp_path / f"p{n}"
        old_head, event, data = prepare_quarantined(root)
        crash = CrashAt(n)
        with pytest.raises(SimulatedCrash):
            commit_quarantined(reopen(root, crash), old_head, event, data)
        if power_loss:
            crash.power_loss()
        after = reopen(root)
        head = after.head()
        assert head in (old_head, new_head), f"crash point {n}: head {head}"
        outcomes["new" if head == new_head else "old"] += 1
        report = verify_integrity(after)
        assert report.ok, f"crash point {n}: {report.problems}"
        if head == old_head:
            # A re-run writes its slice to a fresh quarantine file and commits it (the
            # object may already be stored: the duplicate is dropped).
            _slice, again = write_parquet(after.layout.data.quarantine_path(), 0, 4)
            assert commit_quarantined(after, old_head, event, again) == new_head
            assert not again.exists()
        assert verify_integrity(after).ok
        assert after.state() is not None and after.state().num_records == 4  # type: ignore[union-attr]
    assert outcomes["old"] > 0
    assert (outcomes["new"] > 0) is not power_loss
