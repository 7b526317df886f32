"""verify sees everything: a lost head, missing blocks and objects,
unreadable files and temporary files left by a killed writer; gc removes the stale ones.

The failures ruled out: a deleted ``refs/head`` must not make ``verify --integrity`` say
``OK (0 blocks, 0 objects)`` nor reads return an empty dataset; ``.pending-*`` files
left by kill -9 during ingest must be reported by ``verify`` and, once stale, removed by ``gc``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fbs.model import AddData
from storage.dataset import Dataset
from storage.errors import CorruptChain
from storage.fsutil import pending_name
from storage.gc import find_temp_files
from storage.layout import DatasetLayout
from storage.verify import ProblemKind, verify_integrity
from storage.workspace import Workspace
from tests.storage.test_dataset import SCHEMA, write_checkpoint, write_parquet
from tests.storage.test_verify import sound

HOUR = 3600.0


def _workspace(tmp_path: Path) -> tuple[Workspace, Dataset]:
    ws = Workspace.init(tmp_path / "ws")
    ds = ws.create_dataset("acme/things")
    ds.commit(SCHEMA, expected_head=ds.head())
    s0, p0 = write_parquet(tmp_path / "p0", 0, 3)
    cp = write_checkpoint(tmp_path / "c0", b"cp0")
    ds.commit(
        AddData(new_data=s0, new_checkpoint=cp),
        expected_head=ds.head(),
        data_file=p0,
        checkpoint_file=tmp_path / "c0",
    )
    return ws, ds


def _kinds(report: object) -> set[ProblemKind]:
    return {p.kind for p in report.problems}  # type: ignore[attr-defined]


def _aged(path: Path, age_s: float) -> Path:
    t = path.stat().st_mtime - age_s
    os.utime(path, (t, t))
    return path


# -- the head -------------------------------------------------------------------------------


def test_deleted_head_with_blocks_is_a_problem(tmp_path: Path) -> None:
    ds, _ = sound(tmp_path)
    ds.layout.head_path.unlink()
    report = verify_integrity(Dataset.open(ds.layout))
    assert not report.ok and report.head is None
    assert _kinds(report) == {ProblemKind.HEAD_MISSING}
    assert "5 block(s) are stored" in report.problems[0].message


def test_empty_dataset_is_fine_unless_a_head_is_required(tmp_path: Path) -> None:
    ds = Dataset.create(DatasetLayout(tmp_path / "e"))
    assert verify_integrity(ds).ok
    report = verify_integrity(ds, require_head=True)
    assert _kinds(report) == {ProblemKind.HEAD_MISSING}


def test_workspace_refuses_to_open_a_dataset_without_head(tmp_path: Path) -> None:
    ws, ds = _workspace(tmp_path)
    ds.layout.head_path.unlink()
    with pytest.raises(CorruptChain, match="refs/head is missing"):
        ws.get("acme/things")
    # verify still gets at it, and names the damage
    damaged = ws.get("acme/things", require_head=False)
    report = verify_integrity(damaged, require_head=True)
    assert _kinds(report) == {ProblemKind.HEAD_MISSING}


def test_head_block_missing(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    path = ds.layout.blocks.path_of(hashes[-1])
    os.chmod(path, 0o644)
    path.unlink()
    report = verify_integrity(ds)
    assert _kinds(report) == {ProblemKind.BLOCK_MISSING}
    assert report.problems[0].block_hash == hashes[-1]


def test_referenced_objects_absent(tmp_path: Path) -> None:
    _ws, ds = _workspace(tmp_path)
    for store in (ds.layout.data, ds.layout.checkpoints):
        for h in list(store.iter_hashes()):
            os.chmod(store.path_of(h), 0o644)
            store.path_of(h).unlink()
    report = verify_integrity(ds)
    assert _kinds(report) == {ProblemKind.DATA_MISSING, ProblemKind.CHECKPOINT_MISSING}


def test_truncated_checkpoint(tmp_path: Path) -> None:
    _ws, ds = _workspace(tmp_path)
    (h,) = list(ds.layout.checkpoints.iter_hashes())
    path = ds.layout.checkpoints.path_of(h)
    os.chmod(path, 0o644)
    os.truncate(path, 1)
    assert _kinds(verify_integrity(ds)) == {ProblemKind.CHECKPOINT_SIZE}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_files_are_problems_not_exceptions(tmp_path: Path) -> None:
    _ws, ds = _workspace(tmp_path)
    (h,) = list(ds.layout.data.iter_hashes())
    os.chmod(ds.layout.data.path_of(h), 0)
    assert ProblemKind.UNREADABLE in _kinds(verify_integrity(ds))
    os.chmod(ds.layout.head_path, 0)
    assert _kinds(verify_integrity(ds)) == {ProblemKind.UNREADABLE}


# -- temporary files ------------------------------------------------------------------------


def _leave_temp_files(ds: Dataset) -> tuple[Path, Path, Path]:
    """What kill -9 during ingest leaves: temp files in blocks/ and data/ (and refs/)."""
    paths = []
    for directory, age in (
        (ds.layout.blocks_dir, 2 * HOUR),
        (ds.layout.data_dir, 2 * HOUR),
        (ds.layout.refs_dir, 60.0),
    ):
        p = directory / pending_name()
        p.write_bytes(b"half written")
        paths.append(_aged(p, age))
    return paths[0], paths[1], paths[2]


def test_verify_warns_about_temp_files_without_failing(tmp_path: Path) -> None:
    _ws, ds = _workspace(tmp_path)
    stale_block, stale_data, young = _leave_temp_files(ds)
    report = verify_integrity(ds)
    assert report.ok  # invisible to readers, never referenced: the dataset is sound
    by_path = {w.path: w for w in report.warnings}
    assert set(by_path) == {str(stale_block), str(stale_data), str(young)}
    assert by_path[str(stale_data)].kind == "stale-temp-file"
    assert by_path[str(stale_data)].message.startswith("stale temporary file ")
    assert "odf gc" in by_path[str(stale_data)].message
    assert by_path[str(young)].kind == "temp-file"


def test_find_temp_files_ignores_dirs_and_missing(tmp_path: Path) -> None:
    (tmp_path / pending_name()).mkdir()
    assert find_temp_files([tmp_path, tmp_path / "missing"]) == ()


def test_workspace_gc_removes_only_stale_temp_files(tmp_path: Path) -> None:
    ws, ds = _workspace(tmp_path)
    stale_block, stale_data, young = _leave_temp_files(ds)
    ws_level = ws.root / pending_name()  # an index write killed before its rename
    ws_level.write_bytes(b"{}")
    _aged(ws_level, 2 * HOUR)
    dry = ws.gc(dry_run=True)
    assert set(dry.temp_removed) == {stale_block, stale_data, ws_level}
    assert dry.temp_kept == (young,)
    assert stale_block.exists() and stale_data.exists()
    report = ws.gc()
    assert set(report.temp_removed) == {stale_block, stale_data, ws_level}
    assert not stale_block.exists() and not stale_data.exists() and not ws_level.exists()
    assert young.exists()
    assert verify_integrity(ds).ok


def test_gc_cleans_temp_files_of_a_dataset_it_skips(tmp_path: Path) -> None:
    ws, ds = _workspace(tmp_path)
    stale_block, stale_data, _young = _leave_temp_files(ds)
    ds.layout.head_path.unlink()
    report = ws.gc()
    assert "acme/things" in report.skipped
    assert report.data == {}  # nothing referenced can be proven: no object deleted
    assert {stale_block, stale_data} <= set(report.temp_removed)


def test_os_errors_become_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same as above without relying on file modes (runs as root too)."""
    from storage.object_store import DiskObjectStore

    _ws, ds = _workspace(tmp_path)

    def denied(self: DiskObjectStore, h: object) -> None:
        raise PermissionError(13, "Permission denied", str(self.root / str(h)))

    monkeypatch.setattr(DiskObjectStore, "check", denied)
    report = verify_integrity(ds)
    assert ProblemKind.UNREADABLE in _kinds(report)
    assert "Permission denied" in report.problems[0].message

    def head_denied(self: Dataset) -> None:
        raise PermissionError(13, "Permission denied", "refs/head")

    monkeypatch.setattr(Dataset, "head", head_denied)
    assert _kinds(verify_integrity(ds)) == {ProblemKind.UNREADABLE}
