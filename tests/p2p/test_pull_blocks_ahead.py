"""A pull's blocks written ahead: created read-only (named without a chmod), and named
meanwhile only in a clone's staging dataset, never in a live one before its commit."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from fbs.multiformats import Multihash
from p2p.errors import PeerUnavailable
from p2p.memory_source import Faults, MemorySource
from p2p.receive import PendingBlocks, receive_block
from p2p.sync import pull_dataset
from storage.fsutil import OBJECT_MODE
from storage.object_store import DiskObjectStore
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_blocks_written_ahead_are_named_with_the_object_mode(tmp_path: Path) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", 1)
    blocks = [receive_block(raw, h) for h, raw, _b in ds.iter_blocks()]
    store = DiskObjectStore(tmp_path / "blocks")
    pending = PendingBlocks(store, blocks)
    pending.write()
    umask = os.umask(0)
    os.umask(umask)
    assert {_mode(p) for p in store.root.iterdir()} == {OBJECT_MODE & ~umask}
    pending.adopt()
    assert {_mode(store.path_of(b.hash)) for b in blocks} == {OBJECT_MODE & ~umask}


def test_adopting_a_writable_quarantine_file_makes_it_read_only(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "data")
    data = b"an object"
    q = store.quarantine_path()
    q.write_bytes(data)
    os.chmod(q, 0o600)
    h = Multihash.sha3_256(data)
    store.adopt_many([(h, q, h.digest)])
    assert _mode(store.path_of(h)) == OBJECT_MODE


@pytest.mark.parametrize("grow", [False, True], ids=["clone", "update"])
def test_a_refused_pull_names_blocks_in_staging_only(tmp_path: Path, grow: bool) -> None:
    src = new_workspace(tmp_path / "src")
    ds = make_dataset(src, "prices", tmp_path / "files", 2)
    dst: Workspace = new_workspace(tmp_path / "dst")
    if grow:
        asyncio.run(pull_dataset(dst, MemorySource.of_dataset(ds), alias="prices"))
        add_slices(ds, tmp_path / "more", 2)
    held = set(dst.get("prices").layout.blocks.iter_hashes()) if grow else set()
    missing = frozenset(h for h in ds.layout.data.iter_hashes())
    with pytest.raises(PeerUnavailable):
        asyncio.run(
            pull_dataset(dst, MemorySource.of_dataset(ds, Faults(missing=missing)), alias="prices")
        )
    if grow:
        assert set(dst.get("prices").layout.blocks.iter_hashes()) == held
        return
    [staged] = [p for p in (dst.root / "staging").iterdir() if p.is_dir()]
    named = {p.name for p in (staged / "blocks").iterdir() if not p.name.startswith(".")}
    assert named == {str(h) for h, _r, _b in ds.iter_blocks()}
    assert dst.list() == []
